"""Section 10.3's fast recovery (`mqstore.fast.recovery`) against chapter 7's reference, for every entry
of its REPLACES:

* "mqstore.recovery.walk_segments" -> `walk_segments_fast` (one vectorised `scan_segment` per window,
  a big segment's halves at once) against `walk_segments` (`check_record` record by record);
* "mqstore.recovery.recover_abnormally" -> `recover_abnormally_fast` (the fast walk finds the end,
  `dispatch_range` re-dispatches the range) against the reference's walk-and-dispatch;
* "mqstore.recovery.units_below" -> `units_below_fast` (a queue file's units as one numpy array) against
  the per-unit count of a read-only open.

On random commit logs and on damaged ones (torn tails, flipped bits, zeroed pages, blanks, foreign
records) both give the same verdict, the same observer events and the same messages; normal and
abnormal recovery, run both ways on copies of one log or one store, make the same decisions (the
same truncation offset), hand over the same records and leave the same bytes."""
import ipaddress
import itertools
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings, strategies as st

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, StoredMessage, encode_blank, encode_record
import pytest

from mqstore import accel
from mqstore.checkpoint import create_abort_file
from mqstore.fast import recovery as fast_recovery
from mqstore.fast.recovery import REPLACES, recover_abnormally_fast, walk_segments_fast
from mqstore.recovery import recover_abnormally, recover_normally, walk_segments
from mqstore.store import MessageStore

SEGMENT = 2048
CFG = StoreConfig.small(commit_log_file_size=SEGMENT)
T0 = 1_700_000_000_000

v4 = st.integers(0, 2**32 - 1).map(lambda a: (str(ipaddress.IPv4Address(a)), 1234))
v6 = st.integers(0, 2**128 - 1).map(lambda a: (str(ipaddress.IPv6Address(a)), 4321))
messages = st.builds(
    lambda topic, body, host, props, q: Message(topic, body, born_host=host, properties=props, queue_id=q),
    st.sampled_from(["T", "orders", "t" * 40]), st.binary(max_size=300), st.one_of(v4, v6),
    st.dictionaries(st.sampled_from(["TAGS", "KEYS", "x"]), st.text("abc 12", min_size=1, max_size=8),
                    max_size=3),
    st.integers(0, 3))


def build_log(root, msgs):
    c = itertools.count()
    log = CommitLog(root, CFG, clock=lambda: T0 + 1000 * next(c)).load()
    puts = [log.put(m) for m in msgs]
    log.shutdown()
    where = Path(root) / "commitlog"
    return sorted(where.iterdir()) if where.exists() else [], [(r.commit_log_offset, r.size) for r in puts]


def damage(files, records, data):
    "Hurt the segments on disk the ways a crash, a bad disk or a careless copy does."
    for _ in range(data.draw(st.integers(1, 3))):
        kind = data.draw(st.sampled_from(["torn", "flip", "zeros", "blank", "foreign"]))
        if records and data.draw(st.integers(0, 3)) > 0:     # mostly aimed at a record: its start or inside
            offset, size = data.draw(st.sampled_from(records))
            path = files[offset // SEGMENT]
            inside = data.draw(st.integers(0, size - 1))
            at = offset % SEGMENT + (inside if kind in ("flip", "torn") else 0)
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
        path.write_bytes(bytes(raw))


def walks_agree(root, check_crc):
    log = CommitLog(root, CFG).load()
    try:
        for start in range(len(log.mfq.files)):
            ea, eb, ma, mb = [], [], [], []
            a = walk_segments.reference(log.mfq, start, check_crc, ea.append, ma.append)
            b = walk_segments_fast(log.mfq, start, check_crc, eb.append, mb.append)
            assert a == b and ea == eb and ma == mb
            assert walk_segments_fast(log.mfq, start, check_crc) == a     # no observer, no messages
    finally:
        log.shutdown()


def recover_both_ways(root, how, **kw):
    "Recover two copies of one commit log, the reference way and the fast way: (events, replayed, bytes) each."
    out = []
    for fast in (False, True):
        copy = Path(tempfile.mkdtemp(prefix="mqstore-fast-"))
        try:
            shutil.copytree(root, copy / "s") if root.exists() else (copy / "s").mkdir()
            log = CommitLog(copy / "s", CFG).load()
            events, replayed = [], []
            with accel.fast_paths(fast):
                if how == "normal":
                    got = recover_normally(log, observer=events.append, **kw)
                elif how == "abnormal":
                    got = recover_abnormally(log, dispatchers=[replayed.append], observer=events.append, **kw)
                else:                          # no observer: the fast version finds the end, then re-dispatches
                    f = recover_abnormally_fast if fast else recover_abnormally.reference
                    got = f(log, dispatchers=[replayed.append], **kw)
            log.shutdown()
            files = {p.name: p.read_bytes() for p in sorted((copy / "s").rglob("*")) if p.is_file()}
            out.append((got, events, replayed, files))
        finally:
            shutil.rmtree(copy, ignore_errors=True)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(messages, max_size=30), st.data())
