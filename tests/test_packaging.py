"""The distribution: one top-level import package, beside packages that use the names settopk's
subpackages have (Hugging Face's ``kernels``, PyPI's ``configs``), and a cheap ``import settopk``."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEAVY = ("ray", "cupy", "numba")


def _run(*cmd, cwd=None, timeout=600) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def _loaded_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))"
    return json.loads(_run(sys.executable, "-c", probe, cwd=ROOT).strip().splitlines()[-1])


@pytest.mark.timeout(120)
def test_import_settopk_and_its_public_names_load_no_ray_cupy_or_numba():
    assert _loaded_after("import settopk") == []
    # The job as a function and the CLI's parser: Ray comes with the run, not with the name.
    assert _loaded_after("import settopk\nsettopk.score\nimport settopk.cli, settopk.jobs.score") == []


@pytest.mark.timeout(120)
def test_settopk_help_starts_no_ray():
    assert _loaded_after("import sys\nfrom settopk.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass") == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_wheel_has_one_top_level_package_and_lives_beside_kernels_and_configs(tmp_path):
    """``pip install settopk`` after Hugging Face's ``kernels`` and PyPI's ``configs``: all three
    import, and uninstalling settopk leaves the other two whole."""
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", ROOT)
    (wheel,) = (tmp_path / "dist").glob("settopk-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"settopk"}
    assert "settopk/kernels/cuda/bitslice_topk.cu" in names and "settopk/configs/local.yaml" in names

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    py = venv / "bin" / "python"
    _run(py, "-m", "pip", "install", "-q", "kernels", "configs")
    site = pathlib.Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    theirs = {p: p.read_bytes() for pkg in ("kernels", "configs") for p in (site / pkg).rglob("*.py")}
    assert theirs
    # --no-deps: the point is the files settopk installs, not Ray's.
    _run(py, "-m", "pip", "install", "-q", "--no-deps", wheel)
    both = "import kernels, configs, settopk; print(kernels.__file__, configs.__file__, settopk.__file__)"
    shown = _run(py, "-c", both, cwd=tmp_path).split()
    assert [pathlib.Path(f).parent.name for f in shown] == ["kernels", "configs", "settopk"]
    assert all(p.read_bytes() == data for p, data in theirs.items())
    _run(py, "-m", "pip", "uninstall", "-q", "-y", "settopk")
    assert not (site / "settopk").exists()
    assert all(p.exists() and p.read_bytes() == data for p, data in theirs.items())
    _run(py, "-c", "import kernels, configs", cwd=tmp_path)
