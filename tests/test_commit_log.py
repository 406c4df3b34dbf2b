import itertools, os, random, threading, time
import pytest
from hypothesis import given, settings, strategies as st

from mqstore.checkpoint import StoreCheckpoint
from mqstore.commit_log import CommitLog, needs_roll, walk_log, queue_key
from mqstore.config import StoreConfig, FLUSH_SYNC
from mqstore.errors import (NotARecordStartError, OffsetOutOfRangeError, MessageTooLargeError,
                            InvalidTopicError, InvalidPropertyError, PropertiesTooLongError,
                            ReadOnlyStoreError, StoreClosedError)
from mqstore.message import (Message, RecordStatus, BLANK_MAGIC_CODE, TRANSACTION_PREPARED_TYPE,
                             TRANSACTION_ROLLBACK_TYPE, TRANSACTION_COMMIT_TYPE, decode_record)


def clock(start=1_700_000_000_000):
    c = itertools.count()
    return lambda: start + next(c)


def new_log(path, **cfg):
    return CommitLog(path, StoreConfig.small(**cfg), clock=clock()).load()


def files_bytes(log):
    return {mf.name: bytes(mf._mm[:]) for mf in log.mfq.files}


def test_put_get_round_trip(tmp_path):
    log = new_log(tmp_path)
    r = log.put(Message("T", b"body", queue_id=3, flag=9, properties={"TAGS": "a", "KEYS": "k1 k2"}))
    assert r.status == "PUT_OK" and r.commit_log_offset == 0 and r.queue_offset == 0
    m = log.get(0)
    assert (m.topic, m.body, m.queue_id, m.flag, m.tags, m.keys) == ("T", b"body", 3, 9, "a", ["k1", "k2"])
    assert m.store_timestamp == r.store_timestamp == 1_700_000_000_000
    assert m.commit_log_offset == 0 and m.total_size == r.size
    assert r.msg_id.endswith("0" * 16)


def test_queue_offsets_per_topic_queue(tmp_path):
    log = new_log(tmp_path)
    got = [log.put(Message(t, b"x", queue_id=q)).queue_offset for t, q in
           [("A", 0), ("A", 0), ("A", 1), ("B", 0), ("A", 0)]]
    assert got == [0, 1, 0, 0, 2]
    assert log.topic_queue_table == {"A-0": 3, "A-1": 1, "B-0": 1}


def test_prepared_and_rollback_do_not_take_queue_offsets(tmp_path):
    log = new_log(tmp_path)
    log.put(Message("A", b"1"))
    p = log.put(Message("A", b"p", sys_flag=TRANSACTION_PREPARED_TYPE))
    rb = log.put(Message("A", b"", sys_flag=TRANSACTION_ROLLBACK_TYPE))
    c = log.put(Message("A", b"c", sys_flag=TRANSACTION_COMMIT_TYPE))
    assert (p.queue_offset, rb.queue_offset, c.queue_offset) == (0, 0, 1)
    assert log.get(p.commit_log_offset).queue_offset == 0 and log.topic_queue_table["A-0"] == 2


def test_queue_offset_hook_for_prepared(tmp_path):
    slots = itertools.count(100)
    log = CommitLog(tmp_path, StoreConfig.small(), clock=clock(),
                    queue_offset_hook=lambda msg, tx: next(slots)).load()
    r = log.put(Message("A", b"p", sys_flag=TRANSACTION_PREPARED_TYPE))
    assert r.queue_offset == 100 and log.get(r.commit_log_offset).queue_offset == 100


def test_roll_writes_a_blank(tmp_path):
    log = new_log(tmp_path, commit_log_file_size=4096)
    rs = [log.put(Message("T", bytes(1000))) for _ in range(5)]   # 1,092-byte records
    assert [r.rolled for r in rs] == [False, False, False, True, False]
    first = log.mfq.files[0]
    blank_at = rs[2].next_offset
    assert bytes(first._mm[blank_at:blank_at + 8]) == (4096 - blank_at).to_bytes(4, "big") + \
        BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)
    assert rs[3].commit_log_offset == 4096 and first.is_full()


def test_exact_fit_rule():
    assert not needs_roll(92, 100) and needs_roll(93, 100)


