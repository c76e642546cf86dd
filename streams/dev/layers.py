"""The import graph's rules, checked from the source: `python -m dreamstream.streams.dev.layers`.

Each package may import only the layers below it, and nothing may import in a circle:

    schemas  <  agents  <  streams.settings  <  streams.store  <  streams.core  <  streams.worker  <  streams.cli
                                                                                                     streams.dev (any)

Imports inside functions count too: a cycle that works only because one side imports late is still a
cycle. `make lint` runs this; a unit test keeps it true.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"schemas": "dreamstream.schemas", "agents": "dreamstream.agents", "streams": "dreamstream.streams",
            "client": "dreamstream.client"}

LAYERS = (
    "dreamstream.schemas",
    "dreamstream.agents",
    "dreamstream.streams.settings",
    "dreamstream.streams.store",
    "dreamstream.streams.core",
    "dreamstream.streams.worker",
    "dreamstream.streams.cli",
)
CLIENT = "dreamstream.client"
"""The API client stands apart: it may import nothing of the project but the contracts (schemas)."""
"""Lowest first. A module belongs to the longest prefix it starts with; `dreamstream.streams.dev`
(the demo, local runs and this check) sits above every layer."""

TOP = "dreamstream.streams.dev"


def layer_of(module: str) -> int:
    if module == CLIENT or module.startswith(CLIENT + "."):
        return 0  # at the contracts' level: it may use schemas and nothing above them
    if module == TOP or module.startswith(TOP + "."):
        return len(LAYERS)
    best = -1
    for i, prefix in enumerate(LAYERS):
        if (module == prefix or module.startswith(prefix + ".")) and (best < 0 or len(prefix) > len(LAYERS[best])):
            best = i
    return best


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the three packages, by its dotted name."""
    out: dict[str, Path] = {}
    for folder, package in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def imports_of(path: Path, known: Iterable[str]) -> set[str]:
    """The project modules a file imports (at any depth); `from package import module` names the module."""
    names = set(known)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("dreamstream."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dreamstream.") \
                and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in names else node.module)
    return {m for m in found if m in names}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    found = modules(root)
    return {name: imports_of(path, found) - {name} for name, path in found.items()}


def violations(edges: Mapping[str, set[str]]) -> list[str]:
    """Upward imports (a lower layer importing a higher one) and cycles, one line each."""
    out: list[str] = []
    for module, targets in sorted(edges.items()):
        here = layer_of(module)
        for target in sorted(targets):
            there = layer_of(target)
            if there > here:
                out.append(f"{module} imports {target}: {LAYERS[here]} must not import from "
                           f"{LAYERS[there] if there < len(LAYERS) else TOP}")
    # Packages import their own modules (re-exports), so a package and its module are not a cycle.
    def owns(a: str, b: str) -> bool:
        return b.startswith(a + ".")
    pruned = {m: {t for t in ts if not owns(m, t)} for m, ts in edges.items()}
    try:
        TopologicalSorter(pruned).prepare()
    except CycleError as exc:
        out.append("import cycle: " + " -> ".join(exc.args[1]))
    return out


def main() -> int:
    edges = graph()
    problems = violations(edges)
    counts: dict[int, int] = {}
    for module in edges:
        counts[layer_of(module)] = counts.get(layer_of(module), 0) + 1
    for i, name in enumerate((*LAYERS, TOP)):
        print(f"{name:<32} {counts.get(i, 0):>3} modules")
    print(f"{sum(len(t) for t in edges.values())} imports between {len(edges)} modules; "
          f"{len(problems)} problems")
    for p in problems:
        print("  " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
