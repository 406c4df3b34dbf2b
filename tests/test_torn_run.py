"""A run of consume-queue units torn in its middle by a kill (issue 25, item 12).

Bulk dispatch (`ConsumeQueue.append_run`) writes the units of many records of one queue with one
copy into the map. A copy is not written front to back: glibc's memmove for 257-512 bytes on an
AVX-512 machine stores the first 256 bytes, then 64-byte blocks from the end backwards. A SIGKILL
between those stores leaves a hole of a few bytes inside the run, every unit after it whole. With a
23-unit run the hole is bytes [256, 268): the low half of the 13th unit's tags code (a positive
hash: the unit reads (offset, size, 0), as the crash lab's `Payments-1: unit 34 = (203246, 618, 0)`,
unit 22 + 12) and the 14th unit's offset. `ConsumeQueue.recover` accepts both (offset >= 0, size
> 0) and the last unit of the queue is whole, so checking the tail alone does not see them.

The test writes the run with the real bulk dispatch, leaves exactly the bytes that interleaving
leaves (a kill cannot be timed inside one memcpy from Python), crashes the store and reopens it."""
import itertools

from mqstore.config import StoreConfig
from mqstore.consume_queue import CQ_STORE_UNIT_SIZE
from mqstore.message import Message, tags_code
from mqstore import accel
from mqstore.store import MessageStore
from mqstore.verify import check_store

CFG = StoreConfig.small(flush_cq_thorough_interval_ms=600_000)
T0 = 1_700_000_000_000
RUN = 23                                   # units in one copy: 460 bytes, the 4-8 x 64-byte path
HOLE = (256, 268)                          # what a kill after the stores of [0, 256) and [268, 460) leaves


def clock():
    c = itertools.count()
    return lambda: T0 + 1000 * next(c)


def message(i):
    return Message("Payments", bytes(100 + i), queue_id=1, properties={"TAGS": f"Pay{i % 3}"})


def crashed_with_torn_run(root, batch=True):
    "22 units dispatched one pass, then 23 in one run; the run torn; the store killed."
    switch = accel.fast_paths(batch)   # section 10's switch: the fast paths, or the reference
    switch.__enter__()
    try:
        s = MessageStore.open(root, CFG, clock=clock())
        for i in range(22):
            s.put(message(i))
        s.wait_dispatched()
        s.reput.stop()                                     # dispatch lags: the next units form one run
        for i in range(22, 22 + RUN):
            s.put(message(i))
        s.reput.dispatch_until()
        q = s.cq_store.get_queue("Payments", 1)
        assert q.max_offset_in_queue == 22 + RUN
        s.halt()                                           # the kill: abort stays, no checkpoint
    finally:
        switch.__exit__(None, None, None)
    seg = root / "consumequeue" / "Payments" / "1" / f"{0:020d}"
    raw = bytearray(seg.read_bytes())
    start = 22 * CQ_STORE_UNIT_SIZE
    raw[start + HOLE[0]:start + HOLE[1]] = bytes(HOLE[1] - HOLE[0])
    seg.write_bytes(bytes(raw))


def test_a_run_torn_in_the_middle_is_mended_by_the_replay(tmp_path):
    crashed_with_torn_run(tmp_path)
    with MessageStore.open(tmp_path, CFG, clock=clock()) as s:
        s.wait_dispatched()
        q = s.cq_store.get_queue("Payments", 1)
        for qoff in (34, 35):                              # the units the hole touched
            m = s.get("Payments", 1, qoff, 1).messages[0]
            assert q.unit(qoff) == (m.commit_log_offset, m.total_size, tags_code(m.tags)) != (0, 0, 0)
        got = s.get("Payments", 1, 34, 1, tags=message(34).tags).messages   # a consumer filtering by tag
        assert got and got[0].body == message(34).body
    report = check_store(tmp_path, CFG, clock=clock())
    assert report.ok, report.problems[:3]


def test_a_torn_run_is_mended_by_the_per_record_replay_too(tmp_path):
    crashed_with_torn_run(tmp_path, batch=False)
    switch = accel.fast_paths(False)   # section 10's switch: the fast paths, or the reference
    switch.__enter__()
    try:
        report = check_store(tmp_path, CFG, clock=clock())
    finally:
        switch.__exit__(None, None, None)
    assert report.ok, report.problems[:3]