def test_get_refuses_non_record_offsets(tmp_path):
    log = new_log(tmp_path)
    a = log.put(Message("T", b"abcdefgh" * 10))
    log.put(Message("T", b"z"))
    for bad in (1, a.size - 1, a.size + 5):
        with pytest.raises(NotARecordStartError):
            log.get(bad)
    for bad in (-1, log.max_offset, log.max_offset + 1000):
        with pytest.raises(OffsetOutOfRangeError):
            log.get(bad)


def test_get_at_a_blank_is_refused(tmp_path):
    log = new_log(tmp_path, commit_log_file_size=4096)
    rs = [log.put(Message("T", bytes(1000))) for _ in range(5)]
    with pytest.raises(NotARecordStartError, match="BLANK"):
        log.get(rs[2].next_offset)


@pytest.mark.parametrize("msg, err", [
    (Message("", b"x"), InvalidTopicError),
    (Message("T" * 40000, b"x"), InvalidTopicError),
    (Message("T", bytes(16 * 1024 + 1)), MessageTooLargeError),
    (Message("T", b"x", properties={"KEYS": 5}), InvalidPropertyError),
    (Message("T", b"x", properties={"K": "v" * 40000}), PropertiesTooLongError),
])
def test_refused_put_writes_nothing(tmp_path, msg, err):
    log = new_log(tmp_path)
    log.put(Message("T", b"first"))
    before, table = files_bytes(log), dict(log.topic_queue_table)
    with pytest.raises(err):
        log.put(msg)
    assert files_bytes(log) == before and log.topic_queue_table == table


def test_record_larger_than_a_segment(tmp_path):
    log = new_log(tmp_path, commit_log_file_size=2048, max_message_size=1 << 20)
    with pytest.raises(MessageTooLargeError, match="segment"):
        log.put(Message("T", bytes(3000)))
    assert log.mfq.files == []


def test_sync_flush_returns_after_the_flush(tmp_path):
    log = new_log(tmp_path, flush_disk_type=FLUSH_SYNC)
    r = log.put(Message("T", b"a"))                 # no service: flushed inline
    assert log.flushed_offset >= r.next_offset
    log.start()
    for i in range(50):
        r = log.put(Message("T", b"b" * i))
        assert r.status == "PUT_OK" and log.flushed_offset >= r.next_offset
    log.shutdown()


def test_group_commit_under_many_producers(tmp_path):
    log = new_log(tmp_path, flush_disk_type=FLUSH_SYNC, commit_log_file_size=1 << 20).start()
    results, errors = [], []

    def producer(p):
        for i in range(60):
            r = log.put(Message(f"T{p % 2}", f"{p}-{i}".encode(), queue_id=p % 4))
            if log.flushed_offset < r.next_offset:
                errors.append(r)
            results.append(r)
    ths = [threading.Thread(target=producer, args=(p,)) for p in range(8)]
    for t in ths: t.start()
    for t in ths: t.join()
    svc = log.flush_service
    rounds, answered = svc.rounds, svc.answered
    log.shutdown()
    assert not errors and len(results) == 480 and {r.status for r in results} == {"PUT_OK"}
    # every request answered by a sync round, and rounds that answered several at once (group commit);
    # `flushes` alone would not show it: a round whose flush was done by an earlier one moves nothing
    assert answered == 480 and rounds < 480


def test_async_flush_catches_up_and_publishes_after_flushing(tmp_path):
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    log = CommitLog(tmp_path, StoreConfig.small(), clock=clock(), checkpoint=cp).load()
    r = log.put(Message("T", b"x" * 100))
    assert cp.physic_msg_timestamp == 0            # nothing flushed yet: nothing vouched for
    log.start()
    deadline = time.monotonic() + 10
    while log.flushed_offset < r.next_offset and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.flushed_offset >= r.next_offset
    log.shutdown()
    assert cp.physic_msg_timestamp == r.store_timestamp
    cp.close()


