"""`dream control COMMAND [KEY=VALUE ...]`: send one ops command to `dream.control` and print its reply.

    dream control synthesis.enable project=demo
    dream control retention.set 'policies={"session_state": 30}'
    dream control consolidate.run user=u-1 mode=dry_run
    dream control consolidate.approve plan_id=<id>
    dream control undo decision_id=<id>
    dream control ingest.pause

A value is read as JSON when it parses (numbers, null, objects), else as a string. The command waits
for the reply (by its id) on `dream.control.replies`; exit status 0 for `ok`, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from typing import Any

import click
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from dreamstream.schemas.control import COMMANDS, command
from dreamstream.streams.cli.common import quiet_kafka, run_async, settings, worker_url

DESTRUCTIVE = {"erase": "erase deletes every memory of user {user} for good"}
"""Commands that cannot be undone: confirmed at a terminal, or with --yes."""


def parse_args(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE")
        if key in out:  # `user=u1 user=carol` acted on carol alone
            raise click.BadParameter(f"{key} is given twice: give each argument once")
        try:
            out[key] = orjson.loads(value)
        except orjson.JSONDecodeError:
            out[key] = value
    return out


async def send_and_wait(body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """Produces one command and waits for its reply (None when none came within `timeout`). The Kafka
    client's logging (a topic not there yet, a retry) stays out of the command's one-line answer."""
    quiet_kafka()
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all",
                                **settings.kafka.aiokafka_kwargs())
    try:
        await producer.start()
        await producer.send_and_wait(settings.topics.control, orjson.dumps(body), key=body["id"].encode())
    except KafkaConnectionError as exc:
        raise click.ClickException(f"no Kafka broker at {settings.bootstrap_servers}: {exc}") from None
    finally:
        await producer.stop()  # also when it never started: no "Unclosed AIOKafkaProducer" warning
    return await wait_reply(settings.bootstrap_servers, body["id"], timeout)


async def wait_reply(kafka: str, command_id: str, timeout: float = 60.0) -> dict[str, Any] | None:
    """The reply to one command, read from the start of the replies topic."""
    consumer = AIOKafkaConsumer(settings.topics.control_replies, bootstrap_servers=kafka,
                                auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
                                **settings.kafka.aiokafka_kwargs())
    await consumer.start()
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                for r in batch:
                    if r.key == command_id.encode():
                        found: dict[str, Any] = orjson.loads(r.value)
                        return found
    finally:
        await consumer.stop()
    return None


async def request(name: str, args: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """One command's `ok` details; a one-line ClickException for no reply or another outcome."""
    reply = await send_and_wait(command(name, args, token=settings.control_token), timeout)
    if reply is None:
        raise click.ClickException(no_reply(name, timeout))
    if reply.get("outcome") != "ok":
        raise click.ClickException(f"{name}: {reply.get('outcome')}: {reply.get('details')}")
    details: dict[str, Any] = reply.get("details") or {}
    return details


@click.command()
@click.argument("name", type=click.Choice(sorted(COMMANDS)))
@click.argument("pairs", nargs=-1)
@click.option("--id", "command_id", default=None, help="Command id (default: a fresh one); resending an id is a no-op.")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the reply.")
@click.option("--yes", is_flag=True, default=False, help="Confirm a destructive command (erase) without asking.")
@run_async
async def control(name: str, pairs: tuple[str, ...], command_id: str | None,
                  timeout: float, yes: bool) -> None:
    """Send one ops command to the worker(s) through Kafka and print the reply."""
    args = parse_args(pairs)
    if name in DESTRUCTIVE and not yes:
        what = DESTRUCTIVE[name].format(**{k: args.get(k, "?") for k in ("user",)})
        if not sys.stdin.isatty():
            raise click.ClickException(f"{what}: add --yes to confirm")
        click.confirm(f"{what}. Go ahead?", abort=True)
    body = command(name, args, command_id, issued_by=getpass.getuser(), token=settings.control_token)
    found = await send_and_wait(body, timeout)
    if found is None:
        raise click.ClickException(no_reply(body["id"], timeout))
    sys.stdout.write(orjson.dumps(found, option=orjson.OPT_INDENT_2).decode() + "\n")
    if found.get("outcome") != "ok":
        sys.exit(1)


def no_reply(what: str, timeout: float) -> str:
    """Why a command got no reply, as far as this machine can tell: the health of the worker holding the
    store (its API from the store's lock, else this machine's DREAM_HTTP_PORT) says what is failing, and why."""
    import httpx

    base = f"no reply to {what} within {timeout:.0f}s"
    url = worker_url(None, None) or f"http://127.0.0.1:{settings.http_port}"
    try:
        health = httpx.get(f"{url}/healthz", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return f"{base}: is a worker running? (none answers at {url})"
    failing = health.get("failing") or {}
    if failing:
        return f"{base}: the worker at {url} reports " + "; ".join(
            f"{part} failing: {entry.get('error')}" for part, entry in failing.items())
    return f"{base}: the worker at {url} is {health.get('status')}; is it reading {settings.topics.control}?"


def run_sync(name: str, args: dict[str, Any], timeout: float = 60.0) -> dict[str, Any] | None:
    """The same from Python (scripts, the demo)."""
    return asyncio.run(send_and_wait(command(name, args, token=settings.control_token), timeout))
