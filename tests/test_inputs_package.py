"""The input stage as a package: importable without Ray, one public surface, no private name shared."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import settopk.shards.inputs

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_importing_the_inputs_and_the_shard_stage_does_not_import_ray():
    code = "import settopk.shards.inputs, settopk.shards; import sys; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_public_surface_is_exported():
    assert sorted(settopk.shards.inputs.__all__) == sorted(set(settopk.shards.inputs.__all__))
    for name in settopk.shards.inputs.__all__:
        value = getattr(settopk.shards.inputs, name)
        assert name == "ON_INVALID" or value.__module__.startswith("settopk.shards.inputs."), name


def test_no_private_name_is_imported_across_modules():
    for path in sorted((ROOT / "settopk" / "shards").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("settopk.shards")):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.relative_to(ROOT)} imports {private} from {node.module}"
