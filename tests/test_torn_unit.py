"""A consume-queue unit torn by a crash (its offset and size written, its tags code not yet): after
the crash, recovery checks the last unit of every queue against its record, drops one that
disagrees and replays its record, so the queue serves the right tags code again. Chapter 8's crash
lab met such a unit once (`Payments-1: unit 34 = (203246, 618, 0) disagrees with the record there`)."""
import itertools

import pytest

from mqstore.checkpoint import create_abort_file
from mqstore.config import StoreConfig
from mqstore.consume_queue import CQ_STORE_UNIT_SIZE
from mqstore.message import Message, tags_code
from mqstore import accel
from mqstore.store import MessageStore, QueueTailsDropped
from mqstore.verify import check_store

CFG = StoreConfig.small(commit_log_file_size=8192, flush_cq_thorough_interval_ms=600_000)
T0 = 1_700_000_000_000


def clock():
    c = itertools.count()
    return lambda: T0 + 1000 * next(c)


def fill(root, n=60):
    with MessageStore.open(root, CFG, clock=clock()) as s:
        for i in range(n):
            s.put(Message("Payments", bytes(100 + i), queue_id=i % 2, properties={"TAGS": f"Tag{i % 3}"}))
        s.wait_dispatched()
    return root / "consumequeue" / "Payments" / "1"


def tear_last_unit(folder, what):
    "Zero the last unit's tags code (8 bytes), or its size and tags code, as a kill mid-copy leaves it."
    seg = sorted(folder.iterdir())[-1]
    raw = bytearray(seg.read_bytes())
    units = [i for i in range(0, len(raw), CQ_STORE_UNIT_SIZE) if any(raw[i:i + CQ_STORE_UNIT_SIZE])]
    last = units[-1]
    start = last + (12 if what == "tags" else 16)
    raw[start:last + CQ_STORE_UNIT_SIZE] = bytes(last + CQ_STORE_UNIT_SIZE - start)
    seg.write_bytes(bytes(raw))
    return (int(seg.name) + last) // CQ_STORE_UNIT_SIZE


@pytest.mark.parametrize("stale_checkpoint", [True, False])
@pytest.mark.parametrize("batch", [True, False])
def test_a_torn_last_unit_is_dropped_and_written_again(tmp_path, stale_checkpoint, batch):
    folder = fill(tmp_path)
    qoff = tear_last_unit(folder, "tags")
    create_abort_file(tmp_path)                                  # the crash
    if stale_checkpoint:                                         # nothing vouched for: replay all
        (tmp_path / "checkpoint").write_bytes(bytes(len((tmp_path / "checkpoint").read_bytes())))
    events = []
    switch = accel.fast_paths(batch)   # section 10's switch: the fast paths, or the reference
    switch.__enter__()
    try:
        with MessageStore.open(tmp_path, CFG, clock=clock(), observer=events.append) as s:
            s.wait_dispatched()
            got = s.get("Payments", 1, qoff, 1).messages[0]
            q = s.cq_store.get_queue("Payments", 1)
            assert q.unit(qoff)[2] == tags_code(got.tags) != 0
            assert q.max_offset_in_queue == 30
    finally:
        switch.__exit__(None, None, None)
    dropped = [e for e in events if isinstance(e, QueueTailsDropped)]
    assert len(dropped) == 1 and dropped[0].queues == ("Payments-1",)
    report = check_store(tmp_path, CFG, clock=clock())
    assert report.ok, report.problems[:3]


def test_a_unit_without_its_size_is_cut_by_queue_recovery_and_written_again(tmp_path):
    folder = fill(tmp_path)
    qoff = tear_last_unit(folder, "size")
    create_abort_file(tmp_path)
    with MessageStore.open(tmp_path, CFG, clock=clock()) as s:
        s.wait_dispatched()
        assert s.cq_store.get_queue("Payments", 1).max_offset_in_queue == qoff + 1
    assert check_store(tmp_path, CFG, clock=clock()).ok


def test_a_clean_store_after_a_crash_drops_nothing(tmp_path):
    fill(tmp_path)
    create_abort_file(tmp_path)
    events = []
    with MessageStore.open(tmp_path, CFG, clock=clock(), observer=events.append):
        pass
    assert not [e for e in events if isinstance(e, QueueTailsDropped)]
