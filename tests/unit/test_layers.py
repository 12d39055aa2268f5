"""Dependencies point inward: bot -> adapters -> runtime. Checked on the source itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLATFORM_LIBRARIES = (
    "aiohttp",
    "slack_bolt",
    "slack_sdk",
    "discord",
    "openai",
    "anthropic",
    "mcp",
    "httpx",
    "jinja2",
)
ADAPTERS = ("slack", "discord", "webhook", "web", "models", "mcp")


def imports(package: str) -> list[tuple[Path, str]]:
    """Every module a package's files import (absolute names), with the importing file."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [(path, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.module))
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_core_imports_no_platform_or_edge() -> None:
    wrong = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path, module in imports("runtime")
        if any(_under(module, lib) for lib in PLATFORM_LIBRARIES)
        or _under(module, "adapters")
        or _under(module, "bot")
    ]
    assert wrong == []


def test_sqlalchemy_lives_in_the_store_only() -> None:
    wrong = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path, module in imports("runtime")
        if (
            _under(module, "sqlalchemy") or _under(module, "alembic") or _under(module, "aiosqlite")
        )
        and "store" not in path.relative_to(ROOT / "runtime").parts
    ]
    assert wrong == []


def test_no_adapter_reads_the_store() -> None:
    wrong = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path, module in imports("adapters")
        if _under(module, "runtime.store") or _under(module, "sqlalchemy")
    ]
    assert wrong == []


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapters_never_import_each_other_nor_the_composition_root(adapter: str) -> None:
    others = [a for a in ADAPTERS if a != adapter]
    wrong = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path, module in imports(f"adapters/{adapter}")
        if any(_under(module, f"adapters.{other}") for other in others) or _under(module, "bot")
    ]
    assert wrong == []


def test_the_check_sees_imports() -> None:
    # Guards the tests above: the scan does find the imports it looks for.
    found = {module for _, module in imports("adapters")}
    assert "runtime" in found and "slack_bolt.app.async_app" in found
