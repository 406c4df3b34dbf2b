"Consume queues: units, RocketMQ's put guards, recovery, truncation, the read API."
import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st
from mqstore.errors import QueryError, InvalidTopicError, OffsetOutOfRangeError
from mqstore.fast.dispatch import put_bulk
from mqstore.consume_queue import (ConsumeQueue, ConsumeQueueStore, encode_unit, FILLER_SIZE, FILLER_UNIT,
                                   CQ_UNIT_DTYPE, valid_units, get_messages, GetMessageStatus,
                                   parse_subscription)


def make_q(tmp_path, units=4):
    return ConsumeQueue(tmp_path / "T" / "0", "T", 0, units_per_file=units)


def test_unit_layout():
    assert encode_unit(4629, 210, 2598921).hex() == "0000000000001215000000d2000000000027a809"
    assert FILLER_UNIT == encode_unit(0, 0x7FFFFFFF, 0) and np.dtype(CQ_UNIT_DTYPE).itemsize == 20
    u = np.frombuffer(encode_unit(1, 2, 3) + FILLER_UNIT + bytes(20) + encode_unit(5, 6, 7), CQ_UNIT_DTYPE)
    assert valid_units(u) == 2


def test_put_guards(tmp_path):
    q = make_q(tmp_path)
    assert q.put(0, 100, 1, 0) and q.put(100, 50, 1, 1)
    assert not q.put(100, 50, 1, 1)                 # end <= max physic offset: a replay
    assert not q.put(200, 50, 1, 1)                 # position behind: built repeatedly
    assert q.put(300, 50, 1, 4)                     # a hole: units 2 and 3 become fillers
    assert [q.unit(i) for i in range(5)] == [(0, 100, 1), (100, 50, 1), (0, FILLER_SIZE, 0),
                                            (0, FILLER_SIZE, 0), (300, 50, 1)]
    assert q.max_offset_in_queue == 5 and q.max_physic_offset == 350 and len(q.mfq.files) == 2
    q.close()


def test_first_file_past_zero_gets_fillers(tmp_path):
    q = make_q(tmp_path)
    assert q.put(5000, 10, 0, 6)
    assert q.mfq.files[0].name == f"{80:020d}" and q.min_offset_in_queue == 6
    assert bytes(q.mfq.files[0]._mm[:40]) == FILLER_UNIT * 2
    with pytest.raises(OffsetOutOfRangeError):
        q.unit(5)
    q.close()


def test_recover_stops_at_first_invalid_unit(tmp_path):
    q = make_q(tmp_path)
    for i in range(10):
        q.put(100 * i, 100, 0, i)
    q.close()
    mf2 = tmp_path / "T" / "0" / f"{160:020d}"
    raw = bytearray(mf2.read_bytes()); raw[20:40] = bytes(20); raw[40:60] = encode_unit(999, 1, 0)
    mf2.write_bytes(raw)
    q = make_q(tmp_path).load()
    assert q.recover() == 900 and q.max_offset_in_queue == 9
    assert bytes(q.mfq.files[-1]._mm[20:60]) == bytes(40)          # the cut tail is zeroed
    q.close()


def test_truncate_dirty_logic_files(tmp_path):
    q = make_q(tmp_path)
    for i in range(10):
        q.put(100 * i, 100, 0, i)
    q.truncate_dirty_logic_files(450)               # units of records at 500.. go
    assert q.max_offset_in_queue == 5 and q.max_physic_offset == 500 and len(q.mfq.files) == 2
    q.truncate_dirty_logic_files(400)
    assert q.max_offset_in_queue == 4 and len(q.mfq.files) == 1 and q.max_physic_offset == 400
    q.close()


def test_truncate_all_zero_last_file_is_deleted_not_given_a_phantom_unit(tmp_path):
    q = make_q(tmp_path)
    for i in range(4):
        q.put(100 * i, 100, 0, i)
    q.mfq.last_file(0, create=True)                 # an empty next file, as a crash leaves it
    q.truncate_dirty_logic_files(10_000)
    assert len(q.mfq.files) == 1 and q.max_offset_in_queue == 4   # RocketMQ would say 5 (#9728)
    q.close()


def test_correct_min_offset_and_expiry(tmp_path):
    q = make_q(tmp_path)
    for i in range(10):
        q.put(100 * i, 100, 0, i)
    q.correct_min_offset(450)
    assert q.min_offset_in_queue == 5
    assert q.delete_expired(800) == 2 and q.min_offset_in_queue == 8
    q.close()


def test_store_tables_and_dispatch_rules(tmp_path):
    from types import SimpleNamespace as NS
    s = ConsumeQueueStore(tmp_path, units_per_file=4)
    base = dict(store_timestamp=1, tags_code=0, msg_size=10)
    for i, flag in enumerate([0, 4, 8, 12, 0]):
        s.dispatch(NS(topic="A", queue_id=1, commit_log_offset=10 * i, sys_flag=flag,
                      queue_offset=sum(1 for f in [0, 4, 8, 12, 0][:i] if f in (0, 8)), **base))
    assert s.topic_queue_table() == {"A-1": 3}
    with pytest.raises(InvalidTopicError):
        s.find_or_create("../evil", 0)
    s.flush(); s.close()
    s2 = ConsumeQueueStore(tmp_path, units_per_file=4).load()
    assert s2.recover() == 50 and s2.recover_topic_queue_table(0) == {"A-1": 3}
    assert s2.recover_topic_queue_table(25) == {"A-1": 3} and s2.get_queue("A", 1).min_offset_in_queue == 2
    s2.close()


