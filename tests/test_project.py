"""Promises the project makes about itself, checked.

* `.ci/run` runs the README's test command, exactly;
* the README's chapter map names every stage with the command that starts it;
* the core (`tinyloop/`) imports nothing outside the standard library;
* `pyproject.toml` declares no runtime dependency.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

from tinyloop import stages

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _fenced_commands(text: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command() -> None:
    commands = _fenced_commands(README)
    assert "bash scripts/test.sh" in commands
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert "bash scripts/test.sh" in ci_lines


def test_readme_names_the_main_command() -> None:
    assert "bash scripts/benchmark.sh" in _fenced_commands(README)


def test_readme_chapter_map_names_every_stage() -> None:
    for stage in stages.STAGES:
        row = f"| `{stage.name}` |"
        assert row in README, f"README chapter map has no row for stage {stage.name!r}"
        assert f"`python -m tinyloop serve {stage.name}`" in README
        assert f"chapters/{stage.chapter}.md" in README


def _imported_top_level_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


# Tooling inside the package that may import a library by name, with why.
# The stages never may; tooling that runs without the library imports it
# when called (importlib), so that importing tinyloop needs nothing.
TOOLING_IMPORTS = {
    # a pytest plugin (-p tinyloop.exercises.reach): loaded only inside the
    # checker's pytest session, where pytest is there by definition
    "tinyloop/exercises/reach.py": {"pytest"},
}


def test_core_imports_only_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"tinyloop", "__future__"}
    offenders = {}
    for path in sorted((ROOT / "tinyloop").rglob("*.py")):
        name = str(path.relative_to(ROOT))
        outside = _imported_top_level_modules(path) - allowed - TOOLING_IMPORTS.get(name, set())
        if outside:
            offenders[name] = sorted(outside)
    assert offenders == {}
    stage_packages = {stage.module.split(".")[1] for stage in stages.STAGES}   # baseline, raw, ..., uv
    for name in TOOLING_IMPORTS:
        assert name.split("/")[1] not in stage_packages, f"{name} is a stage's: it uses the standard library alone"


def test_no_runtime_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
