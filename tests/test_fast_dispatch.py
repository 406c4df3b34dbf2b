"""Chapter 10.2's fast versions against the reference they replace, entry by entry of REPLACES:
`mqstore.dispatch.dispatch_range` (its fast version dispatches in batches) on random commit logs and
on damaged ones (torn tails, flipped bits, zeroed pages, blanks, foreign records, truncated
segments): the same offset reached, the same consume-queue and index files (names and bytes), the
same per-record state left behind, the same exceptions and warnings; and the fallbacks (an
observer, an unknown dispatcher, a subclass, unknown delay levels) give what the reference gives."""
import ipaddress
import itertools
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from mqstore import accel
from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.consume_queue import ConsumeQueueStore
from mqstore.dispatch import dispatch_range
from mqstore.errors import ConfigError, DispatchWarning
from mqstore.fast import dispatch as fast_dispatch, index as fast_index
from mqstore.index import IndexService
from mqstore.message import (Message, StoredMessage, encode_blank, encode_record, SCHEDULE_TOPIC,
                             TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)

SEGMENT = 2048
CFG = StoreConfig.small(commit_log_file_size=SEGMENT)
T0 = 1_700_000_000_000
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))

v4 = st.integers(0, 2**32 - 1).map(lambda a: (str(ipaddress.IPv4Address(a)), 1234))
v6 = st.integers(0, 2**128 - 1).map(lambda a: (str(ipaddress.IPv6Address(a)), 4321))
text = st.text(st.sampled_from(list("abc 12") + ["é", "中"]), min_size=1, max_size=8)
messages = st.builds(
    lambda topic, body, host, props, q, flag: Message(topic, body, born_host=host, properties=props, queue_id=q,
                                                      sys_flag=flag),
    st.sampled_from(["T", "orders", "t" * 40, "主题", "a/b"]), st.binary(max_size=300), st.one_of(v4, v6),
    st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "x"]), text, max_size=3),
    st.integers(0, 3),
    st.sampled_from([0, 0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE]))


def build_log(root, msgs):
    "A commit log of `msgs` (2 KiB segments): its segment files and (offset, size) of every record."
    c = itertools.count()
    log = CommitLog(root, CFG, clock=lambda: T0 + 700 * next(c)).load()
    puts = [log.put(m) for m in msgs]
    log.shutdown()
    where = Path(root) / "commitlog"
    return sorted(where.iterdir()) if where.exists() else [], [(r.commit_log_offset, r.size) for r in puts]


