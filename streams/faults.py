"""Fault points: named places on the write path where a test can stop the process, to prove that any
prefix of a decision's steps is either invisible or completed on the next delivery.

`DREAM_FAULT_AT=step:n` makes the n-th pass through `step` kill the process with SIGKILL (the worker as
an operator would see a crash: no cleanup, no flush). Steps, in order, for one event:

    stored     the memory, its decisions, links, pending target writes and status events: one write
    target     one target memory updated (once per target)
    applied    the pending target writes cleared
    published  (worker) the batch's status events and dead letters sent, not yet marked sent
    marked     (worker) the events marked sent in the store, the offsets not yet committed

Unset (the default) every point is a no-op. Tests in process use `arm()` to raise instead of killing.

`DREAM_FAULT_UNWRITABLE=FILE` makes every write to an embedded store fail with EACCES while FILE
exists: an unwritable store an operator can switch on and off (root ignores file modes, and a
filesystem with the store's files open cannot be remounted read-only).

Below every layer (it imports nothing of the project), so the store can use it too.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable

STEPS = ("stored", "target", "applied", "published", "marked")
ENV = "DREAM_FAULT_AT"
UNWRITABLE_ENV = "DREAM_FAULT_UNWRITABLE"


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


_armed: dict[str, int] = {}
_passed: dict[str, int] = {}
_action: Callable[[], None] = _kill


def _from_env() -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    step, _, n = spec.partition(":")
    if step not in STEPS:
        raise ValueError(f"{ENV} must be STEP[:N] with STEP one of {', '.join(STEPS)}, not {spec!r}")
    _armed[step] = int(n or "1")


_from_env()


def arm(step: str, n: int = 1, action: Callable[[], None] = _kill) -> None:
    """Fire `action` on the n-th pass through `step` (counted from now)."""
    global _action
    _armed.clear()
    _passed.clear()
    _armed[step] = n
    _action = action


def disarm() -> None:
    global _action
    _armed.clear()
    _passed.clear()
    _action = _kill


def point(step: str) -> None:
    """A fault point; free when nothing is armed."""
    if not _armed or step not in _armed:
        return
    _passed[step] = _passed.get(step, 0) + 1
    if _passed[step] == _armed[step]:
        _action()


def check_writable(path: str) -> None:
    """Raises EACCES for a write under `path` while the DREAM_FAULT_UNWRITABLE flag file exists."""
    flag = os.environ.get(UNWRITABLE_ENV)
    if flag and os.path.exists(flag):
        raise PermissionError(errno.EACCES, "Permission denied (DREAM_FAULT_UNWRITABLE)", path)