class FakeLog:
    def __init__(self, msgs):
        self.msgs = msgs
    def get(self, off):
        if off not in self.msgs:
            raise OffsetOutOfRangeError(f"{off}")
        return self.msgs[off]


def test_get_messages_statuses_and_collision_safe_filter(tmp_path):
    from types import SimpleNamespace as NS
    from mqstore.message import tags_code
    s = ConsumeQueueStore(tmp_path, units_per_file=4)
    q = s.find_or_create("T", 0)
    msgs = {}
    for i in range(10):
        tag = ["Aa", "BB", "C"][i % 3]
        q.put(100 * i, 100, tags_code(tag), i)
        msgs[100 * i] = NS(tags=tag, offset=100 * i)
    log = FakeLog(msgs)
    r = get_messages(log, s, "T", 0, 0, 100, tags="Aa")
    assert r.status is GetMessageStatus.FOUND and [m.offset for m in r.messages] == [0, 300, 600, 900]
    assert r.filtered_by_tag == 3 and r.filtered_by_code == 3 and r.next_begin_offset == 10
    r = get_messages(log, s, "T", 0, 2, 2, tags="BB || C")
    assert [m.tags for m in r.messages] == ["C", "BB"] and r.next_begin_offset == 5
    assert get_messages(log, s, "T", 0, 10, 5).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert get_messages(log, s, "T", 0, 11, 5).status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert get_messages(log, s, "X", 0, 0, 5).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert get_messages(log, s, "T", 0, 0, 5, tags="Z").status is GetMessageStatus.NO_MATCHED_MESSAGE
    with pytest.raises(QueryError):
        get_messages(log, s, "T", 0, -1, 5)
    with pytest.raises(QueryError):
        get_messages(log, s, "T", 0, 0, 0)
    q.correct_min_offset(500)
    r = get_messages(log, s, "T", 0, 1, 5)
    assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == 5
    del msgs[500]
    assert get_messages(log, s, "T", 0, 5, 1).messages[0].offset == 600     # a removed record is skipped
    assert parse_subscription("*") is None and parse_subscription(" A || B ") == {"A", "B"}
    s.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 300)), min_size=1, max_size=80),
       st.integers(0, 12), st.integers(0, 5))
def test_put_bulk_equals_put(tmp_path_factory, steps, start, replay):
    "Units (with a queue starting mid-way, holes and a replayed prefix): same bytes either way."
    d = tmp_path_factory.mktemp("cq")
    offs, sizes, codes, cqo = [], [], [], []
    phy, n = 0, start
    for gap, size in steps:
        n += 1 if gap else 2                      # some holes
        offs.append(phy); sizes.append(size); codes.append(gap * 7 - 10); cqo.append(n)
        phy += size
    a, b = make_q(d / "a", 5), make_q(d / "b", 5)
    k = min(replay, len(offs))
    for q in (a, b):                              # both have seen the first k before
        for i in range(k):
            q.put(offs[i], sizes[i], codes[i], cqo[i])
    for i in range(len(offs)):
        a.put(offs[i], sizes[i], codes[i], cqo[i])
    put_bulk(b, offs, sizes, codes, cqo)
    assert [f.name for f in a.mfq.files] == [f.name for f in b.mfq.files]
    assert all(bytes(x._mm) == bytes(y._mm) for x, y in zip(a.mfq.files, b.mfq.files))
    assert a.max_physic_offset == b.max_physic_offset and a.max_offset_in_queue == b.max_offset_in_queue
    a.close(); b.close()


def test_truncate_past_every_unit_keeps_unflushed_units_unflushed(tmp_path):
    "Found by the power-loss trials: a cut that removes nothing must not mark unflushed units as flushed."
    from mqstore.consume_queue import ConsumeQueue
    from mqstore.mapped_file import FLUSH_LISTENERS
    q = ConsumeQueue(tmp_path / "q", "T", 0, units_per_file=8)
    for i in range(8):                              # a full file, never flushed
        q.put(i * 100, 100, 0, i)
    mf = q.mfq.files[0]
    assert mf.flushed_position == 0
    q.truncate_dirty_logic_files(10_000)            # the commit log ends after every unit
    assert mf.wrote_position == 160 and mf.flushed_position == 0
    seen = []
    FLUSH_LISTENERS.append(lambda path, start, length: seen.append((start, length)))
    try:
        while q.flush(0):
            pass
    finally:
        FLUSH_LISTENERS.pop()
    assert seen and seen[-1][0] + seen[-1][1] >= 160 and mf.flushed_position == 160


def test_truncate_dirty_cuts_at_the_last_real_unit_not_at_a_filler_after_it(tmp_path):
    "A damaged size on the last real unit, then a filler (its offset field 0): only that unit and the filler go."
    cqs = ConsumeQueueStore(tmp_path, units_per_file=4)
    q = cqs.find_or_create("T", 0)
    assert q.put(0, 100, 1, 0) and q.put(100, 100, 1, 1) and q.put(200, 500, 1, 2)   # unit 2's size runs past 300
    assert q.put(1000, 100, 1, 4)                   # a hole: unit 3 becomes a filler
    cqs.truncate_dirty(300)                         # unit 4 goes (at 1000); unit 2's record ends at 700
    assert q.max_offset_in_queue == 2 and q.max_physic_offset == 200
    assert [q.unit(i) for i in range(2)] == [(0, 100, 1), (100, 100, 1)]
    cqs.close()
