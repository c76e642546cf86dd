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
