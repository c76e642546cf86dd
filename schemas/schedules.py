"""Consolidation schedules: named or cron, shared by the control contract, the CLI and the worker's timer."""

from __future__ import annotations

import hashlib
from datetime import datetime, tzinfo

from croniter import CroniterBadDateError, croniter
from dateutil import tz

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
    try:  # "0 3 30 2 *" is valid cron and never fires: every later check of it would fail
        croniter(spec.strip(), datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise ValueError(f"the cron expression {spec.strip()!r} never fires (no such date)") from None
    return spec.strip(), 1


def schedule_id(user_id: str, app_id: str | None) -> str:
    """One schedule per scope: registering again replaces it.

    A user id with "|" in it is joined to the app by NUL (no id can hold one): "|" alone gave user "ops|team"
    and user "ops" with app "team|" one id, and one user's schedule replaced the other's. Every other scope
    keeps the id it always had."""
    sep = "\x00" if "|" in user_id else "|"
    return "sched-" + hashlib.sha256(f"{user_id}{sep}{app_id or ''}".encode()).hexdigest()[:12]


def schedule_fired(spec: str, last_fired: datetime | None, registered: datetime, now: datetime,
                   zone: tzinfo | None = None) -> bool:
    """Whether a firing of `spec` came due in (the later of the last firing and the registration, now].

    Checked by a once-a-minute worker timer, so a worker that was down catches up with one run
    (never one run per missed firing). The expression is read on the wall clock of `zone` (the worker's
    local time zone, with its daylight-saving rules): the next firing is found in wall time and only then
    placed in time. Counted in a fixed UTC offset, 03:00 came due twice on the night clocks go back (02:00
    and 03:00) and at 04:00 after they go forward. A naive datetime is wall time in `zone`."""
    cron, _every = parse_schedule(spec)
    zone = zone or tz.tzlocal()

    def aware(x: datetime) -> datetime:
        return x.replace(tzinfo=zone) if x.tzinfo is None else x

    base = max(aware(x) for x in (last_fired, registered) if x is not None)
    wall = base.astimezone(zone).replace(tzinfo=None)
    due = croniter(cron, wall).get_next(datetime).replace(tzinfo=zone)  # an hour that occurs twice: its first
    return bool(due <= aware(now))


def runs_on_firing(spec: str, firing: int) -> bool:
    """Firing number `firing` (0-based) runs the pass: every one, or every other one for biweekly."""
    return firing % parse_schedule(spec)[1] == 0
