"""The package's shape (issue 48), read from the source with ``ast``: the layers import only
downward, no modules import each other in a circle, and no module is over 600 lines.

The layers, lowest first: ``kernels`` <- ``shards`` <- the index (``settopk/index/``) <- ``jobs``
and ``ray`` (side by side, neither importing the other) <- the command line (``settopk/cli.py``).
``configs`` and ``errors`` sit beside the lowest layers; the public facade ``settopk`` (its
``__init__``, names loaded lazily) may be imported from the layers above the index. The benchmark
(``settopk/jobs/bench/``) measures the job and Ray Data side by side, so it sits above both. Every ``import`` counts, at module level or
inside a function, except those under ``if TYPE_CHECKING:`` (annotations only).
"""

import ast
import functools
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "settopk"
MAX_LINES = 600

# What each top-level part of settopk may import from settopk (besides itself).
ALLOWED = {
    "errors": set(),
    "configs": {"errors", "kernels"},
    "kernels": {"errors"},
    "shards": {"errors", "kernels", "configs"},
    "index": {"errors", "kernels", "shards", "configs"},
    "jobs": {"errors", "kernels", "shards", "configs", "index", ""},
    "ray": {"errors", "kernels", "shards", "configs", "index", ""},
    "bench": {"errors", "kernels", "shards", "configs", "index", "", "jobs", "ray"},
    "cli": {"errors", "kernels", "shards", "configs", "index", "", "jobs", "ray", "bench"},
    "__main__": {"cli"},
    "": {"errors", "kernels", "shards", "configs", "index", "jobs", "ray", "cli"},  # settopk/__init__.py
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _runtime_imports(tree: ast.AST):
    """Every Import / ImportFrom node, leaving out ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(name: str, is_package: bool, node, modules) -> list[str]:
    """The settopk modules an import statement of module ``name`` loads."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module
    subs = [f"{prefix}.{a.name}" for a in node.names if f"{prefix}.{a.name}" in modules]
    # `from package import module` loads the module; the package itself only for other names.
    return subs + ([prefix] if len(subs) < len(node.names) else [])


@functools.lru_cache(maxsize=None)  # parsed once for every test here: the parse is most of their time
def _graph():
    modules = _modules()
    edges = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in _runtime_imports(tree):
            for target in _targets(name, path.name == "__init__.py", node, modules):
                if target.startswith("settopk") and target != name:
                    edges[name].add(target)
    return modules, edges


def _part(module: str) -> str:
    parts = module.split(".")
    if parts[1:3] == ["jobs", "bench"]:
        return "bench"
    return parts[1] if len(parts) > 1 else ""


def test_layers_import_only_downward():
    _, edges = _graph()
    wrong = sorted(f"{src} imports {dst}" for src, targets in edges.items() for dst in targets
                   if _part(dst) != _part(src) and _part(dst) not in ALLOWED[_part(src)])
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_import_circles():
    modules, edges = _graph()
    index, low, on_stack, stack, circles = {}, {}, set(), [], []
    counter = [0]

    def visit(v):  # Tarjan's strongly connected components, iterative over the successors
        work = [(v, iter(sorted(edges[v] & modules.keys())))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, successors = work[-1]
            for w in successors:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w] & modules.keys()))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    assert not circles, f"modules importing each other in a circle: {circles}"


def test_no_module_over_600_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_checks_see_a_wrong_import(tmp_path):
    # The parser resolves relative imports and skips TYPE_CHECKING blocks, as the checks above rely on.
    tree = ast.parse("from typing import TYPE_CHECKING\nfrom ..jobs import run\nif TYPE_CHECKING:\n    from ..ray import search\n")
    modules = {"settopk.jobs.run": None, "settopk.ray.search": None}
    found = [t for node in _runtime_imports(tree) for t in _targets("settopk.kernels.x", False, node, modules)]
    assert "settopk.jobs.run" in found and "settopk.ray.search" not in found
