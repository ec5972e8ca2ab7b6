"""The packaging: pipelines/ installs as gguf_audit.pipelines, every package ships, the library never imports it."""

from __future__ import annotations

import ast
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

from corpus import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
LIBRARY = REPO / "gguf_audit"
PIPELINES = REPO / "pipelines"


def _package_dirs(root: Path, name: str) -> set[str]:
    """Dotted names of ``root`` and every folder below it with an ``__init__.py`` (links not followed)."""
    found = {name}
    for init in root.rglob("__init__.py"):
        rel = init.parent.relative_to(root)
        if rel.parts and not any((root / Path(*rel.parts[: i + 1])).is_symlink() for i in range(len(rel.parts))):
            found.add(".".join([name, *rel.parts]))
    return found


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (inside functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _library_modules() -> list[Path]:
    return [p for p in LIBRARY.rglob("*.py") if "pipelines" not in p.relative_to(LIBRARY).parts]


def test_every_package_is_listed() -> None:
    """find cannot see through package-dir, so the packages are listed: a new folder must be added."""
    expected = _package_dirs(LIBRARY, "gguf_audit") | _package_dirs(PIPELINES, "gguf_audit.pipelines")
    assert set(SETUPTOOLS["packages"]) == expected | {"gguf_audit.configs"}
    assert SETUPTOOLS["package-dir"] == {"gguf_audit.pipelines": "pipelines", "gguf_audit.configs": "configs"}


def test_every_config_ships() -> None:
    """configs/ installs as gguf_audit.configs with its TOML files as package data."""
    assert (REPO / "configs" / "__init__.py").is_file()
    assert SETUPTOOLS["package-data"]["gguf_audit.configs"] == ["*.toml"]
    from importlib.resources import files

    shipped = sorted(e.name for e in files("gguf_audit.configs").iterdir() if e.name.endswith(".toml"))
    assert shipped == sorted(p.name for p in (REPO / "configs").glob("*.toml"))


def test_py_typed_ships() -> None:
    assert (LIBRARY / "py.typed").is_file()
    assert "py.typed" in SETUPTOOLS["package-data"]["gguf_audit"]


def test_checkout_sees_the_pipelines_under_their_installed_name() -> None:
    """gguf_audit/pipelines links to pipelines/: mypy, which cannot follow package-dir, checks gguf_audit.pipelines."""
    link = LIBRARY / "pipelines"
    assert link.is_symlink() and link.resolve() == PIPELINES.resolve()
    assert PYPROJECT["tool"]["mypy"]["files"] == ["gguf_audit"]


def test_pipeline_commands_are_entry_points() -> None:
    declared = PYPROJECT["project"]["entry-points"]["gguf_audit.commands"]
    assert declared == {
        "config": "gguf_audit.pipelines.commands.config:add_config_parser",
        "demo": "gguf_audit.pipelines.commands.demo:add_demo_parser",
        "diff": "gguf_audit.pipelines.commands.diff:add_diff_parser",
        "export": "gguf_audit.pipelines.commands.export:add_export_parser",
        "report": "gguf_audit.pipelines.commands.report:add_report_parser",
        "scan": "gguf_audit.pipelines.commands.scan:add_scan_parser",
        "snapshot": "gguf_audit.pipelines.commands.tables:add_snapshot_parser",
        "sql": "gguf_audit.pipelines.commands.sql:add_sql_parser",
        "tables": "gguf_audit.pipelines.commands.tables:add_tables_parser",
    }
    installed = {ep.name: ep.value for ep in entry_points(group="gguf_audit.commands")}
    assert installed == declared  # the install is up to date with pyproject.toml


def test_the_library_never_imports_the_pipelines() -> None:
    for path in _library_modules():
        wrong = {m for m in _imports(path) if m == "gguf_audit.pipelines" or m.startswith("gguf_audit.pipelines.")}
        assert not wrong, f"{path.relative_to(REPO)} imports {sorted(wrong)}"


def test_nothing_imports_a_top_level_pipelines() -> None:
    """From a checkout `import pipelines` happens to work; installed it does not exist."""
    for folder in ("gguf_audit", "pipelines", "tests", "benchmarks"):
        for path in (REPO / folder).rglob("*.py"):
            wrong = {m for m in _imports(path) if m == "pipelines" or m.startswith("pipelines.")}
            assert not wrong, f"{path.relative_to(REPO)} imports {sorted(wrong)}"


def test_the_readme_is_a_front_door() -> None:
    """At most 15 KB, and every document it links to exists."""
    import re

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 15 * 1024
    for link in re.findall(r"\]\(([^)#]+)\)", readme):
        if "://" not in link:
            assert (REPO / link).exists(), link
