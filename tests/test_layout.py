"""The house rules the layout keeps (docs/ARCHITECTURE.md): each folder one part, the
dependency direction, no import cycle. Read from the source with `ast`, so a function-level
or TYPE_CHECKING import counts too: a cycle hidden in a function is still a cycle."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "memory", "plugins")
# A folder past this many modules groups them by role (python-telegram-bot, httpx, flask).
MAX_MODULES = 15


def _modules() -> dict[str, tuple[Path, bool]]:
    found: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts or "versions" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The project modules `name` imports, anywhere in its source."""
    path, is_package = MODULES[name]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                if f"{module}.{alias.name}" in MODULES:
                    out.add(f"{module}.{alias.name}")
                elif module in MODULES:
                    out.add(module)
    out.discard(name)
    return out


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(GRAPH[nxt]))))
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
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle():
    assert _cycles() == []


def test_the_checker_finds_a_cycle():
    GRAPH["memory.contract.types"].add("memory.contract.errors")
    GRAPH["memory.contract.errors"].add("memory.contract.types")
    try:
        assert ["memory.contract.errors", "memory.contract.types"] in _cycles()
    finally:
        GRAPH["memory.contract.types"] = _imports("memory.contract.types")
        GRAPH["memory.contract.errors"] = _imports("memory.contract.errors")


def _violations(importer: str, forbidden: re.Pattern[str]) -> list[str]:
    return [
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if re.match(importer, name)
        for target in sorted(targets)
        if forbidden.match(target)
    ]


def test_memory_imports_neither_bot_nor_plugins():
    assert _violations(r"memory(\.|$)", re.compile(r"(bot|plugins)(\.|$)")) == []


def test_plugins_import_no_bot_and_not_each_other():
    assert _violations(r"plugins(\.|$)", re.compile(r"bot(\.|$)")) == []
    for plugin in {
        name.split(".")[1]
        for name in MODULES
        if name.count(".") >= 1 and name.startswith("plugins.")
    }:
        others = re.compile(rf"plugins\.(?!{plugin}(\.|$))")
        assert _violations(rf"plugins\.{plugin}(\.|$)", others) == []


def test_the_contract_imports_nothing_below_it():
    assert _violations(r"memory\.contract(\.|$)", re.compile(r"memory\.(?!contract(\.|$))")) == []


def test_every_folder_holds_one_part():
    sizes = Counter(
        str(path.parent.relative_to(ROOT))
        for path, is_package in MODULES.values()
        if not is_package
    )
    crowded = {
        folder: n
        for folder, n in sizes.items()
        if n > MAX_MODULES and not folder.startswith("plugins")
    }
    assert crowded == {}


def test_no_provider_typed_as_any():
    pattern = re.compile(r"\b(provider|recaller)\s*:\s*Any\b")
    hits = [
        f"{path.relative_to(ROOT)}:{number}"
        for path, _ in MODULES.values()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []
