"""The import graph of gguf-audit: layers point down, no cycle, pure layers import no I/O.

Every module of ``gguf_audit/`` and ``pipelines/`` (installed as
``gguf_audit.pipelines``) is read with :mod:`ast`, never imported. Imports
inside functions count; imports under ``if TYPE_CHECKING:`` do not (they never
run). ``importlib.import_module("...")`` with a literal name counts as an import.

The layer table below is the one place the layers are declared, bottom to top
(``STYLE.md``'s "Layers"): a module may import modules of its own layer or of
a layer below, never above. A module no layer claims fails the test, so a new
module is placed on purpose.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from corpus import REPO, corpus_dir

# ---------------------------------------------------------------- the tables (adjust here)

# Bottom to top. Each entry names modules or packages (a package claims every
# module under it, except the root package ``gguf_audit``, which claims only its
# own ``__init__``); the longest matching name decides a module's layer.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "bottom",
        (
            "gguf_audit",
            "gguf_audit.errors",
            "gguf_audit.gguf_constants",
            "gguf_audit.bounded",
            "gguf_audit.findings",
            "gguf_audit.codes",
            "gguf_audit.redact",
            "gguf_audit.validate",
        ),
    ),
    ("format", ("gguf_audit.format",)),
    ("plan", ("gguf_audit.plan",)),
    ("decode", ("gguf_audit.decode",)),
    ("templates", ("gguf_audit.templates",)),
    # The pinned llama.cpp's names and bounds, as data (and the generator that reads its source).
    ("llama", ("gguf_audit.llama",)),
    ("checks", ("gguf_audit.checks",)),
    ("io", ("gguf_audit.io",)),
    ("samples", ("gguf_audit.samples",)),
    ("audit", ("gguf_audit.audit",)),
    ("compare", ("gguf_audit.compare",)),
    ("report", ("gguf_audit.report",)),
    ("tables", ("gguf_audit.tables",)),
    ("cli", ("gguf_audit.cli", "gguf_audit.shell", "gguf_audit.__main__")),
    # Test support shipped with the package; of the pipelines only the demo uses it (its sample collection).
    ("testing", ("gguf_audit.testing",)),
    # The batch jobs, in rooms by job (pipelines/__init__.py says what each holds).
    ("pipelines.config", ("gguf_audit.pipelines", "gguf_audit.pipelines.config")),
    # The driver's memory: mapped files, the ledger, the phase boundaries that hand memory back.
    ("pipelines.spill", ("gguf_audit.pipelines.spill",)),
    ("pipelines.listing", ("gguf_audit.pipelines.listing",)),
    ("pipelines.store", ("gguf_audit.pipelines.store",)),
    # What a dask worker runs (a batch's audit, a compare task): below the driver, beside nothing it need not load.
    ("pipelines.work", ("gguf_audit.pipelines.work",)),
    ("pipelines.nights", ("gguf_audit.pipelines.nights",)),
    ("pipelines.scan", ("gguf_audit.pipelines.scan",)),
    ("pipelines.commands", ("gguf_audit.pipelines.commands",)),
]

# Pure layers: bytes and values in, values out. No I/O, no processes, no threads.
PURE: tuple[str, ...] = (
    "gguf_audit.format",
    "gguf_audit.checks",
    "gguf_audit.plan",
    "gguf_audit.decode",
    "gguf_audit.templates.inspect",
)
IMPURE_LIBRARIES: tuple[str, ...] = (
    "fsspec",
    "aiohttp",
    "s3fs",
    "dask",
    "distributed",
    "pyarrow",
    "duckdb",
    "subprocess",
    "socket",
    "selectors",
    "threading",
    "asyncio",
    "multiprocessing",
)

# Test-only dependencies and the one module allowed to import each.
TEST_ONLY: dict[str, tuple[str, ...]] = {
    "hypothesis": ("gguf_audit.testing.strategies",),
}

# Where the modules live, and the package name each folder is imported as.
ROOTS: tuple[tuple[str, str], ...] = (("gguf_audit", "gguf_audit"), ("pipelines", "gguf_audit.pipelines"))
# Names the same modules are imported by from elsewhere (pipelines/ before it moved under gguf_audit).
ALIASES: dict[str, str] = {"pipelines": "gguf_audit.pipelines"}

# ---------------------------------------------------------------- reading the tree


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's target, where it stands."""

    source: str
    target: str
    """The imported module (``from m import name`` gives ``m.name`` when that is a module)."""
    path: Path
    line: int
    in_function: bool

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def _module_name(root: Path, package: str, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


@cache
def modules() -> dict[str, Path]:
    """Every project module by its dotted name."""
    found: dict[str, Path] = {}
    for folder, package in ROOTS:
        root = REPO / folder
        for path in sorted(root.rglob("*.py")):
            found[_module_name(root, package, path)] = path
    assert found, f"no modules found under {REPO}"
    return found


def _canonical(name: str) -> str:
    for alias, real in ALIASES.items():
        if name == alias or name.startswith(alias + "."):
            return real + name[len(alias) :]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node that runs, with whether it runs inside a function (``if TYPE_CHECKING:`` bodies left out)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield sub, in_function
                yield from _walk(sub, in_function)
            continue
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield child, inner
        yield from _walk(child, inner)


def _resolve_from(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return _canonical(node.module or "")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


@cache
def imports() -> tuple[Import, ...]:
    """Every import of every project module (external ones included)."""
    known = modules()
    found: list[Import] = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, in_function in _walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [_canonical(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve_from(module, path, node)
                subs = [f"{base}.{alias.name}" for alias in node.names]
                targets = [sub if sub in known else base for sub in subs]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute | ast.Name)
                and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                targets = [_canonical(node.args[0].value)]
            for target in dict.fromkeys(targets):
                found.append(Import(module, target, path, getattr(node, "lineno", 0), in_function))
    return tuple(found)


def _project(target: str) -> str | None:
    """The project module an import target names, or None for an outside library."""
    known = modules()
    if target in known:
        return target
    if target == "gguf_audit" or target.startswith("gguf_audit."):
        return target  # a project name that is no module: reported by its own test
    return None


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _claims(prefix: str, module: str) -> bool:
    return module == prefix if prefix == "gguf_audit" else _within(module, prefix)


def layer_of(module: str) -> tuple[int, str] | None:
    best: tuple[int, int, str] | None = None
    for index, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _claims(prefix, module) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index, name)
    return None if best is None else (best[1], best[2])


# ---------------------------------------------------------------- the tests


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in modules() if layer_of(m) is None)
    assert not unplaced, (
        "modules no layer claims (add each to LAYERS in tests/test_layers.py, or move it): " + ", ".join(unplaced)
    )


def test_project_imports_name_modules_that_exist() -> None:
    missing = [
        f"{imp.where()}: {imp.target}"
        for imp in imports()
        if _project(imp.target) is not None and imp.target not in modules()
    ]
    assert not missing, "imports of project modules that do not exist:\n" + "\n".join(missing)


def test_imports_point_down_the_layers() -> None:
    upward: list[str] = []
    for imp in imports():
        target = _project(imp.target)
        if target is None or target not in modules():
            continue
        source_layer, target_layer = layer_of(imp.source), layer_of(target)
        if source_layer is None or target_layer is None:
            continue  # reported by test_every_module_has_a_layer
        if target_layer[0] > source_layer[0]:
            kind = " (inside a function)" if imp.in_function else ""
            upward.append(f"{imp.where()}: {imp.source} [{source_layer[1]}] imports {target} [{target_layer[1]}]{kind}")
    order = " < ".join(name for name, _ in LAYERS)
    assert not upward, f"imports that point up the layers ({order}):\n" + "\n".join(upward)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_import_cycle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    edges: dict[tuple[str, str], Import] = {}
    for imp in imports():
        if imp.target in graph:
            graph[imp.source].add(imp.target)
            edges.setdefault((imp.source, imp.target), imp)
    report: list[str] = []
    for component in _cycles(graph):
        members = set(component)
        report.append("cycle among " + ", ".join(component) + ":")
        for (src, dst), imp in sorted(edges.items()):
            if src in members and dst in members:
                kind = " (inside a function)" if imp.in_function else ""
                report.append(f"  {imp.where()}: {src} -> {dst}{kind}")
    assert not report, "import cycles (imports inside functions count):\n" + "\n".join(report)


def test_pure_layers_import_no_io_library() -> None:
    impure = [
        f"{imp.where()}: {imp.source} imports {imp.target}"
        for imp in imports()
        if any(_within(imp.source, p) for p in PURE) and any(_within(imp.target, lib) for lib in IMPURE_LIBRARIES)
    ]
    assert not impure, "pure modules importing I/O, process or thread libraries:\n" + "\n".join(impure)


# The house limit on a module's length (STYLE.md: "No module over 600 lines").
MAX_MODULE_LINES = 600


def test_no_module_is_over_the_line_limit() -> None:
    long = sorted(
        f"{path.relative_to(REPO)}: {n} lines"
        for path in set(modules().values())
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    )
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them):\n" + "\n".join(long)


