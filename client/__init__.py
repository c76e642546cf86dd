"""`dreamstream.client`: the worker's memory API from Python, sync (`Client`) and async (`AsyncClient`).

    from dreamstream.client import Client

    with Client("http://127.0.0.1:6066") as dream:
        added = dream.add("u-1", "Lives in Lisbon.")
        dream.wait_for(added)
        for m in dream.search("u-1", "where does the user live").memories:
            print(m.label, m.text)

Adding is asynchronous by design (the event goes through Kafka like any producer's): `add` returns
the ids at once and `wait_for` waits until the memory is stored. Built on httpx. Every error is a
`DreamError` in one line: `DreamAPIError` (the API refused, with its status and reason),
`DreamConnectionError` ("no worker at URL: connection refused"), `DreamTimeout`. The token defaults
to DREAM_API_TOKEN.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

__all__ = ["Accepted", "AsyncClient", "Client", "DreamAPIError", "DreamConnectionError", "DreamError", "DreamTimeout",
           "Memory", "Page"]

DEFAULT_URL = "http://127.0.0.1:6066"
JSONList = list[dict[str, Any]]
"""Spelled once here: inside the client classes `list` names their method, not the builtin."""


class DreamError(Exception):
    """Every error of the client, in one line: what failed and why."""


class DreamConnectionError(DreamError):
    """No worker answered at the URL (down, wrong port, refused)."""


class DreamTimeout(DreamError):
    """The worker did not answer in time, or a memory was not stored in time (`wait_for`)."""


class DreamAPIError(DreamError):
    """The API refused a call: `status` is the HTTP status, the message its reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Accepted:
    """An add the worker accepted. With `add(..., wait=True)`: the memory once stored, and what was
    decided on it (`decisions`: supersede, merge, review..., each with its evidence; [] when it was
    simply stored)."""

    event_id: str
    memory_id: str
    user_id: str
    memory: Memory | None = None
    decisions: JSONList = field(default_factory=list)

    @property
    def decided(self) -> str:
        """What became of it, in a few words: "stored", "supersedes m-1", "merged into m-1", "merged m-1
        into it", "review with m-1" (several joined with "; ")."""
        if self.memory is None:
            return "accepted"
        parts = []
        for d in self.decisions:
            others = ", ".join(t for t in (d.get("targets") or []) if t != self.memory_id)
            action = str(d.get("action"))
            if action in ("merge_old", "merge_new") and self.memory.merged_into:
                parts.append(f"merged into {self.memory.merged_into}")
            elif others:
                phrase = {"supersede": "supersedes {}", "update": "supersedes {}", "merge_old": "merged {} into it",
                          "supersede_new": "superseded by {} (said after it)",
                          "merge_new": "merged {} into it", "review": "review with {}", "conflict": "conflicts with {}"}
                parts.append(phrase.get(action, action + " {}").format(others))
            else:
                parts.append(action)
        if self.memory.review:  # {"with": {"memory_id", "text"}}: the other memory of the pair
            other = self.memory.review.get("with") or {}
            parts.append(f"review with {other.get('memory_id') if isinstance(other, dict) else other}")
        return "; ".join(dict.fromkeys(parts)) or "stored"


def _added(accepted: Accepted, memory: Memory, history: Mapping[str, Any]) -> Accepted:
    return Accepted(accepted.event_id, accepted.memory_id, accepted.user_id, memory,
                    [d for d in history.get("decisions") or [] if not d.get("undone")])


@dataclass(frozen=True)
class Memory:
    """One memory as the API returns it; `label` is current, history, pattern, merged or expired,
    `replaced_by` names the memory that holds now for a history row, and `review` is set while a
    review item waits on it (`proposal`, `side` and the other memory, `with`)."""

    memory_id: str
    user_id: str
    text: str
    status: str
    label: str
    created_at: str
    superseded_by: str | None = None
    merged_into: str | None = None
    replaced_by: dict[str, Any] | None = None
    score: float | None = None
    review: dict[str, Any] | None = None
    app_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Memory:
        return cls(memory_id=row["memory_id"], user_id=row["user_id"], text=row["text"], status=row["status"],
                   label=row.get("label", row["status"]), created_at=row["created_at"],
                   superseded_by=row.get("superseded_by"), merged_into=row.get("merged_into"),
                   replaced_by=row.get("replaced_by"), score=row.get("score"), review=row.get("review"),
                   app_id=row.get("app_id"), metadata=dict(row.get("metadata") or {}), raw=dict(row))