def test_fast_walk_decides_like_the_reference(msgs, data):
    root = Path(tempfile.mkdtemp(prefix="mqstore-fast-"))
    try:
        files, records = build_log(root, msgs)
        if files and data.draw(st.integers(0, 3)) > 0:
            damage(files, records, data)
        walks_agree(root, check_crc=data.draw(st.booleans()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(messages, min_size=1, max_size=30), st.data())
def test_fast_recoveries_leave_the_same_store(msgs, data):
    root = Path(tempfile.mkdtemp(prefix="mqstore-fast-"))
    try:
        files, records = build_log(root, msgs)
        if files:
            damage(files, records, data)
        check_crc = data.draw(st.booleans())
        slow, fast = recover_both_ways(root, "normal", check_crc=check_crc)
        assert slow == fast
        min_ts = T0 + 1000 * data.draw(st.integers(-1, len(msgs) + 1))
        slow, fast = recover_both_ways(root, "abnormal", min_timestamp=min_ts, check_crc=check_crc)
        assert slow == fast
        not_after = data.draw(st.one_of(st.none(), st.integers(0, 4 * SEGMENT)))
        slow, fast = recover_both_ways(root, "quiet", min_timestamp=min_ts, check_crc=check_crc, not_after=not_after)
        assert slow == fast
    finally:
        shutil.rmtree(root, ignore_errors=True)




def test_every_replacement_is_tested_here():
    "The REPLACES keys of mqstore.fast.recovery, each compared above."
    assert set(REPLACES) == {"mqstore.recovery.walk_segments", "mqstore.recovery.recover_abnormally",
                             "mqstore.recovery.units_below", "mqstore.mapped_file_queue.tail_data_end"}
    assert REPLACES["mqstore.recovery.walk_segments"] is walk_segments_fast
    assert REPLACES["mqstore.recovery.recover_abnormally"] is recover_abnormally_fast
    from mqstore.fast.recovery import units_below_fast
    assert REPLACES["mqstore.recovery.units_below"] is units_below_fast


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(messages, max_size=40), st.data())
def test_windows_and_halves_decide_like_the_reference(msgs, data):
    """SPLIT_BYTES lowered so that every segment is walked in two halves at once, and windows smaller
    than a record or a few records wide."""
    root = Path(tempfile.mkdtemp(prefix="mqstore-split-"))
    saved = fast_recovery.SPLIT_BYTES, fast_recovery.WINDOW_BYTES
    try:
        files, records = build_log(root, msgs)
        if files and data.draw(st.integers(0, 3)) > 0:
            damage(files, records, data)
        check_crc = data.draw(st.booleans())
        log = CommitLog(root, CFG).load()
        try:
            for start in range(len(log.mfq.files)):
                ref, ea, ma = walk_segments.reference(log.mfq, start, check_crc), [], []
                walk_segments.reference(log.mfq, start, check_crc, ea.append, ma.append)
                for split, window in ((1, 1 << 24), (1, 97), (1 << 30, 700), (1, 5000)):
                    fast_recovery.SPLIT_BYTES, fast_recovery.WINDOW_BYTES = split, window
                    eb, mb = [], []
                    assert walk_segments_fast(log.mfq, start, check_crc) == ref
                    assert walk_segments_fast(log.mfq, start, check_crc, eb.append, mb.append) == ref
                    assert ea == eb and ma == mb
        finally:
            log.shutdown()
    finally:
        fast_recovery.SPLIT_BYTES, fast_recovery.WINDOW_BYTES = saved
        shutil.rmtree(root, ignore_errors=True)