def test_test_only_dependencies_stay_in_their_module() -> None:
    leaks = [
        f"{imp.where()}: {imp.source} imports {imp.target}"
        for imp in imports()
        for library, allowed in TEST_ONLY.items()
        if _within(imp.target, library) and imp.source not in allowed
    ]
    assert not leaks, "test-only dependencies imported outside their module:\n" + "\n".join(leaks)


def test_the_checker_sees_what_it_must() -> None:
    """The ast reading itself: a function-level import counts, a TYPE_CHECKING one does not."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import fsspec\nelse:\n    import json\n"
        "def f():\n    import socket\n"
    )
    seen = {(a.name, inner) for node, inner in _walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert seen == {("json", False), ("socket", True)}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"c"}, "d": {"a"}}) == [["a", "b"], ["c"]]
    assert layer_of("gguf_audit.format.parser") == (1, "format")
    assert layer_of("gguf_audit") == (0, "bottom")
    assert layer_of("gguf_audit.unplaced") is None
    assert layer_of("gguf_audit.testing.strategies")[1] == "testing"
    assert layer_of("gguf_audit.pipelines.scan.run") == (len(LAYERS) - 2, "pipelines.scan")
    assert layer_of("gguf_audit.pipelines") == layer_of("gguf_audit.pipelines.config")
    assert _canonical("pipelines.scan.run") == "gguf_audit.pipelines.scan.run"


# What importing the format layer and the structural checks may not load, at run time.
FORBIDDEN_AT_IMPORT = ("fsspec", "aiohttp", "s3fs", "dask", "distributed", "pyarrow", "duckdb", "jinja2")


def test_format_and_checks_import_no_io_library() -> None:
    path = corpus_dir() / "models" / "tiny-llama-Q4_K_M.gguf"
    code = f"""