@dataclass(frozen=True)
class Page:
    memories: list[Memory]
    next_cursor: str | None


def _read_params(user_id: str, query: str | None, latest_only: bool, include_merged: bool, limit: int | None,
                 cursor: str | None, filters: Mapping[str, str | None], threshold: float | None = None,
                 metadata: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Query parameters of a read; `metadata` filters on any metadata key, `threshold` floors a
    search's relevance (0..1). The API refuses a parameter it does not know."""
    params: dict[str, str] = {"user": user_id}
    if threshold is not None:
        params["threshold"] = str(threshold)
    # as JSON, as the API reads a filter's value: False is `false`, None `null`, and the text "1" stays text
    params.update({f"metadata.{k}": json.dumps(v) for k, v in (metadata or {}).items()})
    if query is not None:  # a search always sends its text: an empty one is the API's 400, not a listing
        params["q"] = query
    if latest_only:
        params["latest_only"] = "1"
    if include_merged:
        params["include_merged"] = "1"
    if limit is not None:
        params["limit"] = str(limit)
    if cursor:
        params["cursor"] = cursor
    params.update({k: str(v) for k, v in filters.items() if v is not None})
    return params


def _searchable(query: str) -> None:
    """A search needs words: an empty query would silently read as a plain listing."""
    if not str(query or "").strip():
        raise DreamError("a search needs a query (to list a user's memories, use list)")


def _user(user: str | None) -> dict[str, str]:
    """`?user=` when given."""
    return {} if user is None else {"user": user}


def _seg(value: str) -> str:
    """One path segment: an id may hold `#`, `?` or `%`, which would otherwise cut or change the path.
    `.` and `..` cannot be one (a URL drops or climbs them: `/v1/memories/.` is the listing), so no
    stored memory can be reached by them: refused here, in one line."""
    text = str(value)
    if text in (".", "..", ""):
        raise DreamError(f"{text!r} cannot name a memory, user, decision or plan in a URL")
    return quote(text, safe="")


def _field(body: Any, key: str) -> Any:
    """`body[key]` of an API answer, or DreamAPIError when the answer is not the shape the API gives."""
    if not isinstance(body, dict) or key not in body:
        raise DreamAPIError(200, f"unexpected answer without {key!r}: {str(body)[:200]}")
    return body[key]


def _checked(response: httpx.Response) -> Any:
    """The JSON body, or DreamAPIError: an error status, or a body that is not the API's JSON (a proxy's HTML
    page, a cut response) is one error of ours, never a decoding exception."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        message = str(body.get("error", response.text)) if isinstance(body, dict) else response.text[:200]
        raise DreamAPIError(response.status_code, message)
    if body is None:
        raise DreamAPIError(response.status_code, f"not JSON: {response.text[:200]!r}")
    return body


def _headers(token: str | None) -> dict[str, str]:
    """The bearer token given, else DREAM_API_TOKEN's (the worker reads the same variable). One with a line
    break or a non-ASCII letter cannot go in a header: said so here, not as a worker that is not there."""
    token = token if token is not None else os.environ.get("DREAM_API_TOKEN") or None
    if token and not (token.isascii() and token.isprintable() and token == token.strip()):
        raise DreamError("the API token must be printable ASCII without surrounding spaces or line breaks "
                         "(DREAM_API_TOKEN, or token=)")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _encoded(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A `json=` body written here: dates and times as ISO 8601 text (created_at=datetime.now(UTC)), and
    anything else JSON cannot hold a DreamError, not json's TypeError."""
    if "json" not in kwargs:
        return kwargs

    def iso(value: Any) -> Any:
        if isinstance(value, (datetime.datetime, datetime.date)):
            return value.isoformat()
        raise TypeError(f"{type(value).__name__} is not JSON")

    try:
        content = json.dumps(kwargs.pop("json"), default=iso, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise DreamError(f"the request cannot be sent as JSON: {exc}") from None
    return {**kwargs, "content": content, "headers": {**kwargs.get("headers", {}), "Content-Type": "application/json"}}


def _transport_error(url: str, exc: httpx.HTTPError) -> DreamError:
    """httpx's failure as one of ours, in one line."""
    if isinstance(exc, httpx.TimeoutException):
        return DreamTimeout(f"the worker at {url} did not answer in time ({type(exc).__name__})")
    reason = str(exc).strip() or type(exc).__name__
    cause: BaseException | None = exc
    while cause is not None:  # httpx says "All connection attempts failed"; the OSError below says why
        if isinstance(cause, ConnectionRefusedError):
            reason = "connection refused"
            break
        cause = cause.__cause__ or cause.__context__
    return DreamConnectionError(f"no worker at {url}: {reason}")


def _consolidation(user_id: str | None, mode: str, app_id: str | None, dry_run: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"mode": mode}
    if user_id is not None:
        body["user"] = user_id
    if app_id is not None:
        body["app"] = app_id
    if dry_run:
        body["dry_run"] = True
    return body


def _page(body: Mapping[str, Any]) -> Page:
    return Page([Memory.from_row(r) for r in _field(body, "memories")], body.get("next_cursor"))


class Client:
    """The memory API, blocking. Use as a context manager, or call `close()`."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float = 30.0) -> None:
        """`token` defaults to DREAM_API_TOKEN; errors are DreamError (one line)."""
        self.url = url
        self._http = httpx.Client(base_url=url, headers=_headers(token), timeout=timeout)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        kwargs = _encoded(kwargs)
        try:
            return _checked(self._http.request(method, path, **kwargs))
        except httpx.HTTPError as exc:
            raise _transport_error(self.url, exc) from None
        except httpx.InvalidURL as exc:  # not an HTTPError: an id or a query too long for a URL
            raise DreamError(f"cannot send this request: {exc}") from None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def add(self, user_id: str, text: str, *, wait: bool = False, timeout: float = 60.0, **fields: Any) -> Accepted:
        """One memory; optional fields as in a memory.added event (app_id, run_id, metadata, created_at...).
        With `wait=True`, returns once it is stored, with what was decided (`.decided`, `.decisions`)."""
        accepted = self.add_many([{"user_id": user_id, "text": text, **fields}])[0]
        if not wait:
            return accepted
        memory = self.wait_for(accepted, timeout)
        return _added(accepted, memory, self.history(accepted.memory_id, user_id))

    def add_many(self, memories: list[dict[str, Any]]) -> list[Accepted]:
        body = self._call("POST", "/v1/memories", json=memories)
        return [Accepted(**a) for a in _field(body, "accepted")]

    def get(self, memory_id: str, user_id: str) -> Memory:
        """One memory of this user (another user's id is a 404, as an unknown one)."""
        return Memory.from_row(self._call("GET", f"/v1/memories/{_seg(memory_id)}", params={"user": user_id}))

    def history(self, memory_id: str, user_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self._call("GET", f"/v1/memories/{_seg(memory_id)}/history", params={"user": user_id})
        return out

    def search(self, user_id: str, query: str, *, latest_only: bool = False, include_merged: bool = False,
               limit: int = 10, cursor: str | None = None, threshold: float | None = None,
               metadata: Mapping[str, Any] | None = None, **filters: str | None) -> Page:
        _searchable(query)
        params = _read_params(user_id, query, latest_only, include_merged, limit, cursor, filters, threshold, metadata)
        return _page(self._call("GET", "/v1/memories", params=params))

    def list(self, user_id: str, *, latest_only: bool = False, include_merged: bool = False,
             limit: int | None = None, cursor: str | None = None,
             metadata: Mapping[str, Any] | None = None, **filters: str | None) -> Page:
        params = _read_params(user_id, None, latest_only, include_merged, limit, cursor, filters, None, metadata)
        return _page(self._call("GET", "/v1/memories", params=params))

    def update(self, memory_id: str, user_id: str, *, text: str | None = None,
               metadata: Mapping[str, Any] | None = None) -> Accepted:
        """A new version (new text and/or metadata over the old) that supersedes this one once stored
        (`wait_for` it); the old one stays as history, and undo reverts the update."""
        body = {k: v for k, v in (("text", text), ("metadata", dict(metadata) if metadata else None)) if v is not None}
        out = self._call("PATCH", f"/v1/memories/{_seg(memory_id)}", params={"user": user_id}, json=body)
        return Accepted(**_field(out, "accepted"))

    def delete(self, memory_id: str, user_id: str, *, hard: bool = False) -> dict[str, Any]:
        """A soft delete (status `deleted`, hidden from reads, kept; `undo(result["decision_id"])` reverts
        it); `hard=True` removes it for good, with its links (what it had replaced is current again)."""
        out: dict[str, Any] = self._call("DELETE", f"/v1/memories/{_seg(memory_id)}",
                                         params={"user": user_id, "hard": "true" if hard else "false"})
        return out

    def delete_all(self, user_id: str) -> int | None:
        """Erases one user for good (every memory, behind the adds of the user accepted before it); returns how
        many were deleted, or None while it is still queued behind them (202: the erase audit event on
        memory.status says when it is done)."""
        out = self._call("DELETE", f"/v1/users/{_seg(user_id)}", params={"confirm": user_id})
        return int(out["deleted"]) if out.get("erased") is True else None

    def undo(self, decision_id: str, user_id: str) -> JSONList:
        """Reverts one decision of `user_id` (another user's is a 404); returns its status events."""
        events: JSONList = _field(self._call("POST", f"/v1/decisions/{_seg(decision_id)}/undo",
                                             params={"user": user_id}), "status_events")
        return events

    def consolidate(self, user_id: str | None, *, mode: str = "dry_run", app_id: str | None = None,
                    dry_run: bool = False) -> dict[str, Any]:
        """A consolidation pass: `dry_run` returns the plan (items with ids, the report) for `approve`;
        `auto` applies merges and prunes. `light` and `full` (user_id None: everyone; `dry_run` to look)."""
        out: dict[str, Any] = self._call("POST", "/v1/consolidations", json=_consolidation(
            user_id, mode, app_id, dry_run))
        return out

    def approve(self, plan_id: str, answers: Mapping[str, str] | None = None, rest: str = "apply",
                user: str | None = None) -> dict[str, Any]:
        """Applies a plan: each item as `answers` says (item id -> apply, skip, or A / B for a conflict),
        the others as `rest` says (apply: as proposed, conflicts at their likely winner; skip). `user`: the
        plan's user (finds the plan's worker when there are several; another user's plan is a 404)."""
        out: dict[str, Any] = self._call("POST", f"/v1/consolidations/{_seg(plan_id)}/approve",
                                         json={"answers": dict(answers or {}), "rest": rest}, params=_user(user))
        return out

    def reject(self, plan_id: str, user: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = self._call("DELETE", f"/v1/consolidations/{_seg(plan_id)}", params=_user(user))
        return out

    def stats(self) -> dict[str, Any]:
        """Memories and users, by status, kind and type, and the last consolidation runs."""
        out: dict[str, Any] = self._call("GET", "/v1/stats", params={"detail": "1"})
        return out

    def wait_for(self, added: Accepted, timeout: float = 60.0) -> Memory:
        """The memory `add` accepted, once the worker has stored it (adding goes through Kafka)."""
        deadline = time.monotonic() + timeout
        while True:
            try:  # each try within the time left: a worker that does not answer cannot stretch the wait
                left = max(deadline - time.monotonic(), 0.1)
                return Memory.from_row(self._call("GET", f"/v1/memories/{_seg(added.memory_id)}",
                                                  params={"user": added.user_id}, timeout=left))
            except DreamAPIError as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise DreamTimeout(f"memory {added.memory_id} of {added.user_id} was not stored within "
                                   f"{timeout:.0f} s (is a worker consuming memory.added? was it dead-lettered?)")
            time.sleep(0.2)


class AsyncClient:
    """The memory API for asyncio code. Use as an async context manager, or await `close()`."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float = 30.0) -> None:
        """`token` defaults to DREAM_API_TOKEN; errors are DreamError (one line)."""
        self.url = url
        self._http = httpx.AsyncClient(base_url=url, headers=_headers(token), timeout=timeout)

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        kwargs = _encoded(kwargs)
        try:
            return _checked(await self._http.request(method, path, **kwargs))
        except httpx.HTTPError as exc:
            raise _transport_error(self.url, exc) from None
        except httpx.InvalidURL as exc:  # not an HTTPError: an id or a query too long for a URL
            raise DreamError(f"cannot send this request: {exc}") from None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def add(self, user_id: str, text: str, *, wait: bool = False, timeout: float = 60.0,
                  **fields: Any) -> Accepted:
        accepted = (await self.add_many([{"user_id": user_id, "text": text, **fields}]))[0]
        if not wait:
            return accepted
        memory = await self.wait_for(accepted, timeout)
        return _added(accepted, memory, await self.history(accepted.memory_id, user_id))

    async def add_many(self, memories: list[dict[str, Any]]) -> list[Accepted]:
        body = await self._call("POST", "/v1/memories", json=memories)
        return [Accepted(**a) for a in _field(body, "accepted")]

    async def get(self, memory_id: str, user_id: str) -> Memory:
        """One memory of this user (another user's id is a 404, as an unknown one)."""
        return Memory.from_row(await self._call("GET", f"/v1/memories/{_seg(memory_id)}", params={"user": user_id}))

    async def history(self, memory_id: str, user_id: str) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", f"/v1/memories/{_seg(memory_id)}/history",
                                               params={"user": user_id})
        return out

    async def search(self, user_id: str, query: str, *, latest_only: bool = False, include_merged: bool = False,
                     limit: int = 10, cursor: str | None = None, threshold: float | None = None,
                     metadata: Mapping[str, Any] | None = None, **filters: str | None) -> Page:
        _searchable(query)
        params = _read_params(user_id, query, latest_only, include_merged, limit, cursor, filters, threshold, metadata)
        return _page(await self._call("GET", "/v1/memories", params=params))

    async def list(self, user_id: str, *, latest_only: bool = False, include_merged: bool = False,
                   limit: int | None = None, cursor: str | None = None,
                   metadata: Mapping[str, Any] | None = None, **filters: str | None) -> Page:
        params = _read_params(user_id, None, latest_only, include_merged, limit, cursor, filters, None, metadata)
        return _page(await self._call("GET", "/v1/memories", params=params))

    async def update(self, memory_id: str, user_id: str, *, text: str | None = None,
                     metadata: Mapping[str, Any] | None = None) -> Accepted:
        """A new version (new text and/or metadata over the old) that supersedes this one once stored."""
        body = {k: v for k, v in (("text", text), ("metadata", dict(metadata) if metadata else None)) if v is not None}
        out = await self._call("PATCH", f"/v1/memories/{_seg(memory_id)}", params={"user": user_id}, json=body)
        return Accepted(**_field(out, "accepted"))

    async def delete(self, memory_id: str, user_id: str, *, hard: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("DELETE", f"/v1/memories/{_seg(memory_id)}",
                                               params={"user": user_id, "hard": "true" if hard else "false"})
        return out

    async def delete_all(self, user_id: str) -> int | None:
        """Erases one user for good (every memory, behind the adds of the user accepted before it); returns how
        many were deleted, or None while it is still queued behind them (202: the erase audit event on
        memory.status says when it is done)."""
        out = await self._call("DELETE", f"/v1/users/{_seg(user_id)}", params={"confirm": user_id})
        return int(out["deleted"]) if out.get("erased") is True else None

    async def undo(self, decision_id: str, user_id: str) -> JSONList:
        body = await self._call("POST", f"/v1/decisions/{_seg(decision_id)}/undo", params={"user": user_id})
        events: JSONList = _field(body, "status_events")
        return events

    async def consolidate(self, user_id: str | None, *, mode: str = "dry_run", app_id: str | None = None,
                          dry_run: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("POST", "/v1/consolidations", json=_consolidation(
            user_id, mode, app_id, dry_run))
        return out

    async def approve(self, plan_id: str, answers: Mapping[str, str] | None = None,
                      rest: str = "apply", user: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("POST", f"/v1/consolidations/{_seg(plan_id)}/approve",
                                               json={"answers": dict(answers or {}), "rest": rest},
                                               params=_user(user))
        return out

    async def reject(self, plan_id: str, user: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("DELETE", f"/v1/consolidations/{_seg(plan_id)}", params=_user(user))
        return out

    async def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = await self._call("GET", "/v1/stats", params={"detail": "1"})
        return out

    async def wait_for(self, added: Accepted, timeout: float = 60.0) -> Memory:
        """The memory `add` accepted, once the worker has stored it (adding goes through Kafka)."""
        deadline = time.monotonic() + timeout
        while True:
            try:  # each try within the time left: a worker that does not answer cannot stretch the wait
                left = max(deadline - time.monotonic(), 0.1)
                return Memory.from_row(await self._call("GET", f"/v1/memories/{_seg(added.memory_id)}",
                                                        params={"user": added.user_id}, timeout=left))
            except DreamAPIError as exc:
                if exc.status != 404:
                    raise
            if time.monotonic() > deadline:
                raise DreamTimeout(f"memory {added.memory_id} of {added.user_id} was not stored within "
                                   f"{timeout:.0f} s (is a worker consuming memory.added? was it dead-lettered?)")
            await asyncio.sleep(0.2)