def test_a_dispatcher_that_fails_fails_both_ways(tmp_path):
    "The same exception class, and nothing truncated, whichever way the replay runs."
    build_log(tmp_path / "s", [Message("T", b"x" * 50) for _ in range(40)])
    raised = []
    for fast in (False, True):
        shutil.copytree(tmp_path / "s", tmp_path / str(fast))
        log = CommitLog(tmp_path / str(fast), CFG).load()
        f = recover_abnormally_fast if fast else recover_abnormally.reference
        with pytest.raises(ZeroDivisionError):
            f(log, 0, [lambda req: 1 / 0])
        raised.append(log.max_offset)
        log.shutdown()
    assert raised[0] == raised[1]


# ---------------------------------------------------------------- whole stores, crashed and damaged

STORE_CFG = StoreConfig.small(commit_log_file_size=4096, index_slots=16, index_entries=40,
                              flush_cq_thorough_interval_ms=600_000)


def store_files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name not in ("lock",)}


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(messages, min_size=1, max_size=80), st.data())
def test_a_crashed_store_recovers_to_the_same_files_both_ways(msgs, data):
    """A store halted (abort file kept), its checkpoint maybe zeroed, its log maybe damaged, opened with the
    reference and with the fast paths: the same process offset, and every file byte for byte."""
    root = Path(tempfile.mkdtemp(prefix="mqstore-fast-store-"))
    try:
        c = itertools.count()
        s = MessageStore.open(root / "s", STORE_CFG, clock=lambda: T0 + 1000 * next(c))
        for m in msgs:
            s.put(m)
        s.wait_dispatched()
        s.halt()
        if data.draw(st.booleans()):
            ck = root / "s" / "checkpoint"
            ck.write_bytes(bytes(len(ck.read_bytes())))
        segs = sorted((root / "s" / "commitlog").iterdir())
        if data.draw(st.booleans()):
            raw = bytearray(segs[-1].read_bytes())
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= 0x10
            segs[-1].write_bytes(bytes(raw))
        out = []
        for fast in (False, True):
            copy = root / f"copy-{fast}"
            shutil.copytree(root / "s", copy)
            with accel.fast_paths(fast):
                c2 = itertools.count()
                store = MessageStore.open(copy, STORE_CFG, clock=lambda: T0 + 10**7 + next(c2))
                got = (store.recovered_offset, store.commit_log.max_offset)
                store.halt()
            out.append((got, store_files(copy)))
        assert out[0][0] == out[1][0]
        assert out[0][1].keys() == out[1][1].keys()
        for name in out[0][1]:
            assert out[0][1][name] == out[1][1][name], name
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- the read-only open's unit count
import struct

from mqstore.consume_queue import FILLER_SIZE
from mqstore.fast.recovery import units_below_fast
from mqstore.recovery import units_below

units = st.one_of(
    st.tuples(st.integers(0, 10**6), st.integers(1, 500), st.integers(-2**63, 2**63 - 1)),          # plausible
    st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)),
    st.tuples(st.integers(2**63 - 1000, 2**63 - 1), st.integers(1, 2000), st.just(0)),              # sum overflows
    st.tuples(st.integers(0, 10**6), st.just(FILLER_SIZE), st.just(0)),                              # fillers
    st.just((0, 0, 0)))


@settings(max_examples=400, deadline=None)
@given(st.lists(units, max_size=60), st.integers(-5, 2 * 10**6), st.integers(0, 19), st.integers(1, 70))
def test_fast_unit_count_is_the_reference_count(rows, phy_end, ragged, chunk):
    "mqstore.recovery.units_below against units_below_fast, on random and damaged units, a chunk size lowered."
    from mqstore.fast import recovery as fr
    raw = b"".join(struct.pack(">qiq", *r) for r in rows) + bytes(ragged)     # a torn last unit too
    saved, fr.UNIT_CHUNK = fr.UNIT_CHUNK, chunk
    try:
        assert units_below_fast(raw, phy_end) == units_below.reference(raw, phy_end)
        assert units_below_fast(memoryview(raw), phy_end) == units_below.reference(memoryview(raw), phy_end)
    finally:
        fr.UNIT_CHUNK = saved


