"""Print, as JSON, the module-level import cycles of iris, workbench and benchmarks in the tree given (a fresh
interpreter for each tree: grimp finds packages through the import system, which remembers the first it found).

Usage: ``python tests/import_cycles.py ROOT`` (tests/test_layers.py runs it).
"""

from __future__ import annotations

import json
import sys

import grimp

PACKAGES = ("iris", "workbench", "benchmarks")


def cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of two modules or more (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def main(root: str) -> None:
    sys.path.insert(0, root)
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in graph.modules}
    print(json.dumps(cycles(edges)))


if __name__ == "__main__":
    main(sys.argv[1])
