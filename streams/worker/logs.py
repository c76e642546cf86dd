"""Repeated client errors folded: a broker restart once logged about 5,000 ERROR lines (aiokafka logs
every failed connect, metadata update, fetch and produce retry). One line per kind of error per
REPEAT_SECONDS is kept, and the next one says how many were folded meanwhile."""

from __future__ import annotations

import logging
import re
import time

REPEAT_SECONDS = 30.0
NOISY = ("aiokafka", "faust.transport")
_DIGITS = re.compile(r"\d+")


class FoldRepeats(logging.Filter):
    """Warnings and errors of one kind (the message with its numbers blanked) at most once a period."""

    def __init__(self, seconds: float = REPEAT_SECONDS) -> None:
        super().__init__()
        self.seconds = seconds
        self.seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = _DIGITS.sub("#", record.getMessage())[:160]
        now = time.monotonic()
        last, folded = self.seen.get(key, (float("-inf"), 0))
        if now - last < self.seconds:
            self.seen[key] = (last, folded + 1)
            return False
        self.seen[key] = (now, 0)
        if folded:
            record.msg = f"{record.msg} ({folded} more like this in the last {self.seconds:.0f} s)"
        return True


def fold_client_noise(seconds: float = REPEAT_SECONDS) -> None:
    """Puts one FoldRepeats on every Kafka client logger (they log on their own names, not the root)."""
    fold = FoldRepeats(seconds)
    names = [n for n in logging.root.manager.loggerDict if n.startswith(NOISY)]
    for name in [*NOISY, *names]:
        logger = logging.getLogger(name)
        if not any(isinstance(f, FoldRepeats) for f in logger.filters):
            logger.addFilter(fold)
