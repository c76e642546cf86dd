"""The LLM judge and its HTTP client against a real local HTTP server speaking /v1/chat/completions."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import numpy as np
import pytest

from dreamstream.agents import merge_supersede as ms
from dreamstream.agents.llm_judge import LLMJudge, LLMReplyError, parse_reply
from dreamstream.schemas.memory import Memory
from dreamstream.streams.core.llm_client import MAX_ATTEMPTS, ChatEndpoint


class FakeChat(BaseHTTPRequestHandler):
    """Replies with whatever `mode` says (after answering the statuses queued in `errors`, one per
    request); records the requests it saw."""

    mode: ClassVar[str] = "ok"
    answer: ClassVar[dict[str, Any]] = {}
    seen: ClassVar[list[dict[str, Any]]] = []
    errors: ClassVar[list[int]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChat.seen.append({"path": self.path, "body": body})
        if FakeChat.errors:
            self.send_error(FakeChat.errors.pop(0))
            return
        if FakeChat.mode == "slow":
            time.sleep(1.5)
        content = "this is not json" if FakeChat.mode == "malformed" else json.dumps(FakeChat.answer)
        data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data.encode())
        except (BrokenPipeError, ConnectionResetError):  # the client timed out first: expected
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeChat)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def _vec(seed: int, base: np.ndarray | None = None, mix: float = 0.0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    v /= np.linalg.norm(v)
    if base is not None:
        v = mix * base + (1 - mix) * v
    return (v / np.linalg.norm(v)).astype(np.float32)


def _mem(mid: str, text: str, vec: np.ndarray, day: int = 1) -> Memory:
    at = f"2026-01-{day:02d}T00:00:00Z"
    return Memory(mid, "u-1", text, at, at, vector=vec)


@pytest.fixture()
def pair() -> tuple[Memory, list[Memory]]:
    """Two candidates the offline judge leaves unrelated (moderate cosine, no cue), so the LLM decides."""
    anchor = _vec(1)
    new = _mem("m-new", "Auth uses PostgreSQL", anchor, day=5)  # a later session than the candidates
    old = _mem("m-old", "Use PostgreSQL for the auth service", _vec(2, anchor, 0.45))  # cos ~0.6
    other = _mem("m-oth", "Likes hiking", _vec(3, anchor, 0.4))
    return new, [old, other]


def _judge(url: str) -> LLMJudge:
    return LLMJudge(ChatEndpoint(url, "test-model", timeout_s=0.5).ask_json)


def test_success_uses_llm_verdict(server: str, pair: tuple[Memory, list[Memory]]) -> None:
    FakeChat.mode, FakeChat.answer = "ok", {"duplicates": [1], "new_more_complete": False, "contradicted": []}
    FakeChat.seen.clear()
    new, cands = pair
    [d] = ms.decide_with(_judge(server), new, cands)
    assert (d.action, d.targets, d.judge, d.rule) == ("merge_new", ("m-old",), "llm", "llm_duplicate")
    req = FakeChat.seen[-1]
    assert req["path"] == "/v1/chat/completions" and req["body"]["model"] == "test-model"
    assert "1. (" in req["body"]["messages"][1]["content"]


def test_contradiction_supersedes(server: str, pair: tuple[Memory, list[Memory]]) -> None:
    FakeChat.mode, FakeChat.answer = "ok", {"duplicates": [], "new_more_complete": False, "contradicted": [1]}
    new, cands = pair
    [d] = ms.decide_with(_judge(server), new, cands)
    assert (d.action, d.targets) == ("supersede", ("m-old",))


@pytest.mark.parametrize("mode", ["malformed", "slow"])
def test_failure_falls_back_to_offline(server: str, pair: tuple[Memory, list[Memory]], mode: str) -> None:
    FakeChat.mode, FakeChat.answer = mode, {"duplicates": [1], "new_more_complete": False, "contradicted": []}
    new, cands = pair
    judge = _judge(server)
    verdicts = judge.judge(new, cands)
    offline = judge.fallback.judge(new, cands)
    assert [v.relation for v in verdicts] == [v.relation for v in offline]
    assert all("llm_fallback" in v.rule for v in verdicts)
    assert ms.decide_with(judge, new, cands) == ms.decide_with(judge.fallback, new, cands)


def test_unreachable_endpoint_falls_back(pair: tuple[Memory, list[Memory]]) -> None:
    new, cands = pair
    judge = LLMJudge(ChatEndpoint("http://127.0.0.1:9/v1", "m", timeout_s=0.5).ask_json)
    assert all("llm_fallback" in v.rule for v in judge.judge(new, cands))


def test_a_server_error_is_retried(server: str, pair: tuple[Memory, list[Memory]]) -> None:
    """A 503 is transient: the same call is asked again and the second, good answer decides."""
    FakeChat.mode, FakeChat.answer = "ok", {"duplicates": [1], "new_more_complete": False, "contradicted": []}
    FakeChat.seen.clear()
    FakeChat.errors = [503]
    new, cands = pair
    verdicts = _judge(server).judge(new, cands)
    assert len(FakeChat.seen) == 2 and not FakeChat.errors
    assert verdicts[0].rule == "llm_duplicate" and not any("llm_fallback" in v.rule for v in verdicts)


def test_a_client_error_is_not_retried(server: str, pair: tuple[Memory, list[Memory]]) -> None:
    """A 400 would fail the same way again: one request, then the offline verdicts."""
    FakeChat.mode, FakeChat.answer = "ok", {"duplicates": [1], "new_more_complete": False, "contradicted": []}
    FakeChat.seen.clear()
    FakeChat.errors = [400] * MAX_ATTEMPTS
    new, cands = pair
    try:
        verdicts = _judge(server).judge(new, cands)
    finally:
        left, FakeChat.errors = len(FakeChat.errors), []
    assert len(FakeChat.seen) == 1 and left == MAX_ATTEMPTS - 1
    assert all("llm_fallback:HTTPStatusError" in v.rule for v in verdicts)


@pytest.mark.parametrize(
    "content",
    [
        '{"duplicates": [3], "contradicted": []}',
        '{"duplicates": "1"}',
        "[1, 2]",
        '{"duplicates": [1], "contradicted": [1]}',
        "{}",  # read as "nothing related" (an audit): the replaced fact stayed current, nothing said why
        '{"verdict": "contradiction", "existing": [1]}',
        '{"duplicates": [], "contradicted": [true]}',  # true was candidate 1: unrelated facts superseded
        '{"duplicates": [1], "new_more_complete": "false"}',  # "false" was true
    ],
)
def test_parse_reply_rejects_bad_shapes(content: str) -> None:
    with pytest.raises(LLMReplyError):
        parse_reply({"choices": [{"message": {"content": content}}]}, 2)


def test_parse_reply_strips_code_fence() -> None:
    got = parse_reply({"choices": [{"message": {"content": '```json\n{"duplicates": [2]}\n```'}}]}, 2)
    assert got == {"new_more_complete": False, "duplicates": [2], "contradicted": []}


def test_a_connection_closed_without_an_answer_is_retried() -> None:
    """An audit: a server that closed the connection got one attempt, a 500 got three."""
    import httpx

    from dreamstream.streams.core.llm_client import _transient

    assert _transient(httpx.RemoteProtocolError("Server disconnected without sending a response."))
    assert _transient(httpx.ReadError("connection reset"))
    assert not _transient(httpx.HTTPStatusError("400", request=httpx.Request("POST", "http://x"),
                                                response=httpx.Response(400)))


class Trickle(BaseHTTPRequestHandler):
    """Answers 200 at once, then its body a byte every 0.3 s: each wait for bytes is short, the whole is not."""

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"choices": [{"message": {"content": "{}"}}]}' + b" " * 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for byte in body:
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.3)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


def test_a_server_that_trickles_its_answer_is_cut_off_at_the_deadline() -> None:
    """A synthesis audit: httpx's timeout bounds each wait for bytes, so a body sent a byte every few seconds
    held `dream synthesize` for 161 s against a 120 s timeout (and would have for as long as it trickled)."""
    import httpx

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        endpoint = ChatEndpoint(f"http://127.0.0.1:{srv.server_address[1]}/v1", "m", timeout_s=1.0)
        start = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            endpoint.ask_json([{"role": "user", "content": "hi"}])
        assert time.monotonic() - start < 6  # about twice the timeout at most, not the 75 s the body takes
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_failing_judge_is_counted_and_said(pair: tuple[Memory, list[Memory]],
                                              caplog: pytest.LogCaptureFixture) -> None:
    """An audit: with the endpoint down, `dream replay` printed what the offline judge prints; only a rule
    suffix on some decisions showed the LLM was never heard."""
    from dreamstream.agents import llm_judge

    before = sum(llm_judge.FALLBACKS.values())
    new, cands = pair
    with caplog.at_level("WARNING", logger="dreamstream.judge"):
        _judge("http://127.0.0.1:1").judge(new, cands)
    assert sum(llm_judge.FALLBACKS.values()) == before + 1
    assert llm_judge.FALLBACKS["ConnectError"] != 1 or "offline judge decides instead" in caplog.text
