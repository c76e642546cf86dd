"""The memory API on the worker's HTTP server, described by the OpenAPI document it serves.

    POST /v1/memories                      add one memory (or a list): validated, produced to memory.added
    GET  /v1/memories?user=U[&q=TEXT]      list or search, current facts first; filters, read modes, cursor
    GET  /v1/memories/{id}?user=U          one memory of that user
    PATCH /v1/memories/{id}?user=U         update: a new version supersedes it (undo reverts it)
    DELETE /v1/memories/{id}?user=U        soft delete (undo reverts it); &hard=true: gone, links too
    GET  /v1/memories/{id}/history?user=U  its decisions (with evidence) and links
    DELETE /v1/users/{user}?confirm={user} erase one user for good
    POST /v1/decisions/{id}/undo?user=U    revert one decision of that user
    POST /v1/consolidations                a consolidation pass (dry_run: a plan to answer; auto), light, full
    POST /v1/consolidations/{plan}/approve apply a plan, each item as answered (apply, skip, A, B)
    DELETE /v1/consolidations/{plan}       drop a plan unapplied
    GET  /v1/stats?detail=1                counts by status, kind and type, users, last consolidation runs
    GET  /v1/openapi.json                  this API, described

A user's write sent to a worker that does not hold the user's partition is passed on to the one that does
(`at_owner`). Errors are JSON `{"error": ...}` with a 4xx status. Auth: with DREAM_API_TOKEN set every call needs
`Authorization: Bearer <token>`; without one, only loopback clients are answered.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web as aioweb
from cachetools import TTLCache
from faust.web import Request, Response, View
from yarl import URL

from dreamstream.schemas.errors import StoreError
from dreamstream.streams.core import changes, memories, reads
from dreamstream.streams.core import consolidation as runner
from dreamstream.streams.core.ingest import BatchResult
from dreamstream.streams.worker import metrics
from dreamstream.streams.worker.app import (
    app,
    deliver,
    memory_added_topic,
    on_store_thread,
    processor,
    publish,
    settings,
)
from dreamstream.streams.worker.consolidation import access_event, accessed_topic
from dreamstream.streams.worker.ingest import EraseNotSent, request_erase
from dreamstream.streams.worker.tables import settings_table

log = logging.getLogger("dreamstream.api")


def _json(body: Any, status: int = 200) -> Any:
    return aioweb.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _error(status: int, message: str) -> Any:
    return _json({"error": message}, status)


def refused(request: Any) -> Any | None:
    """None when the caller may use the API, else the 401/403 response."""
    if settings.api_token:
        given = request.headers.get("Authorization", "")
        # Any bytes a client sends compare (a header that is not UTF-8 is just a wrong token, not a 500).
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), f"Bearer {settings.api_token}".encode()):
            return _error(401, "this API needs Authorization: Bearer <DREAM_API_TOKEN>")
        return None
    if not _loopback(request.remote):
        return _error(403, "without DREAM_API_TOKEN the API answers loopback clients only")
    return None


async def _read_json(request: Request) -> Any:
    """The request's JSON body; ValueError `invalid_json: ...` (a 400) when it does not parse, BodyTooLarge
    (a 413) past the server's limit."""
    try:
        return orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"invalid_json: {exc}") from None
    except aioweb.HTTPRequestEntityTooLarge:
        limit = getattr(request, "_client_max_size", 1024**2)  # aiohttp's, 1 MiB unless the app sets it
        raise BodyTooLarge(f"oversize: the body is over {limit} bytes, this API's limit: send fewer or shorter "
                           "memories a request") from None


class BodyTooLarge(Exception):
    """A request body past the server's limit (aiohttp's `client_max_size`): a 413 with the limit."""


FORWARDED_BY = "X-Dream-Forwarded-By"
"""On a request passed on to the worker holding its user's partition: that worker runs it, never passes it on."""
SERVED_BY = "X-Dream-Served-By"
"""On the answer to a passed-on request: the worker that ran it."""


