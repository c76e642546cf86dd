"""The input-offset ledger (streams/worker/offsets.py): what ingest may take, skip, or must read again, and
what it may commit. The scenario of the SIGKILL restart is replayed here offset by offset."""

from __future__ import annotations

from dreamstream.streams.worker.offsets import InputOffsets, Verdict

TP = ("memory.added", 0)


def ledger(start: int = 0) -> InputOffsets[tuple[str, int]]:
    out: InputOffsets[tuple[str, int]] = InputOffsets(reseek_after=10.0)
    out.start(TP, start)
    return out


def test_records_in_order_are_taken_and_the_commit_follows_them() -> None:
    book = ledger(5)
    assert [book.admit(TP, o, 0.0) for o in (5, 6, 7)] == [Verdict.TAKE] * 3
    assert book.next_offset(TP) == 8


def test_a_redelivery_of_stored_records_is_skipped() -> None:
    book = ledger(5)
    book.admit(TP, 5, 0.0)
    assert book.admit(TP, 3, 0.0) is Verdict.SKIP
    assert book.admit(TP, 5, 0.0) is Verdict.SKIP
    assert book.next_offset(TP) == 6


def test_records_past_an_undelivered_stretch_are_read_again_never_committed_over() -> None:
    """The restart seen here: committed 6, the fetch resumed at 42. Faust filled 7..41 as acked."""
    book = ledger(6)
    assert book.admit(TP, 42, 0.0) is Verdict.PROBE
    book.floor_is(TP, 6)  # the log holds a record at 6: 6..41 were not delivered
    assert book.admit(TP, 42, 0.0) is Verdict.SEEK  # drop it, seek back to 6
    assert [book.admit(TP, o, 0.5) for o in (43, 44)] == [Verdict.DROP] * 2  # the rest of the stale run
    assert book.next_offset(TP) == 6  # nothing past 6 is committed
    assert [book.admit(TP, o, 1.0) for o in range(6, 43)] == [Verdict.TAKE] * 37  # the seek's redelivery
    assert book.next_offset(TP) == 43


def test_a_seek_that_did_not_take_effect_is_repeated_then_reported() -> None:
    book = ledger(6)
    book.admit(TP, 42, 0.0)
    book.floor_is(TP, 6)
    assert book.admit(TP, 42, 0.0) is Verdict.SEEK
    assert book.admit(TP, 50, 5.0) is Verdict.DROP
    assert book.admit(TP, 51, 10.5) is Verdict.SEEK
    assert book.unanswered(20.0, after=30.0) == []
    assert book.unanswered(31.0, after=30.0) == [TP]  # still behind since the first seek: wedged
    book.admit(TP, 6, 32.0)
    assert book.unanswered(40.0, after=30.0) == []


def test_offsets_that_hold_no_record_are_passed_over() -> None:
    """Transaction markers and aborted records: the log's first record after 10 is 13."""
    book = ledger(10)
    assert book.admit(TP, 13, 0.0) is Verdict.PROBE
    book.floor_is(TP, 13)
    assert book.admit(TP, 13, 0.0) is Verdict.TAKE
    assert book.next_offset(TP) == 14 and book.gaps_skipped == 3


def test_no_answer_from_the_log_counts_as_undelivered() -> None:
    book = ledger(10)
    book.admit(TP, 13, 0.0)
    book.floor_is(TP, None)
    assert book.admit(TP, 13, 0.0) is Verdict.SEEK
    assert book.admit(TP, 10, 1.0) is Verdict.TAKE


def test_a_failed_batch_is_read_again_from_its_first_record() -> None:
    book = ledger(0)
    for o in range(0, 8):
        book.admit(TP, o, 0.0)
    book.rewind(TP, 4, 0.0)  # the batch 4..7 failed to store
    assert book.next_offset(TP) == 4
    assert book.admit(TP, 8, 0.1) is Verdict.DROP  # queued after the failed batch: comes again after the seek
    assert [book.admit(TP, o, 0.2) for o in range(4, 9)] == [Verdict.TAKE] * 5


def test_a_reassigned_partition_starts_from_its_committed_offset() -> None:
    book: InputOffsets[tuple[str, int]] = InputOffsets()
    book.start(TP, 0, epoch=1)
    book.admit(TP, 0, 0.0)
    assert book.known(TP, epoch=1) and not book.known(TP, epoch=2)  # a rebalance since
    book.start(TP, 30, epoch=2)  # another worker stored up to 30 meanwhile
    assert book.admit(TP, 29, 0.0) is Verdict.SKIP and book.admit(TP, 30, 0.0) is Verdict.TAKE


def test_a_ledger_started_below_the_commit_heals_at_the_commit() -> None:
    """The stall seen after 4 of about 44 restarts: the ledger started at 0 (Faust's copy of the commit was
    not set yet), the records from the commit on came, it seeked back to 0, and nothing came again."""
    book = ledger(0)
    assert book.admit(TP, 500, 0.0) is Verdict.PROBE
    book.floor_is(TP, 0)
    assert book.admit(TP, 500, 0.0) is Verdict.SEEK
    assert book.unanswered(31.0, after=30.0) == [TP]
    assert not book.heal(TP, None) and not book.heal(TP, 0)  # nothing committed past it: really missing
    assert book.heal(TP, 500)  # the group committed 500: everything below is stored
    assert book.unanswered(62.0, after=30.0) == []
    assert [book.admit(TP, o, 63.0) for o in (500, 501)] == [Verdict.TAKE] * 2
    assert book.next_offset(TP) == 502
    assert not book.heal(TP, 400)  # a commit behind the ledger never moves it back
