"""The layers, checked on the source itself: imports point one way and never loop.

Inside `runtime`: domain <- store <- engine <- services <- runtime <- worker, with the
public package and `runtime.edges` on top. Each service imports only the services before
it in `SERVICES`. Adapters import only the public `runtime` package and `runtime.edges`,
never each other, the store or `bot`; `runtime` imports no platform. And there is no import
cycle anywhere in runtime/, adapters/ and bot/.

Every import counts: at module level, under ``if TYPE_CHECKING:`` and inside functions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("runtime", "adapters", "bot")

# Which layer of `runtime` may import which. A module's layer is the first entry of
# `LAYER_OF` its name falls under.
LAYER_OF = (
    ("runtime.domain", "domain"),
    ("runtime.store", "store"),
    ("runtime.engine", "engine"),
    ("runtime.services", "services"),
    ("runtime.runtime", "runtime"),
    ("runtime.external_approvals", "runtime"),
    ("runtime.worker", "worker"),
    ("runtime.edges", "edges"),
)
ALLOWED = {
    "domain": {"domain"},
    "store": {"domain", "store"},
    "engine": {"domain", "store", "engine"},
    "services": {"domain", "store", "engine", "services"},
    "runtime": {"domain", "store", "engine", "services", "runtime"},
    "worker": {"domain", "store", "engine", "services", "runtime", "worker"},
    "package": {"domain", "store", "engine", "services", "runtime", "worker"},
    "edges": {"domain", "store", "engine", "services", "runtime", "worker", "package"},
}
# A service imports only the services listed before it.
SERVICES = (
    "queries",
    "driving",
    "starting",
    "decisions",
    "inbox",
    "control",
    "expiry",
    "sessions",
    "grants",
    "identities",
    "batches",
    "delivery",
    "outcomes",
    "approvals",
    "audit",
)
# What an adapter may import of runtime: the public package and the edge module.
EDGE_IMPORTS = ("runtime", "runtime.edges")
ADAPTERS = (
    "slack",
    "discord",
    "webhook",
    "web",
    "models",
    "mcp",
    "client",
    "claude_code",
    "policies",
    "telemetry",
)
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
    "opentelemetry",
)
STORE_LIBRARIES = ("sqlalchemy", "alembic", "aiosqlite", "asyncpg")
MAX_LINES = 800
# Modules allowed over MAX_LINES, each with why.
LONG_MODULES: dict[str, str] = {}


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a module of the tree where it is one."""

    importer: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.target}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _known(name: str) -> str:
    """`name`, or the closest enclosing module of the tree (outside names as they are)."""
    probe = name
    while probe and probe not in MODULES:
        probe = probe.rpartition(".")[0]
    return probe or name


def _imports_of(module: str, path: Path) -> Iterator[Import]:
    source = path.read_text(encoding="utf-8")
    return _imports_in(module, source, is_package=path.name == "__init__.py")


def _imports_in(module: str, source: str, *, is_package: bool) -> Iterator[Import]:
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, _known(alias.name), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                origin = f"{base}.{node.module}" if node.module else base
            else:
                origin = node.module or ""
            for alias in node.names:
                # `from pkg import mod` depends on the module; `from mod import name` on mod.
                submodule = f"{origin}.{alias.name}"
                target = submodule if submodule in MODULES else _known(origin)
                yield Import(module, target, node.lineno)


IMPORTS = sorted(
    {imp for name, path in MODULES.items() for imp in _imports_of(name, path)},
    key=str,
)


def _layer(module: str) -> str | None:
    if module == "runtime":
        return "package"
    for prefix, layer in LAYER_OF:
        if _under(module, prefix):
            return layer
    return None


def _service(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[:2] != ["runtime", "services"]:
        return None
    return SERVICES.index(parts[2]) if parts[2] in SERVICES else len(SERVICES)


def _internal(module: str) -> bool:
    return module in MODULES


def test_every_runtime_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if _under(m, "runtime") and _layer(m) is None]
    assert unplaced == [], f"modules of runtime in no layer: {unplaced}"


def test_every_service_is_in_the_order() -> None:
    unordered = [m for m in MODULES if _service(m) == len(SERVICES)]
    assert unordered == [], f"services missing from SERVICES: {unordered}"


