"""The import graph of `src/conch` has no cycle: dependencies point downward (STYLE).

Every import counts, including those inside functions (lazy), under `TYPE_CHECKING`, and loads
by name (`importlib.import_module("conch....")`, and any string literal naming a module of the
package in a call of `import_module`): a cycle or an upward arrow hidden there is still one in
the design. Importing `a.b.c` also runs the packages `a` and
`a.b`, except those the importing module is itself inside (they are already initialising).
"""

from __future__ import annotations

import ast
from pathlib import Path

import conch

SRC = Path(conch.__file__).parent


def _modules() -> dict[str, Path]:
    mods = {}
    for p in SRC.rglob("*.py"):
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _targets(name: str, mods: dict[str, Path], importer: str) -> set[str]:
    """`name` and the packages that importing it initialises (minus the importer's own)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    if not name:
        return set()
    parts = name.split(".")
    out = {name}
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if not (importer == pkg or importer.startswith(pkg + ".")):
            out.add(pkg)
    return out - {importer}


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        graph[m] |= {t for text in loaded_by_name(tree) for t in _targets(text, mods, m)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    graph[m] |= _targets(a.name, mods, m)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    graph[m] |= _targets(sub if sub in mods else base, mods, m)
    return graph


def _loads_by_name(call: ast.Call) -> bool:
    """`importlib.import_module(...)`, `import_module(...)` or `__import__(...)`."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("import_module", "__import__")


def loaded_by_name(tree: ast.AST) -> list[str]:
    """What a module may load by name: where it calls `import_module`, every string literal in
    it naming a `conch` module (`"conch.x.y"`, `"conch.x.y:attr"`), wherever the name is kept
    (a table of engines, a default argument)."""
    if not any(isinstance(n, ast.Call) and _loads_by_name(n) for n in ast.walk(tree)):
        return []
    return [
        n.value.partition(":")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("conch.")
    ]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    graph = import_graph()
    assert "conch.files.manifest" in graph["conch.scan.plan"]
    assert graph["conch.api.table"] >= {"conch.log.tablelog", "conch.scan", "conch.nested.api", "conch.nested"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


KNOWN: list[tuple[str, str]] = []  # edges closing a known cycle (none: add only with a reason)


def test_the_graph_sees_loads_by_name() -> None:
    """What `conch.api.enrich` did before: a table of engine modules loaded with importlib."""
    tree = ast.parse('ENGINES = {"spark": "conch.apps.x"}\ndef f(e):\n    importlib.import_module(ENGINES[e])')
    assert loaded_by_name(tree) == ["conch.apps.x"]
    assert loaded_by_name(ast.parse('NAME = "conch.apps.x"')) == []  # a string, never loaded


def test_no_import_cycles() -> None:
    graph = import_graph()
    for a, b in KNOWN:
        assert b in graph[a] and any({a, b} <= set(c) for c in cycles(graph)), f"{a} -> {b}: remove from KNOWN"
        graph[a] = graph[a] - {b}
    found = cycles(graph)
    assert not found, "import cycles (every import counts, lazy and TYPE_CHECKING ones too):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_core_layers_point_downward() -> None:
    """The commit layer never reaches up to the facade, and scans take handles, not a Table."""
    graph = import_graph()
    for low in (
        "conch.log.wal",
        "conch.files.manifest",
        "conch.log.tablelog",
        "conch.log.warehouse",
        "conch.maintain.vacuum",
        "conch.log.txn",
    ):
        assert not graph[low] & {"conch.api.table", "conch.api.catalog", "conch"}, low
    for mod in [m for m in graph if m.startswith("conch.scan")]:
        assert not graph[mod] & {"conch.api.table", "conch.api.catalog", "conch.log.tablelog"}, mod
    sqlite_users = {m for m, deps in graph.items() if "conch.log.metastore.sqlite" in deps}
    assert sqlite_users <= {"conch.log.metastore", "conch.log.metastore.registry"}, "SQLite stays inside metastore/"


# The layers of `src/conch`, bottom-up (docs/architecture.md, "Layers"): a module imports only its
# own layer and the ones below. `conch/__init__.py` (the public re-exports) stands above them all.
LAYERS = [
    "errors",
    "model",
    "expr",
    "files",
    "log",
    "write",
    "scan",
    "nested",
    "search",
    "maintain",
    "api",
    "engines",
    "apps",
]


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_import_points_down_the_layers() -> None:
    graph = import_graph()
    upward = sorted(
        f"{a} -> {b}"
        for a, deps in graph.items()
        for b in deps
        if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)  # type: ignore[operator]
    )
    assert not upward, "imports reaching a higher layer (name a Protocol below instead):\n" + "\n".join(upward)


def test_the_folder_list_is_the_architecture() -> None:
    """Every top-level entry of `conch/` is a layer (plus the re-exporting `__init__.py`), and no
    module outgrows 650 lines (STYLE: split by concept)."""
    entries = {p.stem for p in SRC.iterdir() if p.name not in {"__init__.py", "py.typed", "__pycache__"}}
    assert entries == set(LAYERS), sorted(entries ^ set(LAYERS))
    too_long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 650}
    assert not too_long, too_long
