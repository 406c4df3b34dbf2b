import itertools, os, subprocess, sys, textwrap, time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from mqstore.config import StoreConfig, FLUSH_SYNC
from mqstore.errors import NotAStoreError, SegmentNameError, StoreLockedError, StoreClosedError
from mqstore.message import Message
from mqstore.recovery import (RecoveryStarted, SegmentChosen, Redispatched, Truncated, WalkStopped,
                              IndexFilesDropped, SegmentChecked)
from mqstore.store import MessageStore

CFG = StoreConfig.small(commit_log_file_size=8192)


def clock(start=1_700_000_000_000, step=50):
    c = itertools.count()
    return lambda: start + step * next(c)


def of(events, kind):
    return [e for e in events if isinstance(e, kind)]


def fill(store, n, tag="m", topics=("A", "B"), queues=2):
    out = []
    for i in range(n):
        t, q = topics[i % len(topics)], (i // len(topics)) % queues
        r = store.put(Message(t, f"{tag}{i}".encode() * 20, queue_id=q, properties={"KEYS": f"{tag}{i}"}))
        out.append((t, q, f"{tag}{i}", r))
    return out


def tree(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*"))


def test_new_store_put_get_query_close(tmp_path):
    with MessageStore.open(tmp_path / "s", CFG, clock=clock()) as store:
        sent = fill(store, 30)
        assert store.wait_dispatched()
        for t, q, key, r in sent:
            got = store.get(t, q, r.queue_offset, 1).messages
            assert got[0].commit_log_offset == r.commit_log_offset
            assert [m.commit_log_offset for m in store.query(t, key)] == [r.commit_log_offset]
        assert (tmp_path / "s" / "abort").exists()
    assert not (tmp_path / "s" / "abort").exists()
    with pytest.raises(StoreClosedError):
        store.put(Message("A", b"x"))


def test_clean_close_then_open_does_no_redispatch(tmp_path):
    ck = clock()
    with MessageStore.open(tmp_path, CFG, clock=ck) as store:
        sent = fill(store, 60)
    events = []
    with MessageStore.open(tmp_path, CFG, clock=ck, observer=events.append) as store:
        assert of(events, RecoveryStarted)[0].mode == "normal"
        assert not of(events, Redispatched) and not of(events, Truncated)[1:]
        assert of(events, SegmentChosen)[0].index == max(0, len(store.commit_log.mfq.files) - 3)
        assert store.dispatch_behind_bytes() == 0
        more = fill(store, 5, tag="n")
        store.wait_dispatched()
        t, q, key, r = more[-1]
        assert r.queue_offset == store.cq_store.get_queue(t, q).max_offset_in_queue - 1
        first_of_queue = next(r for tt, qq, _, r in sent if (tt, qq) == (t, q))
        assert store.get(t, q, 0, 100).messages[0].commit_log_offset == first_of_queue.commit_log_offset


def test_checkpoint_after_clean_close(tmp_path):
    with MessageStore.open(tmp_path, CFG, clock=clock()) as store:
        sent = fill(store, 10)
    from mqstore.checkpoint import StoreCheckpoint
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    last_ts = sent[-1][3].store_timestamp
    assert cp.physic_msg_timestamp == last_ts and cp.logics_msg_timestamp == last_ts
    cp.close()


def crash(store):
    store.halt()
    assert (store.root / "abort").exists()


def expected_start(store_root, min_ts, config):
    "Newest segment whose first record is stored at or before min_ts (as the checkpoint names it)."
    from mqstore.message import decode_record
    segs = sorted((Path(store_root) / "commitlog").iterdir())
    for i in range(len(segs) - 1, -1, -1):
        m = decode_record(segs[i].read_bytes(), 0, read_body=False)
        if m.store_timestamp <= min_ts:
            return i
    return 0


def test_crash_redispatches_from_the_checkpoint_segment(tmp_path):
    ck = clock()
    with MessageStore.open(tmp_path, CFG, clock=ck) as store:
        first = fill(store, 200)
    store = MessageStore.open(tmp_path, CFG, clock=ck)
    second = fill(store, 120, tag="x")
    store.wait_dispatched()
    crash(store)
    from mqstore.checkpoint import StoreCheckpoint
    cp = StoreCheckpoint(tmp_path / "checkpoint"); min_ts = cp.min_timestamp(); cp.close()
    want = expected_start(tmp_path, min_ts, CFG)
    events = []
    with MessageStore.open(tmp_path, CFG, clock=ck, observer=events.append) as store:
        started = of(events, RecoveryStarted)[0]
        assert started.mode == "abnormal" and started.min_timestamp == min_ts
        chosen = of(events, SegmentChosen)
        assert chosen[0].index == want
        assert want > 0, "the test wants a checkpoint that skips some segments"
        red = of(events, Redispatched)[0]
        if len(chosen) == 1:
            assert red.from_offset == want * CFG.commit_log_file_size
        assert red.to_offset == store.commit_log.max_offset
        store.wait_dispatched()
        for t, q, key, r in first + second:
            assert [m.commit_log_offset for m in store.query(t, key)] == [r.commit_log_offset], key
            assert store.get(t, q, r.queue_offset, 1).messages[0].commit_log_offset == r.commit_log_offset


def tear(root, r, size):
    "Zero the second half of the record of PutResult `r` (chapter 8's fault tool)."
    from mqstore.crash import tear_record
    tear_record(root, CFG.with_(commit_log_file_size=size), r.commit_log_offset, r.size, keep=0.5)


def test_torn_last_record_is_truncated_everywhere(tmp_path):
    ck = clock()
    store = MessageStore.open(tmp_path, CFG, clock=ck)
    sent = fill(store, 50)
    store.wait_dispatched()
    crash(store)
    t, q, key, last = sent[-1]
    tear(tmp_path, last, CFG.commit_log_file_size)
    events = []
    with MessageStore.open(tmp_path, CFG, clock=ck, observer=events.append) as store:
        stop = of(events, WalkStopped)[0]
        assert stop.offset == last.commit_log_offset and stop.status in ("TORN", "CORRUPT")
        assert [e.what for e in of(events, Truncated)] == ["commitlog", "consumequeue"]
        assert store.commit_log.max_offset == last.commit_log_offset
        assert store.query(t, key) == []
        assert store.get(t, q, last.queue_offset, 1).messages == []
        nxt = store.put(Message(t, b"after", queue_id=q))
        assert nxt.queue_offset == last.queue_offset and nxt.commit_log_offset == last.commit_log_offset
        store.wait_dispatched()
        assert store.get(t, q, last.queue_offset, 1).messages[0].body == b"after"


def test_index_entries_survive_a_crash_8007(tmp_path):
    "RocketMQ drops the current index file after a crash and rebuilds only from the replay start."
    ck = clock()
    cfg = CFG.with_(index_entries=4096)
    with MessageStore.open(tmp_path, cfg, clock=ck) as store:
        early = fill(store, 150)
    store = MessageStore.open(tmp_path, cfg, clock=ck)
    fill(store, 150, tag="late")
    store.wait_dispatched()
    crash(store)
    events = []
    with MessageStore.open(tmp_path, cfg, clock=ck, observer=events.append) as store:
        dropped = of(events, IndexFilesDropped)
        assert dropped and dropped[0].replay_from == 0
        assert of(events, SegmentChosen)[-1].index == 0
        for t, q, key, r in early:
            assert [m.commit_log_offset for m in store.query(t, key)] == [r.commit_log_offset]


def test_not_a_store_is_refused_untouched(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "photos").mkdir()
    before = tree(tmp_path)
    with pytest.raises(NotAStoreError, match="notes.txt"):
        MessageStore.open(tmp_path, CFG)
    assert tree(tmp_path) == before
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(NotAStoreError):
        MessageStore.open(f, CFG)


def test_foreign_file_in_commitlog_is_refused_untouched(tmp_path):
    with MessageStore.open(tmp_path, CFG, clock=clock()) as store:
        fill(store, 40)
    (tmp_path / "commitlog" / "README").write_text("stray")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SegmentNameError, match="README"):
        MessageStore.open(tmp_path, CFG)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before


def test_lock_held_by_another_process(tmp_path):
    with MessageStore.open(tmp_path, CFG, clock=clock()) as store:
        fill(store, 10)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from mqstore.checkpoint import StoreLock
        StoreLock({str(tmp_path)!r}).acquire()
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "lock"}
        with pytest.raises(StoreLockedError):
            MessageStore.open(tmp_path, CFG)
        after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "lock"}
        assert after == before
    finally:
        holder.kill(); holder.wait()
    MessageStore.open(tmp_path, CFG).close()


