"""The house: imports only go down the pipeline, no cycles, no dodges, short commands."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import tomllib

from abbench import cli, registry

PKG = Path(__file__).resolve().parents[2] / "abbench"
#: the function-local imports of abbench modules: ``abbench.load_samples`` keeps
#: ``import abbench`` light (each server's reaper imports it); the ``abbench`` command
#: imports the CLI inside its Ctrl-C guard (a Ctrl-C during imports exits 130)
LAZY = {("abbench", "abbench.history.series"), ("abbench.__main__", "abbench.cli")}


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports() -> dict[str, set[tuple[str, bool]]]:
    """module -> {(imported abbench module, whether the import is inside a function)}."""
    mods = {_module(p): p for p in PKG.rglob("*.py")}
    out: dict[str, set[tuple[str, bool]]] = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))]
        local = {id(n) for f in funcs for n in ast.walk(f)}
        found: set[tuple[str, bool]] = set()
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from abbench import registry`` depends on abbench.registry, not on
                # the package's __init__ (which every import runs anyway)
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods
                         else node.module for a in node.names]
            for n in names:
                if n.startswith("abbench"):
                    while n not in mods and "." in n:
                        n = n.rsplit(".", 1)[0]
                    if n in mods and n != mod:
                        found.add((n, id(node) in local))
        out[mod] = found
    return out


def test_no_import_cycle_counting_function_local_imports() -> None:
    graph = {m: {t for t, _ in deps} for m, deps in _imports().items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle = [*stack[stack.index(t):], t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_no_function_local_import_of_abbench_and_no_type_checking_guard() -> None:
    local = sorted((m, t) for m, deps in _imports().items() for t, inside in deps
                   if inside and (m, t) not in LAZY)
    assert local == []
    guarded = [p.name for p in PKG.rglob("*.py") if "if TYPE_CHECKING" in p.read_text()]
    assert guarded == []


def test_every_subpackage_is_a_layer_of_the_contract() -> None:
    conf = tomllib.loads((PKG.parent / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = conf["contracts"][0]["layers"]
    tops = {f"abbench.{p.stem}" for p in PKG.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists())
            or (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))}
    assert tops == set(layers)


def test_every_command_body_is_at_most_15_lines() -> None:
    for name, fn in vars(cli).items():
        target = getattr(fn, "__wrapped__", None)
        if target is None or not callable(target):
            continue
        src = inspect.getsource(target)
        tree = ast.parse(src).body[0]
        assert isinstance(tree, ast.FunctionDef)
        body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body  # docstring
        lines = body[-1].end_lineno - body[0].lineno + 1  # type: ignore[operator]
        assert lines <= 15, (name, lines)


def test_builtin_entry_points_match_the_registry_table() -> None:
    conf = tomllib.loads((PKG.parent / "pyproject.toml").read_text())
    declared = conf["project"]["entry-points"]
    assert {g: declared[g] for g in registry.GROUPS} == registry.BUILTIN


def test_one_http_client_every_call_to_a_server_goes_through_the_transport() -> None:
    """Readiness, health, tokenize, completions, props, metrics and flushes: only
    abbench/server/http.py imports an HTTP library."""
    users = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] in ("requests", "urllib3", "http", "httpx", "aiohttp")
                   for n in names):
                users.append(str(path.relative_to(PKG)))
    assert sorted(set(users)) == ["server/http.py"]


def test_module_names_are_unique_and_say_their_role() -> None:
    """No two modules of abbench/ share a file name (``__init__.py`` aside): a name such
    as ``quality.py`` in three folders says neither its stage nor its job."""
    names: dict[str, list[str]] = {}
    for p in PKG.rglob("*.py"):
        if p.name != "__init__.py":
            names.setdefault(p.name, []).append(str(p.relative_to(PKG)))
    assert {n: ps for n, ps in names.items() if len(ps) > 1} == {}