def test_a_read_only_open_clips_the_same_way_both_ways(tmp_path):
    "A store whose queues point past a cut log, opened read-only with the reference and with the fast paths."
    c = itertools.count()
    s = MessageStore.open(tmp_path / "s", STORE_CFG, clock=lambda: T0 + 1000 * next(c))
    for i in range(120):
        s.put(Message(f"T{i % 3}", b"x" * (i % 70), queue_id=i % 2))
    s.close()
    last = sorted((tmp_path / "s" / "commitlog").iterdir())[-1]
    raw = bytearray(last.read_bytes())
    raw[len(raw.rstrip(b"\0")) // 2:] = bytes(len(raw) - len(raw.rstrip(b"\0")) // 2)          # the tail lost
    last.write_bytes(bytes(raw))
    seen = []
    for fast in (False, True):
        with accel.fast_paths(fast):
            with MessageStore.open(tmp_path / "s", STORE_CFG, read_only=True) as ro:
                seen.append((ro.recovered_offset, sorted((k, q.max_offset_in_queue) for k, q in ro.cq_store)))
    assert seen[0] == seen[1] and seen[0][0] > 0


# --- chapter 14's recognition: one compiled pass per window (10.3's count_facts) == scan and searches ------

from mqstore import modern
from mqstore.structures import SYSTEM_TOPICS

V5 = Path(__file__).resolve().parent.parent / "book" / "data" / "rocketmq5"


def recognised_both_ways(root, window):
    "record_structures with the fast paths off (scan_segment's numpy walk, rows_facts) and on (count_facts)."
    ways = []
    for on in (False, True):
        with accel.fast_paths(on):
            ways.append(modern.record_structures(root, window=window))
    return ways


@pytest.mark.parametrize("name", sorted(p.name for p in V5.iterdir() if p.is_dir()))
@pytest.mark.parametrize("window", [300, 4096, 16 << 20])
def test_recognition_counts_what_the_scan_finds_on_the_5x_vectors(name, window):
    ref, fast = recognised_both_ways(V5 / name, window)
    assert ref == fast and fast[1]["records"] > 0


def test_the_compiled_pass_runs_with_the_fast_paths_on(monkeypatch):
    calls = []
    real = modern.rows_facts
    monkeypatch.setattr(modern, "rows_facts", lambda *a: calls.append(1) or real(*a))
    with accel.fast_paths(True):
        modern.record_structures(V5 / "lmq")
    assert not calls
    with accel.fast_paths(False):
        modern.record_structures(V5 / "lmq")
    assert calls


props_keys = st.sampled_from(["TAGS", "KEYS", "INNER_MULTI_DISPATCH", "xINNER_MULTI_DISPATCH", "INNER_MULTI_DISPATC",
                              "__CRC32#", "__CRC32", "UNIQ_KEY"])
props_values = st.one_of(st.text("abc,%LMQ%12", max_size=12), st.from_regex(r"[0-9]{9,11}", fullmatch=True),
                         st.just("INNER_MULTI_DISPATCH"))
records = st.builds(
    lambda topic, body, flags, props, crc: StoredMessage(
        topic=topic, body=body, sys_flag=flags, store_timestamp=T0,
        properties={**props, **({"__CRC32#": crc} if crc else {})}),
    st.sampled_from(["T", "t" * 200, *SYSTEM_TOPICS, "SCHEDULE_TOPIC_XXXXY", "rmq_sys_wheel_time"]),
    st.binary(max_size=200),
    st.integers(0, 0x7FF).map(lambda f: f & ~0x30),                   # the host bits: encode_record's
    st.dictionaries(props_keys, props_values, max_size=4),
    st.one_of(st.none(), st.from_regex(r"[0-9]{10}", fullmatch=True), st.just("12345x7890")))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(records, min_size=1, max_size=60), st.data())