def test_sync_flush_store(tmp_path):
    cfg = CFG.with_(flush_disk_type=FLUSH_SYNC)
    with MessageStore.open(tmp_path, cfg, clock=clock()) as store:
        for t, q, key, r in fill(store, 20):
            assert r.status == "PUT_OK" and store.commit_log.flushed_offset >= r.next_offset


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(5, 120), st.integers(0, 80), st.booleans(), st.booleans())
def test_random_crashes_keep_everything_valid(tmp_path_factory, n1, n2, clean_first, torn):
    root = tmp_path_factory.mktemp("s")
    ck = clock()
    store = MessageStore.open(root, CFG, clock=ck)
    sent = fill(store, n1)
    if clean_first:
        store.close()
        store = MessageStore.open(root, CFG, clock=ck)
    sent += fill(store, n2, tag="z")
    store.wait_dispatched()
    crash(store)
    if torn and sent:
        tear(root, sent[-1][3], CFG.commit_log_file_size)
        sent = sent[:-1]
    with MessageStore.open(root, CFG, clock=ck) as store:
        store.wait_dispatched()
        for t, q, key, r in sent:
            assert [m.commit_log_offset for m in store.query(t, key)] == [r.commit_log_offset]
        per_queue = {}
        for t, q, key, r in sent:
            per_queue.setdefault((t, q), []).append(r)
        for (t, q), rs in per_queue.items():
            got = store.get(t, q, 0, 1000).messages
            assert [m.commit_log_offset for m in got] == [r.commit_log_offset for r in rs]


