"""Client noise folded: one line per kind of error per period, the next one counting the folded."""

from __future__ import annotations

import logging

import pytest

from dreamstream.streams.worker.logs import FoldRepeats, fold_client_noise


def test_repeats_of_one_error_are_folded_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("aiokafka.test-fold")
    fold = FoldRepeats(seconds=0.2)
    log.addFilter(fold)
    try:
        with caplog.at_level(logging.INFO, logger="aiokafka.test-fold"):
            for port in range(1000):
                log.error("Unable connect to node with id 1: [Errno 111] Connect call failed ('127.0.0.1', %d)", port)
            log.error("Unable to update metadata from [1]")
            log.info("Discovered coordinator 1")  # below WARNING: never folded
            log.info("Discovered coordinator 1")
            fold.seen = {k: (t - 1.0, n) for k, (t, n) in fold.seen.items()}  # the period has passed
            log.error("Unable connect to node with id 1: [Errno 111] Connect call failed ('127.0.0.1', 9092)")
    finally:
        log.removeFilter(fold)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 5
    assert lines[-1].endswith("(999 more like this in the last 0 s)")


def test_every_kafka_client_logger_gets_one_fold() -> None:
    import aiokafka  # noqa: F401  (its loggers exist once it is imported)

    fold_client_noise()
    fold_client_noise()
    for name in ("aiokafka", "aiokafka.conn", "aiokafka.consumer.fetcher"):
        assert sum(isinstance(f, FoldRepeats) for f in logging.getLogger(name).filters) == 1
