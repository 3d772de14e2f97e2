"""Exit codes come from one table, :class:`fabricwatch.errors.ExitCode`.

Read from the syntax tree of every product module: no module but errors.py
names an exit code of its own (``EXIT_OK = ExitCode.OK``, ``EXIT_USAGE = 2``),
and no command handler returns a bare number.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ERRORS = REPO / "fabricwatch" / "errors.py"


def product_modules() -> list[Path]:
    """Every .py of the package and the collectors (the symlink not walked twice)."""
    link = REPO / "fabricwatch" / "collectors"
    files = [p for p in (REPO / "fabricwatch").rglob("*.py") if link not in p.parents]
    return sorted(files + list((REPO / "collectors").rglob("*.py")))


def _is_exit_code(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ExitCode"
    )


def own_exit_codes(tree: ast.Module) -> list[str]:
    """Names bound to an exit code outside the table: ``EXIT_*`` or ``= ExitCode.X``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        values = value.elts if isinstance(value, ast.Tuple) else [value]
        if any(n.startswith("EXIT_") for n in names) or any(_is_exit_code(v) for v in values):
            found.append(f"line {node.lineno}: {', '.join(names)}")
    return found


def bare_number_returns(tree: ast.Module) -> list[str]:
    """``return 2`` in a function declared ``-> int`` (a handler's exit status)."""
    found: list[str] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not (isinstance(fn.returns, ast.Name) and fn.returns.id == "int"):
            continue
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Constant)
                and type(node.value.value) is int
            ):
                found.append(f"{fn.name} line {node.lineno}: return {node.value.value}")
    return found


def test_no_module_but_errors_defines_exit_codes() -> None:
    offenders = {
        str(p.relative_to(REPO)): own
        for p in product_modules()
        if p != ERRORS and (own := own_exit_codes(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert not offenders, offenders


def test_command_handlers_return_table_members() -> None:
    cli = sorted((REPO / "fabricwatch" / "cli").glob("*.py"))
    assert len(cli) >= 10
    offenders = {
        str(p.relative_to(REPO)): bad
        for p in cli
        if (bad := bare_number_returns(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert not offenders, offenders


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("EXIT_OK = ExitCode.OK\n", True),
        ("EXIT_ERROR, EXIT_X = 2, 3\n", True),
        ("STARTUP = ExitCode.CANNOT_START\n", True),
        ("class A:\n    EXIT_FAILURE: int = 1\n", True),
        ("code = compute()\n", False),
        ("x = ExitCode.OK.value + 1 if False else 0\n", False),
    ],
)
def test_the_scan_sees_aliases(source: str, caught: bool) -> None:
    assert bool(own_exit_codes(ast.parse(source))) is caught


def test_the_scan_sees_bare_returns() -> None:
    tree = ast.parse("def run(a) -> int:\n    if a:\n        return 2\n    return ExitCode.OK\n")
    assert bare_number_returns(tree) == ["run line 3: return 2"]
    assert not bare_number_returns(ast.parse("def f() -> float:\n    return 0\n"))
