"""`dream mcp`: dreamstream as an agent's memory, over the Model Context Protocol.

    dream mcp [--url http://127.0.0.1:6066] [--token T]                  # stdio (Claude Desktop, IDEs)
    dream mcp --transport streamable-http [--host 127.0.0.1] [--port 8765]

Seven tools over the worker's HTTP API (dreamstream.client): `add_memory`, `search_memories`,
`list_memories`, `get_memory`, `memory_history`, `update_memory` and `delete_memory`. Reads list current facts first;
a history row names what replaced it.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any

import click

from dreamstream.streams.cli.common import settings

log = logging.getLogger("dreamstream.mcp")


def build(url: str, token: str | None) -> Any:
    """The MCP server and its tools, each one call of the API client."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    from dreamstream.client import AsyncClient, DreamError

    class Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            """An argument the tool does not take is refused (it was dropped: `metadata` on add_memory
            stored nothing), and a wrong one is one line naming the field, not pydantic's four."""
            schema = self._tool_input_schema(name)
            known = (schema or {}).get("properties") or {}
            if schema is not None and (unknown := sorted(set(arguments) - set(known))):
                raise ToolError(f"{name} takes no argument {unknown[0][:40]!r}; it takes {', '.join(known)}")
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError) and cause.errors():
                    first = cause.errors()[0]
                    where = ".".join(str(part) for part in first["loc"]) or "arguments"
                    raise ToolError(f"{name}: {where}: {first['msg']}") from cause
                raise

    server = Server("dreamstream", instructions=(
        "Long-term memory per user. Store durable facts, preferences and decisions with add_memory; "
        "look them up with search_memories before answering. Results list current facts first; rows "
        "labelled history were replaced (replaced_by says by what)."))

    def row(m: Any) -> dict[str, Any]:
        out = {"memory_id": m.memory_id, "text": m.text, "label": m.label, "created_at": m.created_at}
        if m.replaced_by:
            out["replaced_by"] = m.replaced_by
        if m.review:
            out["review"] = m.review  # a pair waiting for a person: say so rather than show two facts
        return out

    async def call(fn: Any) -> dict[str, Any]:
        """One API call; a refusal, a worker that is down or slow is a tool error (`is_error`) with the
        client's one-line reason, never a success and never a traceback. Anything else unexpected (an
        answer the client cannot read) is a one-line tool error too, logged in one line (the traceback at
        debug level)."""
        async with AsyncClient(url, token) as api:
            try:
                result: dict[str, Any] = await fn(api)
            except DreamError as exc:
                raise ToolError(str(exc)) from None
            except Exception as exc:
                log.warning("tool call failed: %s: %s", type(exc).__name__, exc)
                log.debug("tool call failed", exc_info=True)
                raise ToolError(f"unexpected {type(exc).__name__}: {exc}") from None
        return result

    @server.tool()
    async def add_memory(user_id: str, text: str, app_id: str | None = None, run_id: str | None = None,
                         memory_type: str | None = None) -> dict[str, Any]:
        """Store one memory about a user (a fact, preference or decision in one sentence). It is merged
        with a restatement or supersedes an outdated fact automatically, asynchronously."""
        fields: dict[str, Any] = {"app_id": app_id, "run_id": run_id}
        if memory_type:
            fields["metadata"] = {"type": memory_type}

        async def go(api: Any) -> dict[str, Any]:
            added = await api.add(user_id, text, **{k: v for k, v in fields.items() if v is not None})
            return {"memory_id": added.memory_id, "event_id": added.event_id, "status": "accepted"}
        return await call(go)

    @server.tool()
    async def search_memories(user_id: str, query: str, limit: int = 10, latest_only: bool = False,
                              include_merged: bool = False) -> dict[str, Any]:
        """A user's memories nearest to the query, current facts first, then history (latest_only: current
        ones only; include_merged: merged restatements too)."""
        async def go(api: Any) -> dict[str, Any]:
            page = await api.search(user_id, query, limit=limit, latest_only=latest_only,
                                    include_merged=include_merged)
            return {"memories": [row(m) for m in page.memories]}
        return await call(go)

    @server.tool()
    async def list_memories(user_id: str, latest_only: bool = False, limit: int = 100,
                            cursor: str | None = None, include_merged: bool = False) -> dict[str, Any]:
        """A user's memories, current facts first, then history (latest_only: current ones only;
        include_merged: merged restatements too). More than `limit`: pass the `next_cursor` it returns as
        `cursor` for the next page."""
        async def go(api: Any) -> dict[str, Any]:
            page = await api.list(user_id, latest_only=latest_only, include_merged=include_merged, limit=limit,
                                  cursor=cursor)
            return {"memories": [row(m) for m in page.memories], "next_cursor": page.next_cursor}
        return await call(go)

    @server.tool()
    async def update_memory(user_id: str, memory_id: str, text: str) -> dict[str, Any]:
        """Correct one of the user's memories: the new text becomes current, the old one history."""
        async def go(api: Any) -> dict[str, Any]:
            accepted = await api.update(memory_id, user_id, text=text)
            return {"status": "accepted", "memory_id": accepted.memory_id, "replaces": memory_id}
        return await call(go)

    @server.tool()
    async def delete_memory(user_id: str, memory_id: str) -> dict[str, Any]:
        """Delete one of the user's memories (kept hidden; a person can bring it back with
        `dream undo DECISION_ID`, the returned decision_id)."""
        async def go(api: Any) -> dict[str, Any]:
            out = await api.delete(memory_id, user_id)
            return {"memory_id": out["memory_id"], "status": out["status"], "decision_id": out["decision_id"]}
        return await call(go)

    @server.tool()
    async def get_memory(user_id: str, memory_id: str) -> dict[str, Any]:
        """One of the user's memories by id, with its status and what replaced it, if anything."""
        async def go(api: Any) -> dict[str, Any]:
            m = await api.get(memory_id, user_id)
            return {**row(m), "status": m.status, "user_id": m.user_id}
        return await call(go)

    @server.tool()
    async def memory_history(user_id: str, memory_id: str) -> dict[str, Any]:
        """How one of the user's memories came to be as it is: what it merged or superseded, what replaced
        it, and every decision with its evidence (each can be undone by its decision id)."""
        return await call(lambda api: api.history(memory_id, user_id))

    for tool in ("add_memory", "search_memories", "list_memories", "update_memory", "delete_memory", "get_memory",
                 "memory_history"):
        schema = server._tool_input_schema(tool)
        if schema is not None:
            schema["additionalProperties"] = False  # said in the schema an agent reads, as call_tool enforces
    return server