def test_runtime_imports_point_down_the_layers() -> None:
    wrong = []
    for imp in IMPORTS:
        mine, theirs = _layer(imp.importer), _layer(imp.target)
        if mine is None or theirs is None:
            continue
        if theirs not in ALLOWED[mine]:
            wrong.append(f"{imp} ({mine} may not import {theirs})")
        elif mine == theirs == "services":
            me, them = _service(imp.importer), _service(imp.target)
            if me is not None and them is not None and them >= me and imp.target != imp.importer:
                wrong.append(f"{imp} (a service imports only the services before it)")
    assert wrong == [], "imports against the layers:\n" + "\n".join(wrong)


def test_the_core_imports_no_platform_or_edge() -> None:
    wrong = [
        str(imp)
        for imp in IMPORTS
        if _under(imp.importer, "runtime")
        and (
            any(_under(imp.target, lib) for lib in PLATFORM_LIBRARIES)
            or _under(imp.target, "adapters")
            or _under(imp.target, "bot")
        )
    ]
    assert wrong == []


def test_database_libraries_live_in_the_store_only() -> None:
    wrong = [
        str(imp)
        for imp in IMPORTS
        if any(_under(imp.target, lib) for lib in STORE_LIBRARIES)
        and (_under(imp.importer, "runtime") or _under(imp.importer, "adapters"))
        and not _under(imp.importer, "runtime.store")
    ]
    assert wrong == []


def test_adapters_import_only_the_public_runtime_and_its_edge_module() -> None:
    wrong = [
        str(imp)
        for imp in IMPORTS
        if _under(imp.importer, "adapters")
        and _under(imp.target, "runtime")
        and imp.target not in EDGE_IMPORTS
    ]
    assert wrong == [], "adapters reaching inside runtime:\n" + "\n".join(wrong)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapters_never_import_each_other_nor_the_composition_root(adapter: str) -> None:
    others = [a for a in ADAPTERS if a != adapter]
    wrong = [
        str(imp)
        for imp in IMPORTS
        if _under(imp.importer, f"adapters.{adapter}")
        and (
            any(_under(imp.target, f"adapters.{other}") for other in others)
            or _under(imp.target, "bot")
        )
    ]
    assert wrong == []


def _cycles() -> list[list[str]]:
    """Every strongly connected component of more than one module (or a self-import)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        if _internal(imp.target):
            graph[imp.importer].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iterative: the tree is deep enough for recursion limits.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [
        [*_one_cycle(component, graph), f"(all of {', '.join(component)} import one another)"]
        for component in found
    ]


def _one_cycle(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete loop through a component, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return component


def test_no_import_cycle_anywhere() -> None:
    cycles = _cycles()
    shown = [" -> ".join(cycle[:-1]) + " " + cycle[-1] for cycle in cycles]
    assert cycles == [], "import cycles:\n" + "\n".join(shown)


def test_no_runtime_module_is_too_long() -> None:
    long = {
        name: lines
        for name, path in MODULES.items()
        if _under(name, "runtime")
        and name not in LONG_MODULES
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def test_every_long_module_exception_is_still_needed() -> None:
    stale = [
        name
        for name in LONG_MODULES
        if name not in MODULES
        or len(MODULES[name].read_text(encoding="utf-8").splitlines()) <= MAX_LINES
    ]
    assert stale == [], f"no longer over {MAX_LINES} lines (drop them from LONG_MODULES): {stale}"


def test_the_scan_sees_every_kind_of_import() -> None:
    # Guards the tests above: the scan finds module-level, type-only and function-level
    # imports, resolves `from package import module`, and finds a loop it is shown.
    found = {(imp.importer, imp.target) for imp in IMPORTS}
    assert ("adapters.slack.app", "slack_bolt.app.async_app") in found
    assert any(importer.startswith("adapters") and t == "runtime" for importer, t in found)
    source = (
        "from typing import TYPE_CHECKING\n"
        "import runtime\n"
        "from . import base\n"
        "if TYPE_CHECKING:\n    from runtime.store import memory\n"
        "def f():\n    from adapters import slack\n"
    )
    seen = {imp.target for imp in _imports_in("runtime.store.probe", source, is_package=False)}
    expected = {"typing", "runtime", "runtime.store.base", "runtime.store.memory", "adapters.slack"}
    assert seen == expected
    loop = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert _one_cycle(["a", "b", "c"], loop) == ["a", "b", "c", "a"]
