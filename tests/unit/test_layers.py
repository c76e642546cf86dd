"""The import graph keeps its layers and has no cycles (streams/dev/layers.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dreamstream.streams.dev import layers

DREAM = str(Path(sys.executable).with_name("dream"))


def test_the_source_keeps_its_layers_and_has_no_cycles() -> None:
    edges = layers.graph()
    assert "dreamstream.streams.core.ingest" in edges and "dreamstream.agents.merge_supersede" in edges
    assert layers.violations(edges) == []


def test_an_upward_import_and_a_cycle_are_caught() -> None:
    edges = {
        "dreamstream.agents.x": {"dreamstream.streams.core.y"},
        "dreamstream.streams.core.y": {"dreamstream.streams.core.z"},
        "dreamstream.streams.core.z": {"dreamstream.streams.core.y"},
        "dreamstream.streams.worker.w": {"dreamstream.streams.cli.main"},
    }
    found = layers.violations(edges)
    assert any(p.startswith("dreamstream.agents.x imports dreamstream.streams.core.y") for p in found)
    assert any(p.startswith("dreamstream.streams.worker.w imports dreamstream.streams.cli.main") for p in found)
    assert any(p.startswith("import cycle: ") and "core.y" in p and "core.z" in p for p in found)


def test_the_cli_starts_without_building_the_faust_app() -> None:
    probe = ("import sys, dreamstream.streams.cli.main; "
             "print(sorted(k for k in sys.modules if k.startswith(('faust', 'dreamstream.streams.worker'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
    helped = subprocess.run([DREAM, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "dreamstream" in helped.stdout
    commands = [row.split()[0] for row in helped.stdout.split("Commands:")[1].splitlines() if row.strip()]
    assert {"get", "search", "replay", "undo", "worker"} <= set(commands)
    assert not {"send", "tables", "agents", "livecheck"} & set(commands)  # none of Faust's own commands
    version = subprocess.run([DREAM, "--version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.startswith("dreamstream, version ")