def test_recognition_counts_what_the_scan_finds_on_random_records(tmp_path_factory, recs, data):
    root = tmp_path_factory.mktemp("recognise")
    raw, at = bytearray(), []
    for r in recs:
        r.commit_log_offset = len(raw)
        at.append(len(raw))
        raw += encode_record(r)
    for _ in range(data.draw(st.integers(0, 2))):                     # damage: flipped bytes, a hole
        p = data.draw(st.integers(0, len(raw) - 1))
        if data.draw(st.booleans()):
            raw[p] ^= 1 << data.draw(st.integers(0, 7))
        else:
            raw[p:p + 40] = bytes(len(raw[p:p + 40]))
    (root / "commitlog").mkdir()
    (root / "commitlog" / "00000000000000000000").write_bytes(bytes(raw) + bytes(data.draw(st.integers(0, 300))))
    window = data.draw(st.sampled_from([128, 1000, 1 << 20]))
    ref, fast = recognised_both_ways(root, window)
    assert ref == fast


# --- the empty tail: holes skipped (10.3's tail_data_end_fast) -------------------------------------------------

from mqstore.mapped_file import MappedFile
from mqstore.mapped_file_queue import tail_data_end, zero_tail
from mqstore.fast.recovery import tail_data_end_fast, trailing_hole


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mqstore_mapped_file_queue_tail_data_end_fast_equals_reference(tmp_path_factory, data):
    "Sparse files with data written through the map (flushed or not) and with write(2): the same end, the same zeroing."
    size = 4096 * data.draw(st.integers(1, 64))
    folder = tmp_path_factory.mktemp("tail")
    mf = MappedFile.create(folder / "00000000000000000000", from_offset=0, file_size=size)
    try:
        for _ in range(data.draw(st.integers(0, 4))):
            at = data.draw(st.integers(0, size - 1))
            piece = data.draw(st.binary(min_size=1, max_size=600))[:size - at]
            how = data.draw(st.sampled_from(["map", "map+force", "write"]))
            if how == "write":                       # beside the map, as another process would
                with open(mf.path, "r+b") as f:
                    f.seek(at)
                    f.write(piece)
            else:
                mf._mm[at:at + len(piece)] = piece
                if how == "map+force":
                    mf.force()
        pos = data.draw(st.integers(0, size))
        chunk = data.draw(st.sampled_from([512, 4096, 3 * 4096, 4 << 20]))
        want = tail_data_end.reference(mf, pos, chunk)
        assert tail_data_end_fast(mf, pos, chunk) == want
        assert not any(bytes(mf._mm[trailing_hole(mf.path, pos, size):]))     # a hole reads as zeros
        with accel.fast_paths(True):
            assert tail_data_end(mf, pos, chunk) == want
            zero_tail(mf, pos, chunk)
        assert not any(bytes(mf._mm[pos:])) and tail_data_end.reference(mf, pos, chunk) == pos
    finally:
        mf.destroy()


def test_a_sparse_tail_is_not_read(tmp_path, monkeypatch):
    "Only the chunks before the trailing hole are viewed; the reference views every chunk of the tail."
    size = 64 * 4096
    mf = MappedFile.create(tmp_path / "00000000000000000000", from_offset=0, file_size=size)
    try:
        mf._mm[100:200] = b"x" * 100
        mf.force()
        if trailing_hole(mf.path, 0, size) >= size:
            pytest.skip("this filesystem does not report holes")
        views = []
        real = mf.view
        monkeypatch.setattr(mf, "view", lambda a, b: views.append((a, b)) or real(a, b))
        assert tail_data_end_fast(mf, 150, 4096) == tail_data_end.reference(mf, 150, 4096) == 4096
        fast, ref = views[:1], views[1:]
        assert fast == [(150, 4096)] and len(ref) == 64
    finally:
        mf.destroy()


# ---- verify's search of the properties (issue 30): `rows_holding` / the `spans_holding` kernel

def _plain_holding(buf, rows, needle, field="props"):
    return [i for i, (p, k) in enumerate(zip(rows[field + "_pos"].tolist(), rows[field + "_len"].tolist()))
            if needle in bytes(buf[p:p + k])]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=400), needle=st.binary(min_size=1, max_size=6), cuts=st.lists(st.integers(0, 400), max_size=16))
