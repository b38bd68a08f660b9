"""The engine is tested on its own: tests/engine imports neither ``rag`` nor ``guards``.

The layer rule of the packages themselves (imports point down, no cycles, rag uses the engine's
public names) is a set of import-linter contracts in pyproject.toml that ``make lint`` checks;
tests/ is no package, so this one rule is checked here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"tests/engine": {"rag", "guards"}}


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports, wherever the import stands (inside functions
    and ``TYPE_CHECKING`` blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_lower_layer_imports_no_layer_above_or_beside_it(layer: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[layer])
        for path in sorted((ROOT / layer).rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_scan_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from rag.settings import Settings\n    import guards.kg\n")
    assert imported_packages(module) == {"rag", "guards"}