def test_concurrent_producers_give_a_gap_free_log(tmp_path):
    log = new_log(tmp_path, commit_log_file_size=8192)
    def producer(p):
        for i in range(150):
            log.put(Message(f"P{p % 3}", os.urandom(random.Random(p * 1000 + i).randint(0, 300)),
                            queue_id=p % 2))
    ths = [threading.Thread(target=producer, args=(p,)) for p in range(6)]
    for t in ths: t.start()
    for t in ths: t.join()
    per_queue, expected_offset = {}, log.min_offset
    walker = walk_log(log.mfq, check_crc=True, read_body=True)
    count = 0
    for off, m in walker:
        if off % 8192 == 0 or off != expected_offset:
            assert off % 8192 == 0       # only a segment roll may jump
        assert m.commit_log_offset == off
        per_queue.setdefault((m.topic, m.queue_id), []).append(m.queue_offset)
        expected_offset = off + m.total_size
        count += 1
    assert count == 900
    for key, offs in per_queue.items():
        assert offs == list(range(len(offs))), key


def test_walk_reports_where_and_why_it_stops(tmp_path):
    log = new_log(tmp_path)
    rs = [log.put(Message("T", b"x" * 10)) for _ in range(3)]
    w = walk_log(log.mfq)
    assert len(list(itertools.islice(w, 10))) == 3
    g = walk_log(log.mfq, end=log.mfq.files[0].file_size)
    try:
        while True:
            next(g)
    except StopIteration as stop:
        assert stop.value == (rs[-1].next_offset, RecordStatus.END)


def test_read_only_refuses_puts(tmp_path):
    new_log(tmp_path).put(Message("T", b"x"))
    ro = CommitLog(tmp_path, StoreConfig.small(), read_only=True).load()
    with pytest.raises(ReadOnlyStoreError):
        ro.put(Message("T", b"y"))
    assert ro.get(0).body == b"x"


def test_shutdown_then_reload(tmp_path):
    log = new_log(tmp_path, commit_log_file_size=4096).start()
    rs = [log.put(Message("T", bytes([i]) * 500)) for i in range(20)]
    log.shutdown()
    with pytest.raises(StoreClosedError):
        log.put(Message("T", b"late"))
    again = CommitLog(tmp_path, StoreConfig.small(commit_log_file_size=4096)).load()
    for i, r in enumerate(rs):
        assert again.get(r.commit_log_offset).body == bytes([i]) * 500


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "B", "主题"]), st.integers(0, 2), st.binary(max_size=1500)),
                min_size=1, max_size=60))
def test_any_put_sequence_reads_back_in_order(tmp_path_factory, puts):
    log = new_log(tmp_path_factory.mktemp("cl"), commit_log_file_size=4096)
    results = [log.put(Message(t, body, queue_id=q)) for t, q, body in puts]
    walked = list(walk_log(log.mfq, check_crc=True, read_body=True))
    assert [o for o, _ in walked] == [r.commit_log_offset for r in results]
    assert [(m.topic, m.queue_id, m.body) for _, m in walked] == [(t, q, b) for t, q, b in puts]
    counts = {}
    for (t, q, _), (_, m) in zip(puts, walked):
        assert m.queue_offset == counts.get((t, q), 0)
        counts[(t, q)] = m.queue_offset + 1
    log.shutdown()


# ---------------------------------------------------------------- put_batch and the allocate service (chapter 11)

def _random_messages(seed, n):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(Message(rng.choice(["A", "BB", "Topic-C"]), bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3000))),
                           queue_id=rng.randrange(3), flag=rng.randrange(5),
                           properties={"TAGS": rng.choice(["x", "y"]), "KEYS": f"k{i}"},
                           sys_flag=rng.choice([0, 0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE,
                                                TRANSACTION_ROLLBACK_TYPE]),
                           born_host=rng.choice([("127.0.0.1", 1), ("::1", 2)])))
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.integers(1, 40), min_size=1, max_size=6))
def test_put_batch_writes_the_bytes_of_single_puts(tmp_path_factory, seed, batch_sizes):
    msgs = _random_messages(seed, sum(batch_sizes))
    a = CommitLog(tmp_path_factory.mktemp("one"), StoreConfig.small(), clock=lambda: 1_700_000_000_123).load()
    b = CommitLog(tmp_path_factory.mktemp("batch"), StoreConfig.small(), clock=lambda: 1_700_000_000_123).load()
    singles = [a.put(m) for m in msgs]
    batched, i = [], 0
    for k in batch_sizes:
        r = b.put_batch(msgs[i:i + k])
        assert len(r) == k
        batched.extend(r)
        i += k
    assert batched == singles
    assert files_bytes(a) == files_bytes(b)
    assert a.topic_queue_table == b.topic_queue_table and a.max_offset == b.max_offset
    a.shutdown(); b.shutdown()


