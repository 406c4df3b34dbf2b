"""Dispatch in batches (chapter 10.2's `dispatch_range_bulk`, the fast `dispatch_range`) against the
per-record reference: on random commit logs and on damaged ones (torn tails, flipped bits, zeroed
pages, blanks, foreign records), the batch pass and the per-record pass stop at the same offset,
dispatch the same records and write byte-identical consume queues and index files (names
included); abnormal recovery and the reput thread of a store, run with the fast paths on and off
(`accel.fast_paths`), leave the same files.
`make test` runs this file again with MQSTORE_ACCEL=0."""
import filecmp
import itertools
import shutil
import tempfile
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mqstore.checkpoint import create_abort_file
from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.consume_queue import ConsumeQueueStore
from mqstore import accel
from mqstore.dispatch import dispatch_range
from mqstore.fast.dispatch import build_consume_queues_bulk, dispatch_range_bulk, _bulk_form
from mqstore.fast.index import build_index_bulk
from mqstore.index import IndexService
from mqstore.message import Message
from mqstore.recovery import Redispatched
from mqstore.store import MessageStore
from test_fast_recovery import CFG, T0, build_log, damage, messages

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(autouse=True, scope="module")
def every_pass_batches():
    "The logs here are small: batch every pass (chapter 10.2's MIN_BATCH_BYTES), to reach the bulk path."
    import mqstore.fast.dispatch as fast_dispatch
    saved, fast_dispatch.MIN_BATCH_BYTES = fast_dispatch.MIN_BATCH_BYTES, 0
    yield
    fast_dispatch.MIN_BATCH_BYTES = saved


class Derived:
    "Consume queues and an index fed per record (as the store does) or in batches."

    def __init__(self, folder: Path):
        self.cq = ConsumeQueueStore(folder, units_per_file=8)
        self.index = IndexService(folder / "index", 8, 12, clock=lambda: self.index.indexing_timestamp or T0)
        self.dispatched = 0

    def one(self, req):
        self.dispatched += 1
        self.cq.dispatch(req)
        self.index.build_index(req)              # a new index file is named by the record that opens it

    def batch(self):
        return [partial(build_consume_queues_bulk, self.cq), partial(build_index_bulk, self.index)]

    def close(self):
        self.cq.close()
        self.index.close()


def derived_files(root: Path) -> dict:
    "Every consume-queue and index file under `root`, by relative path: its bytes."
    out = {}
    for sub in ("consumequeue", "index"):
        if (root / sub).exists():
            for p in sorted((root / sub).rglob("*")):
                if p.is_file():
                    out[str(p.relative_to(root))] = p.read_bytes()
    return out


def both_passes(log_root: Path, work: Path):
    log = CommitLog(log_root, CFG).load()
    try:
        a, b = Derived(work / "a"), Derived(work / "b")
        end_a = dispatch_range.reference(log, 0, [a.one])
        end_b, count = dispatch_range_bulk(log, 0, [b.one], b.batch())
        a.close(), b.close()
        return (end_a, a.dispatched, derived_files(work / "a")), (end_b, count, derived_files(work / "b"))
    finally:
        log.mfq.close()


@SETTINGS
@given(msgs=st.lists(messages, min_size=1, max_size=40), data=st.data())
def test_the_batch_pass_writes_what_the_per_record_pass_writes(msgs, data):
    root = Path(tempfile.mkdtemp(prefix="mqstore-batches-"))
    try:
        files, records = build_log(root / "log", msgs)
        if data.draw(st.booleans()):
            damage(files, records, data)
        ref, fast = both_passes(root / "log", root / "out")
        assert fast[0] == ref[0] and fast[1] == ref[1]
        assert fast[2].keys() == ref[2].keys()
        for name in ref[2]:
            assert fast[2][name] == ref[2][name], name
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_pass_that_starts_mid_log_and_stops_early_agrees(tmp_path):
    msgs = [Message(f"T{i % 3}", bytes(i % 50), queue_id=i % 2, properties={"KEYS": f"k{i} x{i % 7}"})
            for i in range(120)]
    build_log(tmp_path / "log", msgs)
    log = CommitLog(tmp_path / "log", CFG).load()
    try:
        a, b = Derived(tmp_path / "a"), Derived(tmp_path / "b")
        mid, stop = log.max_offset // 3, 2 * log.max_offset // 3
        for start, end in ((0, mid), (mid, stop), (stop, None)):
            got_a = dispatch_range.reference(log, start, [a.one], end)
            got_b = dispatch_range_bulk(log, start, [b.one], b.batch(), end)[0]
            assert got_a == got_b
        a.close(), b.close()
        assert derived_files(tmp_path / "a") == derived_files(tmp_path / "b")
        assert len(derived_files(tmp_path / "a")) > 5
    finally:
        log.mfq.close()


# ---------------------------------------------------------------------------------------------
# The store: abnormal recovery and the reput thread, in batches and per record

STORE_CFG = StoreConfig.small(commit_log_file_size=4096, index_slots=16, index_entries=40,
                              flush_cq_thorough_interval_ms=600_000)


def fixed_clock():
    c = itertools.count()
    return lambda: T0 + 1000 * next(c)


