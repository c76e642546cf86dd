"""Who may call the memory API: a bearer token when one is configured, else loopback clients only."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from dreamstream.streams.worker import api


class Peer(asyncio.Transport):
    """A connection from `address` (aiohttp reads the peer from its transport)."""

    def __init__(self, address: str) -> None:
        super().__init__()
        self.address = address

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.address, 40000) if name == "peername" else default


def request(address: str, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return make_mocked_request("GET", "/v1/memories", headers=headers, transport=Peer(address))


def test_without_a_token_only_loopback_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = api.settings.model_copy(update={"api_token": None})
    monkeypatch.setattr(api, "settings", settings)
    assert api.refused(request("127.0.0.1")) is None
    assert api.refused(request("::1")) is None
    assert api.refused(request("10.1.2.3")).status == 403


def test_with_a_token_every_caller_needs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "settings", api.settings.model_copy(update={"api_token": "s3cret"}))
    assert api.refused(request("10.1.2.3", "s3cret")) is None
    assert api.refused(request("127.0.0.1")).status == 401
    assert api.refused(request("127.0.0.1", "wrong")).status == 401
    # A header that is not UTF-8 (a client's bytes, passed through as surrogates) is a wrong token, not a 500.
    from types import SimpleNamespace

    odd = SimpleNamespace(headers={"Authorization": "Bearer \udcff"}, remote="10.1.2.3")  # as aiohttp decodes it
    assert api.refused(odd).status == 401


def test_an_unexpected_failure_is_one_line_of_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in a handler answers a JSON 500 with the error's type (the traceback goes to the log); a store
    fault answers 503, so a client knows a retry may succeed."""
    from dreamstream.schemas.errors import StoreError

    monkeypatch.setattr(api, "settings", api.settings.model_copy(update={"api_token": None}))

    async def broken(view: Any, request: Any) -> Any:
        raise TypeError("sequence item 0: expected str instance, list found")

    async def down(view: Any, request: Any) -> Any:
        raise StoreError("disk full")

    for handler, status, text in ((broken, 500, b'{"error":"internal error: TypeError"}'),
                                  (down, 503, b'{"error":"store unavailable: disk full"}')):
        response = asyncio.run(api.api_call(handler)(None, request("127.0.0.1")))
        assert response.status == status and response.body == text


def test_a_passed_on_request_whose_owner_died_mid_answer_is_known_as_sent() -> None:
    """An audit: a DELETE passed on to the owner, which wrote its erase record and was killed before it answered,
    was retried by aiohttp on a new connection (an idempotent method); the refused connect read as "never
    reached: nothing was done" (503), and the caller erased again. The forwarding session marks a request as
    sent once any try went out, so `at_owner` answers 504 (it may have been applied)."""

    import aiohttp

    async def run() -> tuple[api.Sent, BaseException | None]:
        got = asyncio.Event()

        async def owner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")  # the request arrived: applied, then the process dies
            got.set()
            writer.transport.abort()

        server = await asyncio.start_server(owner, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sent = api.Sent()

        async def die() -> None:  # the owner is gone: the retry's connect is refused
            await got.wait()
            server.close()
            await server.wait_closed()

        stopper = asyncio.ensure_future(die())
        error: BaseException | None = None
        try:
            async with api._forwarding().request("DELETE", f"http://127.0.0.1:{port}/v1/users/x?confirm=x",
                                                 trace_request_ctx=sent):
                pass
        except (OSError, aiohttp.ClientError) as exc:
            error = exc
        await stopper
        await api._forwarding().close()
        return sent, error

    sent, error = asyncio.run(run())
    assert isinstance(error, aiohttp.ClientConnectorError) and sent.headers  # what read as "never reached"
