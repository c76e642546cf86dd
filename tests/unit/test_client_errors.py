"""The client's errors: one family, one line each, and the token from the environment."""

from __future__ import annotations

import socket

import pytest

from dreamstream.client import Client, DreamConnectionError, DreamError, DreamTimeout


def test_no_worker_is_one_line_not_an_httpx_traceback() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}") as dream, pytest.raises(DreamConnectionError) as exc:
        dream.list("u-1")
    assert str(exc.value) == f"no worker at http://127.0.0.1:{port}: connection refused"
    assert isinstance(exc.value, DreamError) and exc.value.__cause__ is None


def test_a_worker_that_does_not_answer_is_a_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with Client(url, timeout=0.5) as dream, pytest.raises(DreamTimeout, match=f"the worker at {url} did not"):
            dream.list("u-1")


def test_wait_for_keeps_its_own_timeout_when_the_worker_does_not_answer() -> None:
    """wait_for(timeout=1) waited out the client's whole HTTP timeout (30 s by default) on a stuck worker."""
    import time

    from dreamstream.client import Accepted

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        with Client(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=30) as dream:
            start = time.monotonic()
            with pytest.raises(DreamTimeout):
                dream.wait_for(Accepted(event_id="e", memory_id="m", user_id="u"), timeout=1)
            assert time.monotonic() - start < 5


def test_a_request_too_long_for_a_url_is_a_dream_error() -> None:
    """httpx's InvalidURL is not an HTTPError: a 70,000-character id or a 14,000-word query escaped as a raw
    httpx exception (and through MCP as "unexpected InvalidURL")."""
    with Client("http://127.0.0.1:9") as dream:
        for call in (lambda: dream.get("m" * 70_000, "u"), lambda: dream.search("u", "word " * 14_000)):
            with pytest.raises(DreamError, match="cannot send this request") as exc:
                call()
            assert len(str(exc.value).splitlines()) == 1


def test_the_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_API_TOKEN", "s3cret")
    with Client() as dream:
        assert dream._http.headers["Authorization"] == "Bearer s3cret"
    with Client(token="") as dream:  # an explicit empty token sends none
        assert "Authorization" not in dream._http.headers


def test_an_answer_that_is_not_the_apis_is_a_dream_error() -> None:
    """A proxy's HTML page, a JSON list on a 502 or an object without the expected field: one DreamAPIError
    each, never a decoding exception."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from dreamstream.client import DreamAPIError

    answers = iter([(200, b"<html>proxy</html>"), (502, b'["bad gateway"]'), (200, b'{"unexpected": 1}')])

    class Odd(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            status, body = next(answers)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Odd)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Client(f"http://127.0.0.1:{server.server_address[1]}") as dream:
            for expected in (200, 502, 200):
                with pytest.raises(DreamAPIError) as exc:
                    dream.list("u-1")
                assert exc.value.status == expected and len(str(exc.value).splitlines()) == 1
    finally:
        server.shutdown()


def test_what_was_decided_names_the_other_memory_of_a_review() -> None:
    """`review["with"]` is the other memory ({"memory_id", "text"}): joined as a list, it printed its keys."""
    from dreamstream.client import Accepted, Memory

    row = {"memory_id": "m-2", "user_id": "gus", "text": "Gus is not vegetarian.", "status": "active",
           "created_at": "2026-03-01T10:00:00Z",
           "review": {"proposal": "supersede", "side": "newer",
                      "with": {"memory_id": "m-1", "text": "Gus is vegetarian."}}}
    decided = Accepted("e-2", "m-2", "gus", Memory.from_row(row),
                       [{"action": "review", "targets": ["m-1"]}]).decided
    assert decided == "review with m-1"


def test_metadata_filters_are_sent_as_json() -> None:
    from dreamstream.client import _read_params

    params = _read_params("bo", None, False, False, None, None, {},
                          metadata={"pinned": False, "agent": None, "code": "1", "team": "infra"})
    assert {k: v for k, v in params.items() if k.startswith("metadata.")} == {
        "metadata.pinned": "false", "metadata.agent": "null", "metadata.code": '"1"', "metadata.team": '"infra"'}


def test_a_token_no_header_can_hold_and_a_body_json_cannot_are_dream_errors() -> None:
    """A token with a line break was reported as "no worker at ...: Illegal header value", a non-ASCII one as
    UnicodeEncodeError, and created_at=datetime(...) as json's TypeError."""
    import datetime

    from dreamstream.client import _encoded

    for token in ("s3cret\n", "sécret", " s3cret"):
        with pytest.raises(DreamError, match="the API token must be printable ASCII"):
            Client(token=token)
    when = datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC)
    sent = _encoded({"json": [{"user_id": "u", "text": "x", "created_at": when}]})
    assert sent["content"] == b'[{"user_id": "u", "text": "x", "created_at": "2026-12-01T09:30:00+00:00"}]'
    assert sent["headers"]["Content-Type"] == "application/json"
    with pytest.raises(DreamError, match="cannot be sent as JSON"):
        _encoded({"json": {"x": object()}})
    with pytest.raises(DreamError, match="cannot be sent as JSON"):
        _encoded({"json": {"x": float("nan")}})