async def at_owner(request: Request, user: str) -> Any | None:
    """A user's write (delete, erase, undo, a consolidation pass or approval) is run by the worker holding
    the user's memory.added partition, as ingest of that user is: on a shared store, one run anywhere else
    interleaved its read-modify-write of links with that ingest. Returns None to run it here (this worker
    holds it, the request was passed on already, or no assignment or reachable address is known: one
    worker), else the owner's answer, passed back as it came.

    Passed on only with DREAM_API_TOKEN set or to a worker on this machine: without a token an API answers
    loopback clients only, and the owner refused a request that came from another machine."""
    here = app.conf.canonical_url
    if request.headers.get(FORWARDED_BY) or here.host in (None, "", "0.0.0.0"):
        return None
    try:
        owner = app.router.external_topic_key_store(memory_added_topic, user.encode())
    except Exception:  # KeyError: no assignment known yet
        return None
    if (owner.host, owner.port) == (here.host, here.port) or not (settings.api_token or _loopback(owner.host)):
        return None
    headers = {k: v for k in ("Authorization", "Content-Type") if (v := request.headers.get(k))}
    # The path as the client sent it, still encoded: decoded, an id's %2F and .. named another route.
    raw = str(getattr(request, "raw_path", "") or request.url.raw_path_qs)
    url = URL(f"{owner.scheme}://{owner.host}:{owner.port}{raw}", encoded=True)
    sent = Sent()
    try:
        async with _forwarding().request(request.method, url, data=await request.read(),
                                         headers={**headers, FORWARDED_BY: str(here)}, trace_request_ctx=sent,
                                         timeout=aiohttp.ClientTimeout(total=None, connect=5,
                                                                       sock_read=FORWARD_READ_S)) as answer:
            body = await answer.read()
            return aioweb.Response(body=body, status=answer.status, content_type=answer.content_type,
                                   headers={SERVED_BY: str(owner)})
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
        if sent.headers:  # a first try was sent (aiohttp retries an idempotent one whose connection dropped)
            return _error(504, f"sent to the worker holding user {user}'s partition ({owner}), no answer came: it "
                               f"may have been applied there ({type(exc).__name__})")
        return _error(503, f"could not reach the worker holding user {user}'s partition ({owner}); nothing was "
                           f"done: {type(exc).__name__}: {exc}")
    except (aiohttp.ClientError, TimeoutError) as exc:  # sent: the owner may have applied it
        return _error(504, f"sent to the worker holding user {user}'s partition ({owner}), no answer came: it "
                           f"may have been applied there ({type(exc).__name__})")


class Sent:
    """Per passed-on request: whether any try of it went out (a DELETE killed mid-answer was retried by
    aiohttp on a new connection, and that retry's refused connect read as "nothing was done")."""

    headers = False


async def _on_sent(session: Any, context: Any, params: Any) -> None:
    if isinstance(context.trace_request_ctx, Sent):
        context.trace_request_ctx.headers = True


_session: list[aiohttp.ClientSession] = []


def _forwarding() -> aiohttp.ClientSession:
    """The session requests are passed on with, traced so `at_owner` knows whether a try was sent."""
    if not _session or _session[0].closed:
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(_on_sent)
        _session[:] = [aiohttp.ClientSession(trace_configs=[trace])]
    return _session[0]


@app.on_before_shutdown.connect
async def _close_forwarding(sender: Any, /, *args: Any, **kwargs: Any) -> None:
    if _session and not _session[0].closed:
        await _session[0].close()


FORWARD_READ_S = 600.0
"""How long a passed-on write may run on its owner (an erase of a large user, a full pass) before the client
is told that no answer came (504: it may have been applied)."""


def _loopback(host: str | None) -> bool:
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return host == "localhost"


Handler = Callable[..., Awaitable[Any]]


def api_call(handler: Handler) -> Handler:
    """Every API method: the caller checked (token or loopback), and a bad value a 400 with its reason."""
    @functools.wraps(handler)
    async def call(view: View, request: Request, **kwargs: Any) -> Any:
        denied = refused(request)
        if denied is not None:
            return denied
        try:
            getall = getattr(request.query, "getall", None)  # aiohttp's MultiDict (faust types it a Mapping)
            repeated = sorted({k for k in request.query if getall is not None and len(getall(k)) > 1})
            if repeated:  # "?user=a&user=b" read a: one value each, or a 400
                raise ValueError(f"parameter {repeated[0][:40]!r} is given more than once")
            return await handler(view, request, **kwargs)
        except ValueError as exc:  # InvalidEvent and bad read parameters included
            return _error(400, str(exc))
        except BodyTooLarge as exc:
            return _error(413, str(exc))
        except StoreError as exc:  # the store is down or full: a retry may succeed
            return _error(503, f"store unavailable: {exc}")
        except Exception as exc:  # a bug: one line of JSON for the client, the traceback in the log
            log.exception("API %s %s failed", request.method, request.url)
            return _error(500, f"internal error: {type(exc).__name__}")
    return call