def digest(root):
    from mqstore.cli import tree_hashes
    return tree_hashes(root)


def test_read_only_open_changes_nothing(tmp_path):
    ck = clock()
    store = MessageStore.open(tmp_path, CFG, clock=ck)
    sent = fill(store, 80)
    store.wait_dispatched()
    crash(store)
    t, q, key, last = sent[-1]
    tear(tmp_path, last, CFG.commit_log_file_size)
    before = digest(tmp_path)
    events = []
    with MessageStore.open(tmp_path, CFG, observer=events.append, read_only=True) as ro:
        assert of(events, RecoveryStarted)[0].mode == "read-only"
        assert ro.commit_log.max_offset == last.commit_log_offset
        for t2, q2, key2, r in sent[:-1]:
            assert [m.commit_log_offset for m in ro.query(t2, key2)] == [r.commit_log_offset]
        assert ro.get(t, q, last.queue_offset, 1).messages == []
        from mqstore.errors import ReadOnlyStoreError
        with pytest.raises(ReadOnlyStoreError):
            ro.put(Message("A", b"x"))
    assert digest(tmp_path) == before


def test_read_only_needs_an_existing_store(tmp_path):
    with pytest.raises(NotAStoreError):
        MessageStore.open(tmp_path / "missing", CFG, read_only=True)
    assert not (tmp_path / "missing").exists()
