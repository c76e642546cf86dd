"""Small builders shared by the tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

# Unrelated one-line facts: the background a theme must be found in.
FILLER = [
    "Their sister lives in Oslo.",
    "Prefers answers in Spanish.",
    "Allergic to penicillin.",
    "Drives a grey Volvo estate.",
    "Birthday is on 4 July.",
    "Works as an accountant at a bakery chain.",
    "Phone is an iPhone 14.",
    "Favourite film is Amélie.",
    "Hates coriander.",
    "Grew up in Valencia.",
    "Has a cat called Miso.",
    "Reads crime novels.",
    "Lives near the harbour.",
    "Takes the tram to work.",
    "Prefers dark mode.",
    "Speaks Dutch and English.",
]


def event(
    n: int,
    user: str,
    text: str,
    day: int = 1,
    pinned: bool = False,
    mtype: str = "user_fact",
    **extra: Any,
) -> dict[str, Any]:
    """A valid memory.added event; `n` makes ids unique, `day` orders created_at."""
    base: dict[str, Any] = {
        "type": "memory.added",
        "event_id": f"e-{user}-{n}",
        "memory_id": f"m-{user}-{n}",
        "user_id": user,
        "app_id": None,
        "agent_id": None,
        "run_id": None,
        "text": text,
        "created_at": f"2026-01-{day:02d}T09:{n % 60:02d}:00Z",
        "metadata": {"type": mtype, "confidence": 0.9, "pinned": pinned},
    }
    base.update(extra)
    return base


def line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj)


def comparable(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must match between two runs: ids, statuses and links (not wall-clock stamps)."""
    return sorted(
        (r["memory_id"], r["user_id"], r["kind"], r["status"], r.get("superseded_by"), r.get("merged_into"),
         tuple(r.get("sources") or ()))
        for r in rows
    )


class ChatHandler(BaseHTTPRequestHandler):
    """A real local `/v1/chat/completions` endpoint (what the LLM options talk to); a subclass says what the
    assistant answers to each request body."""

    def answer(self, body: dict[str, Any]) -> str:
        raise NotImplementedError

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = self.answer(body)
        data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@contextmanager
def chat_server(handler: type[ChatHandler]) -> Iterator[str]:
    """Serves `handler` on a free local port; yields its base URL (`.../v1`)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()