def test_put_batch_refuses_before_writing(tmp_path):
    log = new_log(tmp_path)
    with pytest.raises(InvalidTopicError):
        log.put_batch([Message("T", b"ok"), Message("", b"bad")])
    assert log.max_offset == 0 and log.topic_queue_table == {}
    with pytest.raises(MessageTooLargeError):
        log.put_batch([Message("T", bytes(70_000))])
    assert len(log.put_batch([])) == 0
    log.shutdown()
    with pytest.raises(StoreClosedError):
        log.put_batch([Message("T", b"x")])


def test_put_batch_sync_flush_waits_once(tmp_path):
    log = CommitLog(tmp_path, StoreConfig.small(flush_disk_type=FLUSH_SYNC), clock=clock()).load().start()
    r = log.put_batch([Message("T", b"x" * 100, queue_id=i % 2) for i in range(500)])
    assert r.status == "PUT_OK" and log.flushed_offset >= r.next_offset
    assert list(r.queue_offsets) == [i // 2 for i in range(500)]
    assert [m.queue_offset for _, m in log.messages()] == [i // 2 for i in range(500)]
    log.shutdown()


def test_allocate_service_prepares_the_next_segment(tmp_path):
    log = CommitLog(tmp_path, StoreConfig.small(warm_mapped_file=True), clock=clock()).load()
    for i in range(200):
        log.put(Message("T", b"y" * 1000))
    assert len(log.mfq.files) >= 3
    assert log.allocator.misses == 1 and log.allocator.hits == len(log.mfq.files) - 1
    assert log.allocator.wait_idle()            # the thread may still be preparing
    on_disk = sorted(p.name for p in (tmp_path / "commitlog").iterdir())
    assert len(on_disk) == len(log.mfq.files) + 1          # the next one, prepared ahead
    log.shutdown()
    assert sorted(p.name for p in (tmp_path / "commitlog").iterdir()) == [mf.name for mf in log.mfq.files]
    again = CommitLog(tmp_path, StoreConfig.small(), clock=clock()).load()
    assert [m.body for _, m in again.messages()] == [b"y" * 1000] * 200
    again.shutdown()


# Chapter 10.1's fast paths for the put: each agrees with the simple one it replaces.

def test_fast_put_result_equals_the_dataclass():
    from mqstore.commit_log import PutResult
    from mqstore.fast.put import _result
    args = ("PUT_OK", 4096, 120, 7, 1_700_000_000_000, ("127.0.0.1", 10911), True)
    fast, slow = _result(*args), PutResult(*args)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.next_offset == slow.next_offset == 4216 and fast.msg_id == slow.msg_id


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.booleans(), st.integers(0, 2**40), st.integers(0, 2**50)),
                min_size=1, max_size=12), st.integers(0, 2**62))
def test_stamp_records_equals_stamp_record(recs, store_timestamp):
    "The numpy stamp of many records writes exactly what stamp_record writes record by record."
    from mqstore.fast.put import stamp_records
    from mqstore.message import encode_message, stamp_record
    encoded = [encode_message(Message("T", bytes(n), born_host=("::1", 9) if v6 else ("10.0.0.1", 9)))
               for n, v6, _, _ in recs]
    starts = list(itertools.accumulate([len(e) for e in encoded[:-1]], initial=0))
    one, many = bytearray().join(encoded), bytearray().join(encoded)
    for s, (_, _, q, p) in zip(starts, recs):
        stamp_record(one, s, q, p, store_timestamp)
    stamp_records(many, starts, [r[2] for r in recs], [r[3] for r in recs], store_timestamp)
    assert many == one


