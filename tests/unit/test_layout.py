"""The package's shape: no import cycles (type-only imports included), files of one job (at
most 550 lines, a Rust file's unit-test module aside)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "redoxide"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path, known: set[str]) -> set[str]:
    """The redoxide modules a file imports, wherever the import is (TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in known:
                found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found & known


def test_the_package_has_no_import_cycles() -> None:
    mods = modules()
    graph = {name: imports(path, set(mods)) - {name} for name, path in mods.items()}
    # Importing a package's __init__ from its own submodules is no cycle at run time, and a
    # package naturally imports its submodules: only module-to-module edges count.
    for name, deps in graph.items():
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert cycles == [], " ; ".join(" -> ".join(c) for c in cycles)


#: The most lines a file holds: past it, it holds more than one job.
MOST_LINES = 550
CORE = PACKAGE.parents[1] / "src"


def test_no_module_of_the_package_is_over_550_lines() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text().splitlines())) > MOST_LINES
    }
    assert long == {}


def test_no_rust_file_is_over_550_lines_before_its_unit_tests() -> None:
    long = {}
    for path in CORE.rglob("*.rs"):
        lines = path.read_text().splitlines()
        tests = [i for i, line in enumerate(lines) if line.strip() == "#[cfg(test)]"]
        counted = tests[-1] if tests and lines[tests[-1] + 1].startswith("mod ") else len(lines)
        if counted > MOST_LINES:
            long[str(path.relative_to(CORE))] = counted
    assert long == {}