@app.page("/v1/memories")
class MemoriesView(View):
    @api_call
    async def get(self, request: Request) -> Response:
        """List or search one user's memories: current facts first, then history.

        ?user=U [&q=TEXT [&threshold=0..1]] [&latest_only=1 | &include_merged=1] [&limit=N] [&cursor=C]
        [&app_id=..&agent_id=..&run_id=..&kind=fact|pattern&status=..&type=<metadata.type>&metadata.<key>=..]
        An unknown parameter is a 400."""
        memories.check_params(request.query)
        proc = await processor()
        read = reads.read_query(request.query)
        page = await on_store_thread(memories.list_page, proc.store, proc.embed, read,
                                     memories.filters(request.query), request.query.get("cursor"))
        if read.text and page.rows:  # a search is a recall: it feeds decay and co-access
            await accessed_topic.send(key=read.user.encode(),
                                      value=access_event(read.user, [r["memory_id"] for r in page.rows]))
        return _json({"user": read.user, "mode": read.mode, "memories": page.rows,  # type: ignore[no-any-return]
                      "next_cursor": page.next_cursor})

    @api_call
    async def post(self, request: Request) -> Response:
        """Add a memory (or a JSON list of them): `user_id` and `text` required; 202 with the ids."""
        _only(request)
        events = memories.new_events(await _read_json(request))  # InvalidEvent: a 400 with its reason
        try:  # best effort: a busy or failing store must not stop adds (ingest dead-letters a conflict anyway)
            taken = await asyncio.wait_for(
                on_store_thread(memories.taken, (await processor()).store, events), 2.0)
        except Exception:  # noqa: BLE001
            taken = None
        if taken:  # ingest would dead-letter it: say so now, not after a 202 and a wait that never ends
            return _error(409, taken)  # type: ignore[no-any-return]
        await _forget_freed(events)
        clash = _reserve(events)  # no await between this check and the reservation: concurrent adds see it
        if clash:
            return _error(409, clash)  # type: ignore[no-any-return]
        try:
            late = await _deliver_within([(memory_added_topic, e["user_id"].encode(), orjson.dumps(e)) for e in events])
        except BaseException:
            for e in events:  # nothing was accepted: the ids are free again
                for key in _held(e):
                    ACCEPTED.pop(key, None)
            raise
        if late is not None:
            return late  # the ids stay held: the events may still land, and a resend with them is a retry
        accepted = [{"event_id": e["event_id"], "memory_id": e["memory_id"], "user_id": e["user_id"]} for e in events]
        return _json({"accepted": accepted}, status=202)  # type: ignore[no-any-return]


async def _deliver_within(records: list[tuple[Any, bytes | None, Any]]) -> Any | None:
    """`deliver`, or a 503 when the broker has not taken the records in DREAM_ADD_WAIT_SECONDS: an add hung as
    long as the broker was down (138 s in an audit) while clients gave up at their own timeout and took a
    stored add for a failed one. The delivery goes on: the records may still land (a resend with the same ids
    is stored once)."""
    delivery = asyncio.ensure_future(deliver(records))
    try:
        await asyncio.wait_for(asyncio.shield(delivery), settings.add_wait_seconds)
    except TimeoutError:
        delivery.add_done_callback(_late_delivery)
        return _error(503, f"the broker has not taken the event in {settings.add_wait_seconds:g} s (is Kafka up?); it "
                           "may still be stored: send it again with the same event_id and memory_id (stored once)")
    return None


