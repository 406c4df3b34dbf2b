"""Chapter 7's fast walk (`walk_segments_fast`, one vectorised `scan_segment` per segment) against
the reference `walk_segments` (`check_record` record by record): on random commit logs and on
damaged ones (torn tails, flipped bits, zeroed pages, blanks, foreign records) both give the same
verdict, the same observer events and the same messages; normal and abnormal recovery, run both
ways on copies of one store, make the same decisions and leave the same bytes."""
import ipaddress
import itertools
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, StoredMessage, encode_blank, encode_record
from mqstore.recovery import recover_abnormally, recover_normally, walk_segments, walk_segments_fast

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
            a = walk_segments(log.mfq, start, check_crc, ea.append, ma.append)
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
            if how == "normal":
                got = recover_normally(log, observer=events.append, fast=fast, **kw)
            else:
                got = recover_abnormally(log, redispatch=replayed.append, observer=events.append, fast=fast, **kw)
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
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(messages, max_size=40), st.data())
def test_a_segment_scanned_in_two_halves_decides_like_the_reference(msgs, data):
    """SPLIT_BYTES lowered so that every segment is scanned in two halves at once (`_scan_parts`); and
    the read-only walk's windows (`_scan_windows`), smaller than a record or a few records wide."""
    import mqstore.recovery as recovery
    root = Path(tempfile.mkdtemp(prefix="mqstore-split-"))
    saved, recovery.SPLIT_BYTES = recovery.SPLIT_BYTES, 1
    try:
        files, records = build_log(root, msgs)
        if files and data.draw(st.integers(0, 3)) > 0:
            damage(files, records, data)
        check_crc = data.draw(st.booleans())
        log = CommitLog(root, CFG).load()
        try:
            for start in range(len(log.mfq.files)):
                batches = []
                ref = walk_segments(log.mfq, start, check_crc)
                assert walk_segments_fast(log.mfq, start, check_crc) == ref
                assert walk_segments_fast(log.mfq, start, check_crc, on_batch=batches.append) == ref
                for window in (97, 700, 5000):                    # the read-only walk, window by window
                    ea, eb = [], []
                    assert walk_segments_fast(log.mfq, start, check_crc, window=window) == ref
                    walk_segments(log.mfq, start, check_crc, ea.append)
                    walk_segments_fast(log.mfq, start, check_crc, eb.append, window=window)
                    assert ea == eb
                replayed = []
                walk_segments(log.mfq, start, check_crc, on_message=replayed.append)
                offsets = [int(o) for b in batches for o in b.headers["commit_log_offset"]]
                assert offsets == [m.commit_log_offset for m in replayed]
        finally:
            log.shutdown()
    finally:
        recovery.SPLIT_BYTES = saved
        shutil.rmtree(root, ignore_errors=True)


def test_windowed_walk_with_batches_hands_over_every_record(tmp_path):
    "A windowed walk asked for batches decodes every window (and is not split): the batches cover the log."
    import mqstore.recovery as recovery
    files, records = build_log(tmp_path, [Message(f"T{k % 3}", b"x" * (k * 37 % 300)) for k in range(60)])
    log = CommitLog(tmp_path, CFG).load()
    saved, recovery.SPLIT_BYTES = recovery.SPLIT_BYTES, 1
    try:
        ref = walk_segments(log.mfq, 0, True)
        for window in (97, 700, 5000):
            batches = []
            assert walk_segments_fast(log.mfq, 0, True, on_batch=batches.append, window=window) == ref
            offsets = [int(o) for b in batches for o in b.headers["commit_log_offset"]]
            assert offsets == sorted(offsets) and len(offsets) == len(set(offsets)) == len(records)
    finally:
        recovery.SPLIT_BYTES = saved
        log.shutdown()