@contextmanager
def open_store(root: Path, batch: bool, observer=None):
    "A store with the fast paths on (batches) or off (the reference) for its whole life."
    with accel.fast_paths(batch), MessageStore.open(root, STORE_CFG, clock=fixed_clock(), observer=observer) as s:
        yield s


def store_msgs(n: int, seed: int = 0):
    return [Message(["Orders", "Audit", "Pay"][(i + seed) % 3], bytes(range(i % 90)), queue_id=i % 2,
                    properties={"TAGS": "TagA" if i % 2 else "TagB", "KEYS": f"k-{i} o-{i // 3}"})
            for i in range(n)]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(1, 150), data=st.data())
def test_abnormal_recovery_in_batches_leaves_the_files_of_the_reference(n, data):
    root = Path(tempfile.mkdtemp(prefix="mqstore-batches-store-"))
    try:
        with open_store(root / "s", True) as s:
            for m in store_msgs(n):
                s.put(m)
            s.wait_dispatched()
        segs = sorted((root / "s" / "commitlog").iterdir())
        damaged = data.draw(st.booleans())
        if damaged:
            raw = bytearray(segs[-1].read_bytes())
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] ^= 0x10                                   # a flipped bit somewhere in the last segment
            segs[-1].write_bytes(bytes(raw))
        out = {}
        for batch in (True, False):
            copy = root / f"copy-{batch}"
            shutil.copytree(root / "s", copy)
            create_abort_file(copy)
            (copy / "checkpoint").write_bytes(bytes(len((copy / "checkpoint").read_bytes())))
            seen = []
            with open_store(copy, batch, seen.append) as s:
                out[batch] = (s.recovered_offset, [e.count for e in seen if isinstance(e, Redispatched)],
                              s.commit_log.max_offset)
            out[batch] += (derived_files(copy),)
        assert out[True][:3] == out[False][:3]
        assert damaged or (out[True][1] == [n] and out[True][2] > 0)     # undamaged: every record replayed
        assert out[True][3] == out[False][3]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_reput_thread_in_batches_writes_what_it_writes_per_record(tmp_path):
    files = {}
    for batch in (True, False):
        with open_store(tmp_path / str(batch), batch) as s:
            msgs = store_msgs(400, seed=1)
            for k in range(0, 400, 37):                        # puts and batches, dispatch running
                if k % 2:
                    s.put_batch(msgs[k:k + 37])
                else:
                    for m in msgs[k:k + 37]:
                        s.put(m)
            assert s.wait_dispatched(30)
            assert s.query("Orders", "o-12") and s.get("Audit", 1, 0, 5).messages
        files[batch] = derived_files(tmp_path / str(batch))
    assert files[True].keys() == files[False].keys() and len(files[True]) > 10
    for name in files[True]:
        assert files[True][name] == files[False][name], name


def test_a_store_with_a_dispatching_plugin_keeps_the_per_record_path(tmp_path):
    class Counter:
        def __init__(self):
            self.n = 0

        def dispatch(self, req):
            self.n += 1

    plugin = Counter()
    with MessageStore.open(tmp_path, STORE_CFG, clock=fixed_clock(), plugins=[plugin]) as s:
        assert [_bulk_form(d) is None for d in s.reput.dispatchers][-1]     # the plugin: no batch form
        for m in store_msgs(30):
            s.put(m)
        assert s.wait_dispatched()
    assert plugin.n == 30


@pytest.mark.parametrize("window, damage", [(1 << 24, None), (97, None), (1500, None),
                                            (700, 0.6), (2000, 0.1), (5000, 0.9)])
def test_abnormal_recovery_with_halves_scanned_at_once_leaves_the_reference_files(tmp_path, window, damage):
    """Without an observer, the fast walk scans a segment in two halves at once (SPLIT_BYTES lowered here),
    `window` bytes at a time; with `damage`, one byte of the last segment flipped at that fraction of its records."""
    from mqstore.fast import recovery
    with open_store(tmp_path / "s", True) as s:
        for m in store_msgs(300, seed=2):
            s.put(m)
        s.wait_dispatched()
    if damage is not None:
        last = sorted((tmp_path / "s" / "commitlog").iterdir())[-1]
        data = bytearray(last.read_bytes())
        end = len(data.rstrip(b"\0"))
        data[int(end * damage)] ^= 0x40
        last.write_bytes(bytes(data))
    out = {}
    saved = recovery.SPLIT_BYTES, recovery.WINDOW_BYTES
    recovery.SPLIT_BYTES, recovery.WINDOW_BYTES = 1, window
    try:
        for batch in (True, False):
            copy = tmp_path / f"copy-{batch}"
            shutil.copytree(tmp_path / "s", copy)
            create_abort_file(copy)
            (copy / "checkpoint").write_bytes(bytes(len((copy / "checkpoint").read_bytes())))
            with open_store(copy, batch) as s:
                out[batch] = (s.recovered_offset, s.commit_log.max_offset)
            out[batch] += (derived_files(copy),)
    finally:
        recovery.SPLIT_BYTES, recovery.WINDOW_BYTES = saved
    assert out[True] == out[False] and out[True][0] > 0 and len(out[True][2]) > 10
