"""Consolidation schedules: named or cron, shared by the control contract, the CLI and the worker's timer."""

from __future__ import annotations

import hashlib
from datetime import datetime

from croniter import croniter

NAMED_SCHEDULES = {"daily": ("0 3 * * *", 1), "weekly": ("0 3 * * 0", 1), "biweekly": ("0 3 * * 0", 2)}
"""name -> (cron expression in the worker's local time, run every nth firing)."""


def parse_schedule(spec: str) -> tuple[str, int]:
    """weekly (Sunday 03:00 local), daily (03:00), biweekly (every other Sunday) or a 5-field cron
    expression; raises ValueError for anything else."""
    key = spec.strip().lower()
    if key in NAMED_SCHEDULES:
        return NAMED_SCHEDULES[key]
    if len(spec.split()) != 5 or not croniter.is_valid(spec):
        raise ValueError(f"schedule must be daily, weekly, biweekly or a 5-field cron expression, not {spec!r}")
    return spec.strip(), 1


def schedule_id(user_id: str, app_id: str | None) -> str:
    """One schedule per scope: registering again replaces it.

    A user id with "|" in it is joined to the app by NUL (no id can hold one): "|" alone gave user "ops|team"
    and user "ops" with app "team|" one id, and one user's schedule replaced the other's. Every other scope
    keeps the id it always had."""
    sep = "\x00" if "|" in user_id else "|"
    return "sched-" + hashlib.sha256(f"{user_id}{sep}{app_id or ''}".encode()).hexdigest()[:12]


def schedule_fired(spec: str, last_fired: datetime | None, registered: datetime, now: datetime) -> bool:
    """Whether a firing of `spec` came due in (the later of the last firing and the registration, now].

    Checked by a once-a-minute worker timer, so a worker that was down catches up with one run
    (never one run per missed firing)."""
    cron, _every = parse_schedule(spec)
    base = max(x for x in (last_fired, registered) if x is not None)
    return bool(croniter(cron, base).get_next(datetime) <= now)


def runs_on_firing(spec: str, firing: int) -> bool:
    """Firing number `firing` (0-based) runs the pass: every one, or every other one for biweekly."""
    return firing % parse_schedule(spec)[1] == 0