import sys
from gguf_audit.format import parse_header
from gguf_audit.checks.structure import check_structure
data = open({str(path)!r}, "rb").read()
header = parse_header(data, len(data))
list(check_structure(header, len(data)))
loaded = [m for m in {FORBIDDEN_AT_IMPORT!r} if m in sys.modules]
print(",".join(loaded))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == ""


def test_only_the_scan_room_imports_dask() -> None:
    """dask and distributed are the scan's: listing, the store, nights and commands run without a cluster."""
    leaks = [
        f"{imp.where()}: {imp.source} imports {imp.target}"
        for imp in imports()
        if (_within(imp.target, "dask") or _within(imp.target, "distributed"))
        and not _within(imp.source, "gguf_audit.pipelines.scan")
    ]
    assert not leaks, "dask imported outside gguf_audit.pipelines.scan:\n" + "\n".join(leaks)


def test_only_the_demo_builds_on_test_support() -> None:
    """The batch jobs never lean on ``gguf_audit.testing``; ``gguf-audit demo`` writes its sample collection with it."""
    allowed = ("gguf_audit.pipelines.commands.demo",)
    leaks = [
        f"{imp.where()}: {imp.source} imports {imp.target}"
        for imp in imports()
        if _within(imp.source, "gguf_audit.pipelines")
        and _within(imp.target, "gguf_audit.testing")
        and imp.source not in allowed
    ]
    assert not leaks, "pipelines import test support:\n" + "\n".join(leaks)
    assert any(imp.source in allowed and _within(imp.target, "gguf_audit.testing") for imp in imports())


# The worker side of a night, as a dask worker unpickles it: the task functions' modules.
WORKER_TASKS = ("gguf_audit.pipelines.work.execute", "gguf_audit.pipelines.work.compare_task")
# Rooms a worker never needs: the listing (and, through it, the Hub's client), the driver, nights, commands.
# (The spill room is allowed: the data files' writer ends its layout trial at a phase boundary.)
NOT_ON_WORKERS = (
    "gguf_audit.pipelines.listing",
    "gguf_audit.pipelines.scan",
    "gguf_audit.pipelines.nights",
    "gguf_audit.pipelines.commands",
    "dask",
    "distributed",
)