def test_spans_holding_is_a_plain_search(data, needle, cuts):
    "Random bytes from a small alphabet, random spans (empty, at the end, overlapping the end): `needle in span`."
    import numpy as np
    from mqstore.fast.records import compiled_kernels
    K = compiled_kernels()
    if K is None:                                  # MQSTORE_ACCEL=0: rows_holding says so, the caller searches
        assert fast_recovery.rows_holding(data, np.zeros(0, [("props_pos", "i8"), ("props_len", "i4")]), b"x") is None
        return
    data = bytes(b % 4 for b in data)               # bytes 0..3: needles match often
    needle = bytes(b % 4 for b in needle)
    cuts = sorted(min(c, len(data)) for c in cuts)
    pos, length = np.array(cuts[0::2][:len(cuts) // 2], np.int64), np.diff(cuts)[0::2].astype(np.int64)
    out = np.ones(len(pos), np.bool_)
    K.spans_holding(np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8), pos, length,
                    np.frombuffer(needle, np.uint8), out)
    assert out.tolist() == [needle in data[a:a + k] for a, k in zip(pos.tolist(), length.tolist())]


@pytest.mark.parametrize("name", ["crc", "lmq", "comp", "txn"])
def test_rows_holding_is_chapter_14s_search_on_rocketmq5_logs(vectors5, name):
    "On the segments RocketMQ 5.x wrote: the rows chapter 14's `_rows_holding` finds, for every needle verify asks."
    from mqstore.fast.records import scan_segment
    from mqstore.modern import _rows_holding, WindowBytes
    seg = sorted((vectors5 / name / "commitlog").iterdir())[0].read_bytes()
    rows = scan_segment(seg, 0)[0]
    for needle in (b"__CRC32#", b"INNER_MULTI_DISPATCH\x01", b"KEYS\x01", b"\x02", b"TAGS\x01Tag"):
        want = _rows_holding(seg, rows, needle).tolist()
        assert want == _plain_holding(seg, rows, needle)
        assert _rows_holding(WindowBytes(memoryview(seg)[:]), rows, needle).tolist() == want
        got = fast_recovery.rows_holding(seg, rows, needle)
        assert got is None if not accel.enabled() else got.tolist() == want, (name, needle)


# ---------------------------------------------------------------- issue 30: every mix, crashed with a stale checkpoint
import sys as _sys

_sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from mixes import MIXES                                       # noqa: E402


def _crash_with_stale_checkpoint(root, msgs, cfg):
    "A store of `msgs`, closed, then the abort file back and the empty store's checkpoint, as bench_goals does."
    c = itertools.count()
    MessageStore.open(root, cfg, clock=lambda: T0 + next(c)).close()
    stale = (root / "checkpoint").read_bytes()
    s = MessageStore.open(root, cfg, clock=lambda: T0 + 1000 + next(c))
    for k in range(0, len(msgs), 50):
        s.put_batch(msgs[k:k + 50])
    s.wait_dispatched()
    s.close()
    create_abort_file(root)
    (root / "checkpoint").write_bytes(stale)


def _open_both_ways(root, cfg):
    "(recovered offset, max offset, files) of copies of root opened with the reference and with the fast paths."
    out = []
    for fast in (False, True):
        copy = root.parent / f"{root.name}-{fast}"
        shutil.copytree(root, copy)
        with accel.fast_paths(fast):
            c = itertools.count()
            store = MessageStore.open(copy, cfg, clock=lambda: T0 + 10**7 + next(c))
            got = (store.recovered_offset, store.commit_log.max_offset, store.last_exit_ok)
            store.halt()
        out.append((got, store_files(copy)))
    return out


@pytest.mark.parametrize("damage_kind", ["none", "torn", "flip"])
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_every_mix_recovers_a_stale_checkpoint_to_the_same_files(tmp_path, monkeypatch, mix, damage_kind):
    """Each mix of benchmarks/mixes.py (tiny records, long topics, ...), crashed with the empty store's checkpoint
    so that everything is re-dispatched, its last segment maybe torn or flipped: the reference and the fast
    paths keep the same records and write every file alike, with dispatch chunks of 7 rows too (each
    scanned by a second thread while the last one is dispatched)."""
    from mqstore.fast import dispatch as fast_dispatch
    cfg = StoreConfig.small(commit_log_file_size=256 * 1024 if mix != "large" else 8 << 20,
                            max_message_size=4 << 20, consume_queue_units=40)
    msgs = MIXES[mix](4 if mix == "large" else 600, first=1_000_000)
    _crash_with_stale_checkpoint(tmp_path / "s", msgs, cfg)
    segs = sorted((tmp_path / "s" / "commitlog").iterdir())
    raw = bytearray(segs[-1].read_bytes())
    at = len(raw.rstrip(b"\0")) * 2 // 3
    if damage_kind == "torn":
        raw[at:] = bytes(len(raw) - at)
    elif damage_kind == "flip":
        raw[at] ^= 0x04
    segs[-1].write_bytes(bytes(raw))
    for rows, ahead in ((1 << 16, 4 << 20), (7, 0)):         # chunks of 7 rows, the next one scanned meanwhile
        monkeypatch.setattr(fast_dispatch, "DISPATCH_ROWS", rows)
        monkeypatch.setattr(fast_dispatch, "AHEAD_BYTES", ahead)
        ref, fast = _open_both_ways(tmp_path / "s", cfg)
        assert ref[0] == fast[0] and ref[0][2] is False
        assert ref[1].keys() == fast[1].keys() and any(k.startswith("index") for k in ref[1])
        for name in ref[1]:
            assert ref[1][name] == fast[1][name], (mix, damage_kind, rows, name)
        for fast_ in (False, True):
            shutil.rmtree(tmp_path / f"s-{fast_}")


# ---------------------------------------------------------------- issue 30: a replay's mend, a run at a time
from mqstore.consume_queue import ConsumeQueue, CQ_STORE_UNIT_SIZE
from mqstore.fast.dispatch import _QueueRuns, _mend_run, put_bulk
import numpy as np


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 90), st.integers(0, 100), st.integers(1, 60),
       st.lists(st.tuples(st.sampled_from([-1, 0, 0.5, 1, 2]), st.integers(0, 19), st.integers(0, 255)), max_size=3),
       st.booleans(), st.booleans())