def _late_delivery(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("an add answered 503 was not delivered either: %s", done.exception())


ACCEPTED: TTLCache[str, tuple[str, str]] = TTLCache(maxsize=100_000, ttl=300)
"""Ids this worker accepted lately (memory_id and event_id: their user and text), which the store may not
hold yet: two adds at once with one id and other words both passed the store's check, and ingest then
dead-lettered one after its 202. Per worker: adds through other workers are checked at ingest."""


def _held(event: dict[str, Any]) -> tuple[str, str]:
    """The keys an accepted event holds in ACCEPTED: its memory id and its event id."""
    return f"m\x1f{event['memory_id']}", f"e\x1f{event['event_id']}"


async def _forget_freed(events: list[dict[str, Any]]) -> None:
    """Drops the ACCEPTED entries these events clash with whose memory was stored and then removed for good (a
    hard delete, an erase: its digest is among the store's tombstones, on whichever worker removed it): the id is
    free again, and was refused as "just accepted" for five minutes."""
    held = {f"m\x1f{e['memory_id']}": e["memory_id"] for e in events}
    clashes = {key: (mid, *got) for key, mid in held.items() if (got := ACCEPTED.get(key)) is not None}
    if not clashes:
        return
    digests = {changes.gone_key(user, mid, text): key for key, (mid, user, text) in clashes.items()}
    try:
        gone = await asyncio.wait_for(on_store_thread((await processor()).store.buried, list(digests)), 2.0)
    except Exception:  # noqa: BLE001 - best effort, as the stored check: ingest decides in the end
        return
    for digest in gone:
        ACCEPTED.pop(digests[digest], None)


def _reserve(events: list[dict[str, Any]]) -> str | None:
    """The same 409 as `memories.taken` for an id an add in flight already holds with other content; else
    the ids are held for these events (the same content again is a retry: accepted)."""
    for e in events:
        by_memory, by_event = _held(e)
        content = (e["user_id"], e["text"])
        if ACCEPTED.get(by_memory, content) != content:
            return f"memory_id_conflict: {e['memory_id']} was just accepted as another memory"
        if ACCEPTED.get(by_event, content) != content:
            return f"duplicate_event_id: event_id {e['event_id']} was just accepted for other content"
    for e in events:
        for key in _held(e):
            ACCEPTED[key] = (e["user_id"], e["text"])
    return None


def _only_user(request: Request) -> None:
    """A read or update by id takes ?user= and nothing else: a typo is refused, as a listing refuses it."""
    _only(request, "user")


def _only(request: Request, *allowed: str) -> None:
    """A parameter a route does not take is a 400 (every route): ignored, `?user=` named a check never made."""
    if extra := sorted(set(request.query) - set(allowed)):
        takes = f"this takes {', '.join(allowed)} only" if allowed else "this takes no query parameters"
        raise ValueError(f"unknown parameter {extra[0][:40]!r}: {takes}")


@app.page("/v1/memories/{memory_id}")
class MemoryView(View):
    @api_call
    async def get(self, request: Request, memory_id: str) -> Response:
        """One memory of the user: ?user=U is required (another user's id answers 404)."""
        _only_user(request)
        user = reads.user_param(request.query)
        row = await on_store_thread(memories.get_memory, (await processor()).store, memory_id, user)
        if row is None:
            return _error(404, f"no memory {memory_id}")  # type: ignore[no-any-return]
        return _json(row)  # type: ignore[no-any-return]


    @api_call
    async def patch(self, request: Request, memory_id: str) -> Response:
        """An update (?user=U required; body {"text"?, "metadata"?}): a new version through Kafka that
        supersedes this one (kept as history, undoable); 202 with the new version's ids."""
        _only_user(request)
        user = reads.user_param(request.query)
        body = await _read_json(request)
        event = await on_store_thread(memories.update_event, (await processor()).store, memory_id, user, body)
        if event is None:
            return _error(404, f"no memory {memory_id}")  # type: ignore[no-any-return]
        late = await _deliver_within([(memory_added_topic, user.encode(), orjson.dumps(event))])
        if late is not None:
            return late
        return _json({"accepted": {k: event[k] for k in ("event_id", "memory_id", "user_id")},  # type: ignore[no-any-return]
                      "replaces": memory_id}, status=202)

    put = patch

    @api_call
    async def delete(self, request: Request, memory_id: str) -> Response:
        """A soft delete (?user=U required): status `deleted`, hidden from reads, kept; undo reverts it.
        `&hard=true` removes it for good with every link to it (not undoable)."""
        user = reads.user_param(request.query)
        hard = request.query.get("hard", "false")
        if set(request.query) - {"user", "hard"} or hard not in ("true", "false", "1", "0"):
            raise ValueError("a delete takes user and hard=true|false")
        if (passed := await at_owner(request, user)) is not None:
            return passed  # type: ignore[no-any-return]
        proc = await processor()
        remove = memories.hard_delete_memory if hard in ("true", "1") else memories.delete_memory
        try:
            events = await on_store_thread(remove, proc.store, memory_id, user)
        except ValueError as exc:
            return _error(409, str(exc))  # type: ignore[no-any-return]
        if events is None:
            return _error(404, f"no memory {memory_id}")  # type: ignore[no-any-return]
        await publish(BatchResult(status_events=events))
        await on_store_thread(changes.sent, proc.store, events)
        return _json({"memory_id": memory_id, "status": "deleted", "hard": remove is not memories.delete_memory,  # type: ignore[no-any-return]
                      "decision_id": events[0]["decision_id"], "status_events": events})


@app.page("/v1/users/{user_id}")
class UserView(View):
    @api_call
    async def delete(self, request: Request, user_id: str) -> Response:
        """Erase one user for good (privacy requests): every memory deleted, an audit event on
        memory.status with the count, never the texts. `?confirm=<the same user id>` is required."""
        reads.user_param({"user": user_id})  # no such user can exist: a 400 now, not a dead letter after the wait
        _only(request, "confirm")
        if request.query.get("confirm") != user_id:
            return _error(400, f"erasing deletes every memory of {user_id} for good: "  # type: ignore[no-any-return]
                               f"add ?confirm={user_id}")
        if (passed := await at_owner(request, user_id)) is not None:
            return passed  # type: ignore[no-any-return]
        try:
            done = await request_erase(user_id, None, "api")
        except EraseNotSent as exc:
            return _error(503, str(exc))  # type: ignore[no-any-return]
        return _json(done, status=200 if done["erased"] is True else 202)  # type: ignore[no-any-return]


@app.page("/v1/memories/{memory_id}/history")
class HistoryView(View):
    @api_call
    async def get(self, request: Request, memory_id: str) -> Response:
        _only_user(request)
        user = reads.user_param(request.query)
        out = await on_store_thread(memories.history, (await processor()).store, memory_id, user)
        if out is None:
            return _error(404, f"no memory {memory_id}")  # type: ignore[no-any-return]
        return _json(out)  # type: ignore[no-any-return]


@app.page("/v1/decisions/{decision_id}/undo")
class UndoView(View):
    @api_call
    async def post(self, request: Request, decision_id: str) -> Response:
        """?user=U is required, as on every route that changes a user's memories: another user's decision
        answers 404 (decision ids are derived from memory ids, so they are no secret)."""
        _only_user(request)
        user = reads.user_param(request.query)
        proc = await processor()
        if await on_store_thread(memories.decision_user, proc.store, decision_id) != user:
            return _error(404, f"no decision {decision_id} for user {user}")  # type: ignore[no-any-return]
        if (passed := await at_owner(request, user)) is not None:
            return passed  # type: ignore[no-any-return]
        try:
            events = await on_store_thread(proc.undo, decision_id, None, user)
        except KeyError as exc:
            return _error(404, str(exc.args[0]))  # type: ignore[no-any-return]
        except ValueError as exc:
            return _error(409, str(exc))  # type: ignore[no-any-return]
        await publish(BatchResult(status_events=events))
        await on_store_thread(changes.sent, proc.store, events)
        return _json({"decision_id": decision_id, "status_events": events})  # type: ignore[no-any-return]


async def _body(request: Request) -> dict[str, Any]:
    """A JSON object body ({} when empty); ValueError (a 400) otherwise."""
    body = await _read_json(request) if (await request.read()).strip() else {}
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


async def _consolidation(command: str, args: dict[str, Any]) -> Response:
    """One consolidation command, as the control topic runs it (core/consolidation.py `control`), with
    its status events published and then marked sent: 404 for an unknown plan, 400 for a bad answer."""
    proc = await processor()
    try:
        details, events = await on_store_thread(runner.control, proc, command, args,
                                                settings_table.get("retention") or None, settings.data_dir,
                                                metrics.consolidation_run)
    except KeyError as exc:
        reason = str(exc.args[0])
        if reason.startswith("no pending plan") and not args.get("user"):
            # Another worker may keep it (the owner of its user's partition): only `?user` routes there.
            reason += " on this worker: name its user (?user=...), the one its dry run's reply gave"
        return _error(404, reason)  # type: ignore[no-any-return]
    await publish(BatchResult(status_events=events))
    if events:
        await on_store_thread(changes.sent, proc.store, events)
    return _json({**details, "status_events": len(events)})  # type: ignore[no-any-return]


MODES = ("dry_run", "auto", "light", "full")


@app.page("/v1/consolidations")
class ConsolidationsView(View):
    @api_call
    async def post(self, request: Request) -> Response:
        """{"user": U, "app"?: A, "mode": dry_run|auto|light|full, "dry_run"?: bool (light, full)}.
        dry_run answers the plan (its items, each with an `item` id, and the report) to approve item by
        item; auto applies merges and prunes and skips conflicts; light and full run over the user (or,
        without one, everyone)."""
        _only(request)
        body = await _body(request)
        mode = body.get("mode", "dry_run")
        unknown = set(body) - {"user", "app", "mode", "dry_run"}
        if unknown or mode not in MODES:
            raise ValueError(f"a consolidation takes user, app, mode ({' | '.join(MODES)}) and dry_run"
                             + (f"; not {', '.join(sorted(unknown))}" if unknown else ""))
        user, app_id = body.get("user"), body.get("app")
        if user is not None and (not isinstance(user, str) or not user):
            raise ValueError("user must be a non-empty string")
        if user is not None:
            reads.user_param({"user": user})  # "../x", " ana": no such user can exist
        if not isinstance(body.get("dry_run", False), bool):  # "no" is a true value: it ran as a dry run
            raise ValueError("dry_run must be true or false")
        if app_id is not None and (not isinstance(app_id, str) or not app_id):
            raise ValueError("app must be a non-empty string (or left out)")
        if body.get("dry_run") and mode == "auto":  # it would apply what the caller meant only to look at
            raise ValueError("auto with dry_run: a pass's dry run is mode dry_run (dry_run is for light and full)")
        if mode in ("light", "full") and app_id is not None:  # it was ignored: a full pass merged every app's
            raise ValueError(f"{mode} runs over all of a user's apps: leave app out (a pass, dry_run or auto, "
                             "takes app)")
        if user and (passed := await at_owner(request, user)) is not None:
            return passed  # type: ignore[no-any-return]
        if mode in ("light", "full"):
            proc = await processor()
            events: list[dict[str, Any]] = []
            if mode == "full":
                summary = await on_store_thread(functools.partial(
                    runner.full, proc.store, user, bool(body.get("dry_run")), events_out=events))
            else:
                summary = await on_store_thread(runner.light, proc.store, user, bool(body.get("dry_run")))
            if events:  # the merges' status events out, then off the store's outbox
                await publish(BatchResult(status_events=events))
                await on_store_thread(changes.sent, proc.store, events)
            if not body.get("dry_run"):
                runner.note_run(settings.store_dir, summary)
            return _json(summary)  # type: ignore[no-any-return]
        if not user:
            raise ValueError("a consolidation pass needs user")
        return await _consolidation("consolidate.run", {"user": user, "app": app_id, "mode": mode})


@app.page("/v1/consolidations/{plan_id}/approve")
class ApproveView(View):
    @api_call
    async def post(self, request: Request, plan_id: str) -> Response:
        """{"answers"?: {item: apply|skip|A|B}, "rest"?: apply|skip}: the plan applied item by item."""
        _only(request, "user")
        body = await _body(request)
        if set(body) - {"answers", "rest"} or not isinstance(body.get("answers", {}), dict):
            raise ValueError('an approval is {"answers": {item: apply|skip|A|B}, "rest": apply|skip}')
        if (passed := await plan_owner(request, plan_id)) is not None:
            return passed  # type: ignore[no-any-return]
        return await _consolidation("consolidate.approve", {"plan_id": plan_id, **body, **_named_user(request)})


@app.page("/v1/consolidations/{plan_id}")
class PlanView(View):
    @api_call
    async def delete(self, request: Request, plan_id: str) -> Response:
        """The plan dropped, nothing applied."""
        _only(request, "user")
        if (passed := await plan_owner(request, plan_id)) is not None:
            return passed  # type: ignore[no-any-return]
        return await _consolidation("consolidate.reject", {"plan_id": plan_id, **_named_user(request)})


def _named_user(request: Request) -> dict[str, str]:
    """The ?user= a plan's approval or rejection names: checked against the plan's own user (404 if another)."""
    user = request.query.get("user")
    return {"user": user} if user else {}


async def plan_owner(request: Request, plan_id: str) -> Any | None:
    """`at_owner` for a plan this worker does not keep, by ?user= (a plan is kept by the worker that made it,
    the one that held its user's partition then); one it keeps is run here."""
    if runner.plan_user(settings.data_dir, plan_id):
        return None  # kept here (made before its user's partition moved): only this worker can apply it
    user = request.query.get("user")
    return await at_owner(request, user) if user else None


@app.page("/v1/openapi.json")
async def openapi_view(web: Any, request: Any) -> Any:
    """The OpenAPI 3.1 document of this API."""
    return _json(OPENAPI)


_ERROR = {"description": "a JSON error",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_ID = {"name": "memory_id", "in": "path", "required": True, "schema": {"type": "string"}}
_USER = {"name": "user", "in": "query", "required": True, "schema": {"type": "string"}}
OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "dreamstream", "version": "1",
             "description": "Long-term memory per user, kept coherent: current facts first, history linked."},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Error": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}},
    },
    "security": [{"bearer": []}],
    "paths": {
        "/v1/memories": {
            "get": {"summary": "List or search one user's memories, current facts first",
                    "parameters": [{"name": n, "in": "query", "schema": {"type": "string"}} for n in (
                        "user", "q", "threshold", "latest_only", "include_merged", "limit", "cursor",
                        *memories.FILTERS, "type")],
                    "responses": {"200": {"description": "rows and next_cursor"}, "400": _ERROR, "401": _ERROR}},
            "post": {"summary": "Add one memory or a list (user_id and text required)",
                     "requestBody": {"content": {"application/json": {"schema": {
                         "$ref": "https://dreamstream.dev/schemas/memory.added.schema.json"}}}},
                     "responses": {"202": {"description": "accepted: event and memory ids"}, "400": _ERROR}},
        },
        "/v1/memories/{memory_id}": {
            "get": {"summary": "One memory of the user", "parameters": [_ID, _USER],
                    "responses": {"200": {"description": "the memory"}, "400": _ERROR, "404": _ERROR}},
            "patch": {"summary": "Update text and/or metadata: a new version supersedes this one (undoable)",
                      "parameters": [_ID, _USER],
                      "responses": {"202": {"description": "the new version's ids"}, "400": _ERROR, "404": _ERROR}},
            "delete": {"summary": "Soft delete (status deleted, hidden from reads; undo reverts it); "
                                  "hard=true removes it and its links for good",
                       "parameters": [_ID, _USER, {"name": "hard", "in": "query", "schema": {"type": "boolean"}}],
                       "responses": {"200": {"description": "its decision and status event"}, "404": _ERROR,
                                     "409": _ERROR}}},
        "/v1/users/{user_id}": {"delete": {
            "summary": "Erase one user for good (confirm=<user_id> required); an audit event keeps the count",
            "parameters": [{"name": "user_id", "in": "path", "required": True, "schema": {"type": "string"}},
                           {"name": "confirm", "in": "query", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "how many memories were deleted"},
                          "202": {"description": "queued behind the user's accepted adds (the audit event says "
                                                 "when it is done)"}, "400": _ERROR}}},
        "/v1/memories/{memory_id}/history": {"get": {"summary": "Its decisions and links",
                                                     "parameters": [_ID, _USER],
                                                     "responses": {"200": {"description": "provenance"},
                                                                   "400": _ERROR, "404": _ERROR}}},
        "/v1/decisions/{decision_id}/undo": {"post": {
            "summary": "Revert one decision of the user (another user's answers 404)",
            "parameters": [{"name": "decision_id", "in": "path", "required": True, "schema": {"type": "string"}},
                           _USER],
            "responses": {"200": {"description": "the status events of the undo"}, "400": _ERROR, "404": _ERROR,
                          "409": _ERROR}}},
    },
}
