"""The package's import graph, drawn from its own import statements (ast), and its stage order.

`python tests/support/import_graph.py` prints the rooms, the arrows between files, the circles and
the arrows that go up the stage order; tests/test_layout.py asserts there are none of either.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "databuild"

# The stages from the floor up: a module may import its own stage or a lower one, never a higher one.
# Names are module prefixes; the longest prefix wins. The order is ../shared/design/layout.md's data
# flow, but for config and inputs: they sit above the plug-in stages (sources, encode, pack, rowfile),
# because a config is checked at load against their registries (formats, mask strategies, packing
# policies) and inputs open a source's files through its format; nothing below imports them.
STAGES: tuple[tuple[str, ...], ...] = (
    ("databuild.errors", "databuild.stopping", "databuild.utils"),
    ("databuild.records",),
    ("databuild.sources",),
    ("databuild.encode",),
    ("databuild.pack",),
    ("databuild.rowfile",),
    ("databuild.config",),
    ("databuild.inputs",),
    ("databuild.executors",),
    ("databuild.publish",),
    ("databuild.verification",),
    ("databuild.current",),
    ("databuild.shortfall",),
    ("databuild.prepare",),
    ("databuild.build", "databuild.preference"),
    ("databuild.compare", "databuild.compare_pairs", "databuild.views", "databuild.exports", "databuild.integrations"),
    ("databuild.scaffold",),
    ("databuild.api", "databuild.cli", "databuild.cli_files", "databuild.cli_init", "databuild.cli_make",
     "databuild.cli_view", "databuild.__main__", "databuild"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules this file imports, anywhere in it (function-level imports count)."""
    importer = module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(importer, path.name == "__init__.py", node)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
            names = [n for n in names if n in modules][:1] or [base]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("databuild") and name != importer and name in modules:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in files}
    return {module_name(p): imports(p, modules) for p in files}


def _is_package_init(graph_: dict[str, set[str]], name: str) -> bool:
    return (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()


def circles(graph_: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph_.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph_):
        if v not in index:
            visit(v)
    return found


def stage(name: str) -> int:
    """The stage of a module (an index into STAGES); -1 for one no stage names."""
    best = (-1, -1)
    for level, prefixes in enumerate(STAGES):
        for prefix in prefixes:
            # the package itself (its __init__) is named exactly; every other prefix covers a room
            within = name.startswith(prefix + ".") and prefix != "databuild"
            if (name == prefix or within) and len(prefix) > best[0]:
                best = (len(prefix), level)
    return best[1]


def upward_arrows(graph_: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows from a module to one of a higher stage (a package's __init__ re-exporting its own room
    is not an arrow up)."""
    return sorted(
        (a, b) for a, targets in graph_.items() for b in targets
        if stage(b) > stage(a) and not (b.startswith(a + ".") and _is_package_init(graph_, a))
    )


def rooms(graph_: dict[str, set[str]]) -> dict[str, set[str]]:
    """Arrows between rooms (top-level modules and packages), for the summary."""
    def room(name: str) -> str:
        return ".".join(name.split(".")[:2])
    between: dict[str, set[str]] = defaultdict(set)
    for a, targets in graph_.items():
        for b in targets:
            if room(a) != room(b):
                between[room(a)].add(room(b))
    return between


def main() -> None:
    g = graph()
    arrows = sum(len(t) for t in g.values())
    between = rooms(g)
    print(f"files {len(g)}, arrows {arrows}, rooms {len({'.'.join(n.split('.')[:2]) for n in g})}, "
          f"arrows between rooms {sum(len(t) for t in between.values())}")
    found = circles(g)
    print(f"circles {len(found)} (files in them: {sum(len(c) for c in found)})")
    for c in found:
        print("  " + " <-> ".join(c))
    up = upward_arrows(g)
    print(f"upward arrows {len(up)}")
    for a, b in up:
        print(f"  {a} -> {b}")
    if "-v" in sys.argv:
        for room, targets in sorted(between.items()):
            print(f"{room} -> {', '.join(sorted(targets))}")


if __name__ == "__main__":
    main()