def test_spin_lock_excludes_and_blocks_after_spinning():
    from mqstore.commit_log import PutMessageSpinLock, SPINS
    lock, state = PutMessageSpinLock(), {"n": 0, "inside": 0, "overlap": False}

    def worker():
        for _ in range(2000):
            with lock:
                state["inside"] += 1
                state["overlap"] |= state["inside"] > 1
                n = state["n"]
                if n % 97 == 0:
                    time.sleep(0)                 # give the others a chance to barge in
                state["n"] = n + 1
                state["inside"] -= 1
    ths = [threading.Thread(target=worker) for _ in range(8)]
    for t in ths: t.start()
    for t in ths: t.join()
    assert state["n"] == 16000 and not state["overlap"]
    # a holder that keeps the lock far longer than SPINS tries: the waiter ends up blocking, then gets it
    got = []
    with lock:
        t = threading.Thread(target=lambda: (lock.__enter__(), got.append(time.monotonic()), lock.__exit__()))
        t.start()
        time.sleep(0.2)
        released = time.monotonic()
    t.join(5)
    assert got and got[0] >= released and not lock.locked() and SPINS > 0


def test_flush_service_stop_wakes_the_thread_at_once(tmp_path):
    cfg = StoreConfig.small(flush_disk_type=FLUSH_SYNC)
    log = CommitLog(tmp_path, cfg).load().start()
    log.put(Message("T", b"x"))
    t0 = time.monotonic()
    log.shutdown()
    assert time.monotonic() - t0 < 1.0 and log.flushed_offset == log.max_offset


def test_group_commit_with_a_spinning_put_lock_loses_no_request(tmp_path):
    cfg = StoreConfig.small(flush_disk_type=FLUSH_SYNC, commit_log_file_size=1 << 20)
    log = CommitLog(tmp_path, cfg).load().start()
    results = []

    def producer(k):
        for i in range(60):
            results.append(log.put(Message(f"T{k % 4}", f"{k}:{i}".encode(), queue_id=k % 2)))
    ths = [threading.Thread(target=producer, args=(k,)) for k in range(32)]
    for t in ths: t.start()
    for t in ths: t.join()
    assert len(results) == 32 * 60 and all(r.status == "PUT_OK" for r in results)
    assert log.flushed_offset >= max(r.next_offset for r in results)
    assert log.flush_service.flushes < 32 * 60          # groups, not one flush per put
    log.shutdown()


def test_read_only_load_writes_nothing(tmp_path):
    "Issue 25 item 3: CommitLog(read_only=True).load() keeps a zero-byte last segment, maps read-only."
    import hashlib
    cfg = StoreConfig.small(commit_log_file_size=4096)
    log = new_log(tmp_path, commit_log_file_size=4096)
    rs = [log.put(Message("T", bytes([i + 1]) * 700)) for i in range(12)]
    log.shutdown()
    folder = tmp_path / "commitlog"
    last = max(int(p.name) for p in folder.iterdir())
    (folder / f"{last + 4096:020d}").write_bytes(b"")        # a crash right after creating the next one

    def state():
        return {str(p.relative_to(tmp_path)): (p.stat().st_size, p.stat().st_mtime_ns,
                                               hashlib.sha256(p.read_bytes()).hexdigest())
                for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    before = state()
    ro = CommitLog(tmp_path, cfg, read_only=True).load()
    assert ro.mfq.files and all(not mf.writable for mf in ro.mfq.files)
    with pytest.raises(TypeError):
        ro.mfq.files[0]._mm[0:1] = b"x"
    assert [ro.get(r.commit_log_offset).body for r in rs] == [bytes([i + 1]) * 700 for i in range(12)]
    ro.shutdown()
    assert state() == before


def test_sync_put_answers_flush_disk_timeout_when_no_flush_comes(tmp_path):
    "A sync put whose group-commit request is not answered in sync_flush_timeout_ms: written, FLUSH_DISK_TIMEOUT."
    from mqstore.config import StoreConfig, FLUSH_SYNC
    from mqstore.commit_log import CommitLog
    from mqstore.message import Message
    log = CommitLog(tmp_path, StoreConfig.small(flush_disk_type=FLUSH_SYNC, sync_flush_timeout_ms=50)).load().start()
    assert log.put(Message("T", b"first")).status == "PUT_OK"
    service = log.flush_service
    service.stop()                                   # the flush thread is gone: no request is answered
    r = log.put(Message("T", b"second"))
    assert r.status == "FLUSH_DISK_TIMEOUT"
    assert log.get(r.commit_log_offset).body == b"second"     # written, not known to be durable
    log.flush_service = None                         # shutdown flushes in the caller's thread
    log.shutdown()