@example(held=40, first=2, count=10, flips=[(2, 3, 77)], gap=True, alike=True)     # torn past a run with a gap
@example(held=40, first=2, count=10, flips=[(0.5, 0, 1)], gap=False, alike=False)  # torn in its middle
def test_a_runs_mend_is_chapter_5s_mend(held, first, count, flips, gap, alike):
    """`_mend_run` (10.2) against ConsumeQueue.mend: the same count, the same queue files, for runs inside,
    across and past what a queue holds (files of 64 units), with a gap in their offsets or not, over torn
    bytes in and next to the run, units alike (a unit's bytes need not tell its queue offset) or not."""
    out = []
    unit = lambda qo: (np.full(len(qo), 100), np.full(len(qo), 50), np.zeros(len(qo), np.int64)) if alike else \
        (100 + 50 * qo, np.full(len(qo), 50), qo % 7)
    for fast in (False, True):
        with tempfile.TemporaryDirectory() as d:
            q = ConsumeQueue(Path(d), "T", 0, units_per_file=64)
            qo = np.arange(held, dtype=np.int64)
            put_bulk(q, *unit(qo), qo)
            for rel, byte, b in flips:        # torn bytes: before the run, its first, middle, last unit, past it
                at = (first + {-1: -1, 0: 0, 0.5: count // 2, 1: count - 1, 2: count}[rel]) * CQ_STORE_UNIT_SIZE + byte
                if 0 <= at < held * CQ_STORE_UNIT_SIZE:
                    q.mfq.find_by_offset(at - at % q.file_size).write_at(at % q.file_size, bytes([b]))
            run_qo = np.arange(first, first + count, dtype=np.int64)
            if gap and count > 2:
                run_qo[count // 2:] += 1                          # not one run of offsets
            h = np.zeros(count, [("commit_log_offset", "i8"), ("total_size", "i4"), ("queue_offset", "i8")])
            offsets, sizes, tags = unit(run_qo)
            h["commit_log_offset"], h["total_size"], h["queue_offset"] = offsets, sizes, run_qo
            runs = _QueueRuns(h, tags, np.arange(count), np.arange(count))
            n = _mend_run(q, runs, 0, count) if fast else q.mend(runs.offset, runs.size, runs.tags, runs.qo)
            files = {p.name: p.read_bytes() for p in sorted(Path(d).rglob("*")) if p.is_file()}
            q.mfq.close()
            out.append((n, files))
    assert out[0] == out[1]
