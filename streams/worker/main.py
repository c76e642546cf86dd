"""The worker as `dream worker` runs it: the app with every agent, timer and page registered.

`app.py` builds the Faust app alone; importing this module imports the modules that register on it,
then `run` hands the command line to Faust's own worker command.
"""

from __future__ import annotations

import socket
import sys

from dreamstream.schemas.errors import ConfigError, StoreLocked
from dreamstream.streams.core.ingest import tune_gc
from dreamstream.streams.store.edge import lock_holder
from dreamstream.streams.worker import api, consolidation, control, ingest, synthesis, watchdog, web
from dreamstream.streams.worker.app import app, settings
from dreamstream.streams.worker.logs import fold_client_noise
from dreamstream.streams.worker.topics import ensure_topics_sync

AGENT_MODULES = (ingest, control, synthesis, consolidation, watchdog, web, api)
"""What registers on the app; listed so that importing them is a use, not a side effect to lint away."""


def refuse_a_held_store() -> None:
    """A second worker on one embedded store would take half the partitions and never process them
    (it cannot open the store): refused before it joins the group, with what to do instead."""
    if settings.qdrant_url:
        return
    holder = lock_holder(settings.store_dir)
    if holder is not None:
        raise StoreLocked(f"store {settings.store_dir} is in use by {holder}; an embedded store serves one "
                          "worker: give this one its own DREAM_STORE, or run every worker on a Qdrant server "
                          "(QDRANT_URL)")


def check_web_port(args: list[str]) -> None:
    """One setting for the port: Faust's own -p/--web-port would leave the CLI's hints and `dream mcp`
    on DREAM_HTTP_PORT's; and a busy port is one line here, not a traceback from the web server."""
    if any(a in ("-p", "--web-port") or a.startswith("--web-port=") for a in args):
        raise ConfigError("set the port with DREAM_HTTP_PORT=... (the CLI and `dream mcp` read it too), "
                          "not with -p/--web-port")
    with socket.socket() as probe:
        # As the web server binds: a restarted worker's port in TIME_WAIT is free; a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((settings.http_host, settings.http_port))
        except OSError as exc:
            raise ConfigError(f"port {settings.http_port} on {settings.http_host} is in use ({exc.strerror}; "
                              "another worker?): set DREAM_HTTP_PORT to a free one") from None


def run(args: list[str]) -> None:
    """Creates the declared topics (with their partition counts), then runs Faust's `worker` command."""
    check_web_port(args)
    refuse_a_held_store()
    fold_client_noise()
    ensure_topics_sync(settings)
    tune_gc()
    sys.argv[:] = ["dream", "worker", *args]  # in place: faust bound the list object as a default
    app.main()