def damage(files, records, data):
    "Hurt the segments on disk the ways a crash, a bad disk or a careless copy does."
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["torn", "flip", "zeros", "blank", "foreign", "truncated"]))
        if records and data.draw(st.integers(0, 3)) > 0:     # mostly aimed at a record: its start or inside
            offset, size = data.draw(st.sampled_from(records))
            path = files[offset // SEGMENT]
            at = offset % SEGMENT + (data.draw(st.integers(0, size - 1)) if kind in ("flip", "torn") else 0)
        else:
            path = data.draw(st.sampled_from(files))
            at = data.draw(st.integers(0, SEGMENT - 1))
        raw = bytearray(path.read_bytes())
        if kind == "torn":
            raw[at:] = bytes(len(raw) - at)
        elif kind == "flip":
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "zeros":
            raw[at:at + 512] = bytes(len(raw[at:at + 512]))
        elif kind == "blank" and len(raw) - at >= 8:
            raw[at:at + 8] = encode_blank(len(raw) - at)
        elif kind == "foreign":
            here = (files.index(path) * SEGMENT + at) if data.draw(st.booleans()) else \
                data.draw(st.integers(0, 4 * SEGMENT))          # a record that claims this place, or another
            rec = encode_record(StoredMessage(topic="X", body=b"foreign", store_timestamp=T0,
                                              commit_log_offset=here))
            raw[at:at + len(rec)] = rec[:len(raw) - at]
        elif kind == "truncated" and len(raw) - at >= 4:       # a record that runs past its segment's end
            raw[at:at + 4] = (len(raw) - at + data.draw(st.integers(1, 500))).to_bytes(4, "big")
        path.write_bytes(bytes(raw))


class Sinks:
    "A ConsumeQueueStore and an IndexService under one folder, the index clocked as chapter 7's store does."

    def __init__(self, folder: Path, units=8, slots=8, entries=12):
        self.folder = folder
        self.cq = ConsumeQueueStore(folder, units_per_file=units)
        self.index = IndexService(folder / "index", slots, entries, clock=lambda: self.index.indexing_timestamp or T0)

    def dispatchers(self, form="methods"):
        return {"methods": [self.cq.dispatch, self.index.build_index], "objects": [self.cq, self.index],
                "queues": [self.cq.dispatch], "index": [self.index.build_index]}[form]

    def state(self):
        "What a dispatch leaves besides the files."
        return (self.cq.topic_queue_table(), self.cq.max_physic_offset, self.cq.logics_msg_timestamp,
                self.index.indexing_timestamp, self.index.end_phy_offset, len(self.index.files))

    def files(self):
        self.cq.flush(); self.index.flush()
        return {str(p.relative_to(self.folder)): p.read_bytes() for p in sorted(self.folder.rglob("*")) if p.is_file()}

    def close(self):
        self.cq.close(); self.index.close()


def run(fast: bool, log, sinks, start=0, end=None, form="methods", observer=None):
    "dispatch_range with the fast paths on or off: (offset reached or exception class, warnings, state)."
    with accel.fast_paths(fast), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = dispatch_range(log, start, sinks.dispatchers(form), end, observer)
        except Exception as e:                       # the same class both ways, checked by the caller
            got = type(e)
    said = sorted(str(w.message) for w in caught if issubclass(w.category, DispatchWarning))
    return got, said, sinks.state()


def both_ways(log_root: Path, work: Path, passes=((0, None),), form="methods", **sink_kw):
    "The reference and the fast version over the same passes into two folders: results and files each."
    out = []
    for fast in (False, True):
        log = CommitLog(log_root, CFG).load()
        sinks = Sinks(work / ("fast" if fast else "ref"), **sink_kw)
        try:
            results = [run(fast, log, sinks, a, b, form) for a, b in passes]
            out.append((results, sinks.files()))
        finally:
            sinks.close()
            log.mfq.close()
    return out


def assert_same(ref, fast):
    assert fast[0] == ref[0]
    assert fast[1].keys() == ref[1].keys()
    for name in ref[1]:
        assert fast[1][name] == ref[1][name], name


@pytest.fixture(autouse=True, scope="module")
def every_pass_batches():
    "The logs here are small: batch every pass, so that the comparisons below reach the bulk path."
    saved, fast_dispatch.MIN_BATCH_BYTES = fast_dispatch.MIN_BATCH_BYTES, 0
    yield
    fast_dispatch.MIN_BATCH_BYTES = saved


def test_a_small_pass_goes_record_by_record_and_a_large_one_in_batches(tmp_path, monkeypatch):
    "The default MIN_BATCH_BYTES: below it the reference, at or above it the batch path."
    monkeypatch.setattr(fast_dispatch, "MIN_BATCH_BYTES", 8192)
    calls = []
    real = fast_dispatch.dispatch_range_bulk
    monkeypatch.setattr(fast_dispatch, "dispatch_range_bulk", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    log = CommitLog(tmp_path / "log", StoreConfig.small()).load()
    for i in range(200):
        log.put(Message("T", b"x" * 100, properties={"KEYS": f"k{i}"}))
    cqs = ConsumeQueueStore(tmp_path / "log", 64).load()
    idx = IndexService(tmp_path / "log" / "index", 64, 256)
    with accel.fast_paths(True):
        end = dispatch_range(log, 0, [cqs.dispatch, idx.build_index], 1000)
        assert calls == [] and end > 0                     # under 8 KiB: record by record
        dispatch_range(log, end, [cqs.dispatch, idx.build_index])
        assert calls == [end]                              # the rest (about 20 KB): one batch pass
    log.shutdown()


def test_the_switch_finds_the_fast_version():
    "The REPLACES entry is what `@accelerated` calls, and the reference stays reachable."
    assert accel.replacements()["mqstore.dispatch.dispatch_range"] is fast_dispatch.dispatch_range_fast
    assert fast_dispatch.REPLACES == {"mqstore.dispatch.dispatch_range": fast_dispatch.dispatch_range_fast,
                                      "mqstore.dispatch.ReputService._run": fast_dispatch.reput_run}
    assert fast_index.REPLACES == {}
    assert dispatch_range.reference.__module__ == "mqstore.dispatch"


@SETTINGS
@given(msgs=st.lists(messages, min_size=1, max_size=40), data=st.data())
def test_mqstore_dispatch_dispatch_range_fast_equals_reference(msgs, data):
    "mqstore.dispatch.dispatch_range: random logs, damaged or not, in one pass or several, methods or objects."
    root = Path(tempfile.mkdtemp(prefix="mqstore-fastdisp-"))
    try:
        files, records = build_log(root / "log", msgs)
        if data.draw(st.booleans()):
            damage(files, records, data)
        end = len(files) * SEGMENT
        cuts = sorted(data.draw(st.lists(st.integers(0, end), max_size=3)))
        passes = list(zip([0, *cuts], [*cuts, None]))
        if data.draw(st.booleans()):
            passes.append((0, None))                          # a replay from the start
        ref, fast = both_ways(root / "log", root / "out", passes, data.draw(st.sampled_from(["methods", "objects"])))
        assert_same(ref, fast)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _many_files_both_ways(tmp_path):
    "600 records of five topics (prepared, committed, rolled back among them) dispatched both ways in three passes."
    msgs = [Message(f"T{i % 5}", bytes(i % 70), queue_id=i % 3, sys_flag=[0, 0, 0, 4, 8, 12][i % 6],
                    properties={"TAGS": "Aa" if i % 2 else "BB", "KEYS": f"k{i} o{i // 4}", "UNIQ_KEY": f"U{i}"})
            for i in range(600)]
    build_log(tmp_path / "log", msgs)
    return both_ways(tmp_path / "log", tmp_path / "out", [(0, 20_000), (20_000, None), (0, None)])


def test_a_larger_log_with_many_files_agrees(tmp_path):
    "Hundreds of records, index files that fill up mid-record, queues over many files."
    ref, fast = _many_files_both_ways(tmp_path)
    assert_same(ref, fast)
    assert len(ref[1]) > 50 and ref[0][-1][0] > 100_000     # the replay from 0 reaches the end


def test_an_observer_or_an_unknown_dispatcher_takes_the_reference(tmp_path, monkeypatch):
    "The same events and calls as the reference, and the batch builders are never called."
    build_log(tmp_path / "log", [Message("T", bytes(i), queue_id=i % 2, properties={"KEYS": f"k{i}"})
                                 for i in range(50)])
    monkeypatch.setattr(fast_dispatch, "dispatch_range_bulk", lambda *a, **k: pytest.fail("batched"))
    log = CommitLog(tmp_path / "log", CFG).load()
    try:
        seen = {}
        for fast in (False, True):
            sinks, events, calls = Sinks(tmp_path / str(fast)), [], []
            with accel.fast_paths(fast):
                a = dispatch_range(log, 0, sinks.dispatchers(), observer=events.append)
                b = dispatch_range(log, 0, [sinks.cq.dispatch, calls.append])
            seen[fast] = (a, b, events, [r.commit_log_offset for r in calls], sinks.files())
            sinks.close()
        assert seen[True] == seen[False] and len(seen[True][2]) >= 50 and len(seen[True][3]) == 50
    finally:
        log.mfq.close()


def test_only_exact_classes_have_a_batch_form(tmp_path):
    class MyQueues(ConsumeQueueStore):
        pass

    class MyIndex(IndexService):
        def build_index(self, req):
            return 0

    s = Sinks(tmp_path)
    mine, idx = MyQueues(tmp_path / "m"), MyIndex(tmp_path / "i")
    form = fast_dispatch._bulk_form
    assert form(s.cq.dispatch) and form(s.cq) and form(s.index.build_index) and form(s.index)
    assert form(mine.dispatch) is None and form(idx) is None and form(idx.build_index) is None
    assert form(print) is None and form(s.cq.unit_tags_code) is None and form(s.index.query) is None
    s.cq.elsewhere.add("T")
    assert form(s.cq.dispatch) is None
    s.close()


def test_unknown_delay_levels_raise_the_same_error_after_the_same_units(tmp_path):
    "A delayed record whose delivery time depends on unknown levels: ConfigError both ways, same files."
    msgs = [Message("T", b"a", queue_id=0), Message("T", b"b", queue_id=1),
            Message(SCHEDULE_TOPIC, b"c", queue_id=2, properties={"DELAY": "3", "KEYS": "late"}),
            Message("T", b"d", queue_id=0)]
    build_log(tmp_path / "log", msgs)
    out = []
    for fast in (False, True):
        log = CommitLog(tmp_path / "log", CFG).load()
        sinks = Sinks(tmp_path / str(fast))
        sinks.cq.delay_levels = None
        got = run(fast, log, sinks)
        out.append((got[0], got[1], sinks.files()))
        sinks.close(); log.mfq.close()
    assert out[0][0] is ConfigError and out[1] == out[0]


def test_records_no_queue_can_hold_warn_the_same(tmp_path):
    "A topic that cannot name a folder: the same DispatchWarnings, the same files (index entries kept)."
    msgs = [Message("a/b" if i % 3 == 0 else "ok", bytes(i), queue_id=i % 2, properties={"KEYS": f"k{i}"})
            for i in range(30)]
    build_log(tmp_path / "log", msgs)
    ref, fast = both_ways(tmp_path / "log", tmp_path / "out")
    assert_same(ref, fast)
    assert len(ref[0][0][1]) == 10


def test_a_replay_while_mending_rewrites_the_same_torn_units(tmp_path):
    "ConsumeQueueStore.mending (chapter 5): a torn unit is mended alike by both ways."
    build_log(tmp_path / "log", [Message("T", bytes(i), queue_id=0, properties={"TAGS": f"t{i}"}) for i in range(20)])
    out = []
    for fast in (False, True):
        log = CommitLog(tmp_path / "log", CFG).load()
        sinks = Sinks(tmp_path / str(fast))
        run(False, log, sinks, form="queues")
        mf = sinks.cq.get_queue("T", 0).mfq.files[0]
        mf.write_at(3 * 20 + 12, bytes(8))                    # unit 3's tags code torn to zeros
        sinks.cq.mending = True
        got = run(fast, log, sinks, form="queues")
        out.append((got, sinks.files()))
        sinks.close(); log.mfq.close()
    assert out[0] == out[1] and out[0][1]["consumequeue/T/0/" + "0" * 20][72:80] != bytes(8)


@pytest.mark.parametrize("form", ["queues", "index"])
def test_one_dispatcher_alone_agrees(tmp_path, form):
    msgs = [Message(f"T{i % 2}", bytes(i % 40), queue_id=i % 3, properties={"KEYS": f"k{i} k{i + 1}", "TAGS": "x"})
            for i in range(120)]
    build_log(tmp_path / "log", msgs)
    ref, fast = both_ways(tmp_path / "log", tmp_path / "out", form=form)
    assert_same(ref, fast)


# ---------------------------------------------------------------- the reput thread: mqstore.dispatch.ReputService._run

import threading
import time

from mqstore.dispatch import ReputService
from mqstore.store import MessageStore


def tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def streamed_store(root, msgs, on: bool):
    "`msgs` put by a producer thread while the reput thread follows (its loop fast or reference); the store's files."
    with accel.fast_paths(on):
        store = MessageStore.open(root / "store", StoreConfig.small(commit_log_file_size=1 << 20),
                                  clock=lambda: T0)
        try:
            producer = threading.Thread(target=lambda: [store.put(m) for m in msgs])
            producer.start()
            producer.join()
            assert store.wait_dispatched(60)
        finally:
            store.close()
    return tree(root / "store")


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(messages.filter(lambda m: m.topic.isascii() and "/" not in m.topic), min_size=1, max_size=300))
def test_mqstore_dispatch_ReputService_run_fast_equals_reference(msgs):
    "mqstore.dispatch.ReputService._run: the gathering loop leaves the same queues and index as chapter 5's loop."
    assert accel.replacements()["mqstore.dispatch.ReputService._run"] is fast_dispatch.reput_run
    root = Path(tempfile.mkdtemp(prefix="mqstore-reput-"))
    try:
        assert streamed_store(root / "fast", msgs, True) == streamed_store(root / "reference", msgs, False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_reput_run_gathers_passes_while_puts_stream_and_answers_an_idle_put_at_once(tmp_path, monkeypatch):
    "Fewer, bigger passes than puts while a producer streams; a put into an idle store is dispatched within GATHER_S."
    passes = []
    real = ReputService.dispatch_until
    def counted(self, offset=None):
        before = self.reput_from_offset
        end = real(self, offset)
        if end != before:
            passes.append(end - before)
        return end
    monkeypatch.setattr(ReputService, "dispatch_until", counted)
    with accel.fast_paths(True):
        store = MessageStore.open(tmp_path / "s", StoreConfig.small(commit_log_file_size=8 << 20))
        try:
            for i in range(3000):
                store.put(Message("T", b"x" * 200, properties={"KEYS": f"k{i}"}))
            assert store.wait_dispatched(60)
            assert len(passes) < 3000 // 20, len(passes)          # passes of many records, not one per put
            time.sleep(0.05)                                   # idle now
            t = time.monotonic()
            store.put(Message("T", b"late"))
            while store.dispatch_behind_bytes() and time.monotonic() - t < 5:
                time.sleep(0.0005)
            assert time.monotonic() - t < 0.5 and store.dispatch_behind_bytes() == 0
        finally:
            store.close()


def test_reput_run_keeps_the_error_and_stops_when_told(tmp_path):
    "A dispatcher that raises: the thread keeps the exception and ends; stop() returns promptly while it gathers."
    log = CommitLog(tmp_path / "log", StoreConfig.small()).load()
    def boom(req):
        raise RuntimeError("boom")
    with accel.fast_paths(True):
        r = ReputService(log, [boom]).start()
        log.put(Message("T", b"x"))
        r.notify()
        deadline = time.monotonic() + 5
        while r.error is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert isinstance(r.error, RuntimeError)
        r.stop()
        ok = ReputService(log, [lambda req: None]).start()
        log.put(Message("T", b"y"))
        ok.notify()
        t = time.monotonic()
        ok.stop()
        assert time.monotonic() - t < 1 and ok.error is None
    log.shutdown()


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_small_chunks_of_rows_dispatch_what_the_reference_dispatches(tmp_path, monkeypatch, rows):
    "The pass hands a segment over a chunk of rows at a time (issue 30): chunk edges change no byte."
    from mqstore.fast import records as fast_records
    calls = []
    monkeypatch.setattr(fast_records, "_chunk_rows", lambda n, pos: rows)
    real = fast_dispatch.scan_decode_segment
    monkeypatch.setattr(fast_dispatch, "scan_decode_segment", lambda *a, **k: calls.append(1) or real(*a, **k))
    ref, fast = _many_files_both_ways(tmp_path)
    assert_same(ref, fast)
    assert len(calls) > 600 // rows                         # many chunks, each its own batch


def test_a_failing_dispatcher_fails_alike_while_the_next_chunk_is_scanned(tmp_path, monkeypatch):
    "The pass with a second thread scanning ahead (AHEAD_BYTES 0, chunks of 5 rows): a dispatcher's error comes out as is."
    from mqstore.fast.dispatch import dispatch_range_bulk
    monkeypatch.setattr(fast_dispatch, "AHEAD_BYTES", 0)
    monkeypatch.setattr(fast_dispatch, "DISPATCH_ROWS", 5)
    build_log(tmp_path / "log", [Message("T", bytes(i), queue_id=0) for i in range(40)])
    log = CommitLog(tmp_path / "log", CFG).load()
    seen = []

    def bulk(batch):
        seen.append(len(batch.headers))
        if len(seen) == 3:
            raise RuntimeError("disk full")
    try:
        with accel.fast_paths(True), pytest.raises(RuntimeError, match="disk full"):   # the kernels, chunk by chunk
            dispatch_range_bulk(log, 0, [], [bulk])
        assert seen == [5, 5, 5]
        with accel.fast_paths(True):
            assert dispatch_range_bulk(log, 0, [], [lambda b: seen.append(len(b.headers))])[1] == 40
    finally:
        log.mfq.close()