def loopback(host: str) -> bool:
    """Whether an address to listen on is this machine's only (`localhost`, 127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


@click.command()
@click.option("--url", default=None, help="The worker's HTTP API (default: http://$DREAM_HTTP_HOST:$DREAM_HTTP_PORT).")
@click.option("--token", default=None, help="Bearer token of the API (default: $DREAM_API_TOKEN).")
@click.option("--transport", type=click.Choice(["stdio", "streamable-http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="streamable-http: address to listen on.")
@click.option("--port", default=8765, show_default=True, help="streamable-http: port to listen on.")
def mcp(url: str | None, token: str | None, transport: str, host: str, port: int) -> None:
    """Serve the memory to MCP clients (agents): add, search, list, get, history, update, delete."""
    for name in ("httpx", "mcp"):  # not a line per request or per refused call on the agent's stderr
        logging.getLogger(name).setLevel(logging.WARNING)
    if transport == "streamable-http" and not loopback(host):
        raise click.BadParameter(
            f"{host} is reachable from other machines, and this transport has no authentication of its own: "
            "every caller would act with the API's token, for any user. Listen on 127.0.0.1 (or ::1) and put an "
            "authenticating proxy in front of it for agents elsewhere", param_hint="--host")
    host = host.strip().strip("[]")  # "[::1]" is how a URL writes the address, not how one listens on it
    server = build(url or f"http://{settings.http_host}:{settings.http_port}", token or settings.api_token)
    if transport == "stdio":
        server.run("stdio")
        return
    free_port(host, port)
    # Nor a line per call from the HTTP server: uvicorn configures its access log as it starts (a level set
    # here is overwritten), and a logger's filters survive that.
    logging.getLogger("uvicorn.access").addFilter(lambda record: False)
    server.run("streamable-http", host=host, port=port)


def free_port(host: str, port: int) -> None:
    """A one-line error for an address that cannot be listened on (taken, or not this machine's), before the
    HTTP server starts: its own failure is a log of several lines and exit status 3."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
