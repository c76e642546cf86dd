"""The worker as `dream worker` runs it: the app with every agent, timer and page registered.

`app.py` builds the Faust app alone; importing this module imports the modules that register on it,
then `run` hands the command line to Faust's own worker command.
"""

from __future__ import annotations

import sys

from dreamstream.streams.worker import api, consolidation, control, ingest, synthesis, watchdog, web
from dreamstream.streams.worker.app import app, settings
from dreamstream.streams.worker.topics import ensure_topics_sync

AGENT_MODULES = (ingest, control, synthesis, consolidation, watchdog, web, api)
"""What registers on the app; listed so that importing them is a use, not a side effect to lint away."""


def run(args: list[str]) -> None:
    """Creates the declared topics (with their partition counts), then runs Faust's `worker` command."""
    ensure_topics_sync(settings)
    sys.argv[:] = ["dream", "worker", *args]  # in place: faust bound the list object as a default
    app.main()