def test_worker_tasks_import_no_driver_room() -> None:
    """A worker that unpickles a task loads the library, the store and the worker room: no listing, no driver."""
    code = f"""
import sys
for name in {WORKER_TASKS!r}:
    __import__(name)
print(",".join(sorted(m for m in sys.modules if any(m == r or m.startswith(r + ".") for r in {NOT_ON_WORKERS!r}))))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "", f"a worker's imports load driver rooms: {result.stdout.strip()}"


def test_worker_tasks_statically_import_no_driver_room() -> None:
    """The same closure read from the source (imports inside functions count), so a lazy import cannot hide one."""
    graph: dict[str, set[str]] = {}
    for imp in imports():
        if imp.target in modules():
            graph.setdefault(imp.source, set()).add(imp.target)
    seen: set[str] = set()
    todo = list(WORKER_TASKS)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parents = [module.rsplit(".", n)[0] for n in range(1, module.count("."))]  # Python runs each package's
        todo.extend(graph.get(module, set()) | {p for p in parents if p in modules()})
    leaks = sorted(m for m in seen if any(_within(m, room) for room in NOT_ON_WORKERS))
    assert not leaks, "modules a worker task reaches that belong to the driver: " + ", ".join(leaks)


# The house limit on a function's length (STYLE.md: "Functions stay under 60 lines"), held where it is kept.
MAX_FUNCTION_LINES = 60
FUNCTION_LIMIT_HELD = ("gguf_audit.pipelines", "gguf_audit.cli")


def test_no_function_is_over_the_line_limit() -> None:
    long = []
    for module, path in modules().items():
        if not any(_within(module, p) for p in FUNCTION_LIMIT_HELD):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.name}, {n} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(sorted(long))


# The rooms of the pipelines that have a face (their ``__init__``); config is one module, its own face.
ROOMS = ("listing", "store", "nights", "work", "spill", "scan", "commands")


def _room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["gguf_audit", "pipelines"] or len(parts) < 3 or parts[2] not in ROOMS:
        return None
    return parts[2]


def _room_imports(path: Path) -> Iterator[tuple[ast.ImportFrom | ast.Import, str]]:
    """Each import statement of ``path`` naming a pipelines room's module or face, with the module it names."""
    for node, _ in _walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _room_of(_canonical(node.module)) is not None:
                yield node, _canonical(node.module)
        elif isinstance(node, ast.Import):
            yield from ((node, _canonical(a.name)) for a in node.names if _room_of(_canonical(a.name)) is not None)


def test_imports_across_rooms_go_through_the_face() -> None:
    """A room's modules are its own: other rooms import what it offers from its ``__init__``."""
    past = []
    for module, path in modules().items():
        source = _room_of(module) if _within(module, "gguf_audit.pipelines") else "outside"
        for node, named in _room_imports(path):
            if _room_of(named) != source and named.count(".") > 2:
                past.append(f"{path.relative_to(REPO)}:{node.lineno}: {module} imports {named}")
    assert not past, "imports that reach past a room's face:\n" + "\n".join(sorted(past))


def _face_exports(room: str) -> list[str]:
    tree = ast.parse(modules()[f"gguf_audit.pipelines.{room}"].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [str(ast.literal_eval(node.value)[i]) for i in range(len(ast.literal_eval(node.value)))]
    return []


def test_each_face_exports_what_other_rooms_use() -> None:
    """No name on a face that no other room imports (a face is what the room offers, not its inventory); the
    benchmarks count as a user (``bench_driver.py`` watches the driver's phases)."""
    used: dict[str, set[str]] = {room: set() for room in ROOMS}
    users = [(module, path) for module, path in modules().items()]
    users += [(f"benchmarks.{p.stem}", p) for p in sorted((REPO / "benchmarks").glob("*.py"))]
    for module, path in users:
        source = _room_of(module) if module.count(".") > 2 else None
        for node, named in _room_imports(path):
            room = _room_of(named)
            if isinstance(node, ast.ImportFrom) and room is not None and named.count(".") == 2 and room != source:
                used[room].update(alias.name for alias in node.names)
    unused = [f"{room}: {name}" for room in ROOMS for name in _face_exports(room) if name not in used[room]]
    assert not unused, "names a face exports that no other room imports:\n" + "\n".join(unused)
