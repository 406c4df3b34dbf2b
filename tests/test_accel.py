"""The compiled kernels (mqstore.fast.kernels, numba) against the numpy path and the reference walk:
scan_segment, decode_segment_batch and the fused scan_decode_segment give the same rows, stops,
reasons, topics, tags codes and index keys on random logs (every host layout, non-ASCII topics,
tags and keys, duplicate properties, delayed messages) and on damaged ones; small chunks and a
full topic table take their other paths. Without numba these tests fail: the kernels are a
dependency of the build, and `make test` runs the whole suite again with MQSTORE_ACCEL=0."""
import functools, json, ipaddress, os, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
from mqstore.accel import _forced as _switch     # the stack fast_paths() pushes: True fast, False reference
from hypothesis import HealthCheck, given, settings, strategies as st

import mqstore.fast.dispatch as dispatch
import mqstore.message as message
import mqstore.fast.records as fast_records
from mqstore.fast.dispatch import decode_segment_batch, scan_decode_segment
from mqstore.fast.index import put_index_bulk
from mqstore.message import SCHEDULE_TOPIC, StoredMessage, encode_record
from mqstore.fast.records import compiled_kernels, scan_segment

v4 = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 65535)).map(lambda t: (str(ipaddress.IPv4Address(t[0])), t[1]))
v6 = st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 65535)).map(lambda t: (str(ipaddress.IPv6Address(t[0])), t[1]))
text = st.text(st.sampled_from(list("ab 1#K") + ["é", "中", "\U0001d11e"]), max_size=10)


@st.composite
def records(draw):
    props = draw(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "x", "TAG", "KEYSS"]),
                                 text.filter(bool), max_size=4))
    topic = draw(st.sampled_from(["T", "orders", "tö", "主题" * 3, "a" * 130, SCHEDULE_TOPIC]))
    if topic == SCHEDULE_TOPIC and draw(st.booleans()):
        props["DELAY"] = str(draw(st.integers(0, 20)))
    m = StoredMessage(topic=topic, queue_id=draw(st.integers(0, 3)), body=draw(st.binary(max_size=200)),
                      born_host=draw(st.one_of(v4, v6)), store_host=draw(st.one_of(v4, v6)),
                      queue_offset=draw(st.integers(0, 2**40)), store_timestamp=draw(st.integers(0, 2**42)),
                      properties=props)
    return encode_record(m)


@st.composite
def logs(draw):
    buf = bytearray(b"".join(draw(st.lists(records(), max_size=25))))
    for _ in range(draw(st.integers(0, 2))):
        if buf:
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(buf)))
    return bytes(buf[:cut] if draw(st.booleans()) else buf)


def same_batch(a, b):
    for f in ("topic_ids", "tags_codes", "index_rows", "index_hashes"):
        assert np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))), f
    assert (a.topics, a.keys, a.uniq_keys) == (b.topics, b.keys, b.uniq_keys)


def test_the_kernels_are_there():
    from mqstore.accel import fast_paths
    with fast_paths(True):                      # MQSTORE_ACCEL=0 turns them off, not away
        assert compiled_kernels() is not None, "numba (requirements.txt) or the zlib library is missing"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.booleans(), st.booleans())
def test_compiled_scan_and_decode_agree_with_numpy_and_reference(buf, check_crc, stop):
    kw = dict(check_crc=check_crc, stop_on_bad_crc=stop)
    c, v, r = scan_segment(buf, **kw), scan_segment(buf, compiled=False, **kw), scan_segment(buf, fast=False, **kw)
    assert c[1:] == v[1:] == r[1:]
    assert c[0].tobytes() == v[0].tobytes() == r[0].tobytes()
    numpy_batch = decode_segment_batch(buf, r[0], True, compiled=False)
    same_batch(decode_segment_batch(buf, r[0], True), numpy_batch)
    h, pos, status, batch = scan_decode_segment(buf, strings=True, **kw)
    assert (pos, status) == r[1:] and h.tobytes() == r[0].tobytes()
    same_batch(batch, numpy_batch)


def test_small_chunks_and_a_full_topic_table(monkeypatch, vectors):
    log = (vectors / "commitlog.bin").read_bytes()
    want = scan_segment(log, check_crc=True, compiled=False)
    want_batch = decode_segment_batch(log, want[0], True, compiled=False)
    monkeypatch.setattr(fast_records, "_chunk_rows", lambda n, pos: 5)     # many chunks of 5 rows
    got = scan_decode_segment(log, check_crc=True, strings=True)
    assert got[1:3] == want[1:] and got[0].tobytes() == want[0].tobytes()
    same_batch(got[3], want_batch)
    assert scan_segment(log, check_crc=True)[0].tobytes() == want[0].tobytes()
    monkeypatch.setattr(dispatch, "_topic_table", functools.partial(dispatch._topic_table, 1))
    got = scan_decode_segment(log, check_crc=True, strings=True)            # too many topics: the fallback
    same_batch(got[3], want_batch)
    same_batch(decode_segment_batch(log, want[0], True), want_batch)


def test_the_environment_switch_turns_the_kernels_off():
    code = "from mqstore.fast.records import compiled_kernels; print(compiled_kernels() is None)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, MQSTORE_ACCEL="0"),
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=300), st.integers(1, 40), st.integers(2, 90),
       st.lists(st.integers(-5, 400), max_size=6), st.integers(0, 3))
def test_compiled_index_fill_writes_the_bytes_of_the_sort(tmp_path_factory, hashes, slots, entries, garbage, start):
    """fill_index against the numpy sort: many files (small ones fill up), colliding slots, slot values
    from a crash (negative, past indexCount) and a service that already holds keys."""
    from mqstore.index import IndexService
    def build(accel):
        _switch.append(accel == "1")
        try:
            folder = tmp_path_factory.mktemp("idx")
            svc = IndexService(folder, slots, entries, clock=iter(range(10**12, 10**13, 1000)).__next__)
            put_index_bulk(svc, [7] * start, range(start), [10**12] * start)
            f = svc.last_file()
            for k, v in enumerate(garbage[:slots]):
                f._mm[40 + 4 * k:44 + 4 * k] = v.to_bytes(4, "big", signed=True)
            n = len(hashes)
            put_index_bulk(svc, hashes, np.arange(n) * 50 + 1000, 10**12 + np.arange(n) * 333)
            svc.flush()
            return [(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]
        finally:
            _switch.pop()
    compiled = build("1")
    assert compiled == build("0")
    _switch.append(False)           # and both equal put_hash, one key at a time
    try:
        folder = tmp_path_factory.mktemp("idx")
        svc = IndexService(folder, slots, entries, clock=iter(range(10**12, 10**13, 1000)).__next__)
        put_index_bulk(svc, [7] * start, range(start), [10**12] * start)
        f = svc.last_file()
        for k, v in enumerate(garbage[:slots]):
            f._mm[40 + 4 * k:44 + 4 * k] = v.to_bytes(4, "big", signed=True)
        for k, h in enumerate(hashes):
            f = svc.last_file()
            f.put_hash(h, k * 50 + 1000, 10**12 + k * 333)
        svc.flush()
        assert compiled == [(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]
    finally:
        _switch.pop()


@functools.lru_cache(maxsize=None)
def _kernel_crc():
    "A compiled function calling the kernels' CRC, as they do."
    from numba import njit
    from mqstore.fast.kernels import _crc32

    @njit(cache=False)
    def crc(buf, init):
        return _crc32(init, buf.ctypes.data, len(buf))
    return crc


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1))
def test_compiled_crc_is_zlibs(data, start):
    "The kernels' CRC (ISA-L's crc32_gzip_refl) gives zlib.crc32's values, from any start value."
    import zlib
    buf = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
    assert _kernel_crc()(buf, np.uint32(start)) == zlib.crc32(data, start)


# every plane: ASCII, Latin, CJK, the private use areas, and planes 1-16 (two UTF-16 units each)
PLANES = [(0x20, 0x7E), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFD)] + [
    (p << 16, (p << 16) | 0xFFFD) for p in range(1, 17)]
any_char = st.sampled_from(PLANES).flatmap(lambda r: st.integers(*r)).map(chr)


@settings(max_examples=300, deadline=None)
@given(st.lists(any_char, max_size=40).map("".join))
def test_the_kernel_hashes_utf8_as_java_hashes_utf16(text):
    "Java's String.hashCode over UTF-16 units, computed from the UTF-8 bytes inside the kernel, on every plane."
    from mqstore.fast.kernels import _raw_hash
    raw = np.frombuffer(text.encode() + b"#", np.uint8)       # a byte after the span must not be read
    h, units = _raw_hash(raw, 0, len(raw) - 1)
    assert units == len(text.encode("utf-16-le")) // 2
    h = int(h) & 0xFFFFFFFF                                   # numba widens the uint32 sums; Java keeps 32 bits
    assert h - (1 << 32 if h >> 31 else 0) == message.java_string_hash(text)


@pytest.mark.parametrize("bad", [b"\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                 b"\xf8\x88\x80\x80\x80", b"\xe4\xb8", b"a\xff", b"\xf0\x9f\x98"])
def test_bytes_that_are_not_utf8_are_marked(bad):
    "Overlong, surrogate, past U+10FFFF, cut short, stray: -1 units, so Python's decoder hashes the row."
    from mqstore.fast.kernels import _raw_hash
    assert _raw_hash(np.frombuffer(bad, np.uint8), 0, len(bad))[1] == -1


def test_non_ascii_rows_stay_compiled_and_malformed_ones_agree():
    "Accented, CJK and emoji tags and keys need no Python row; a key with a byte that is not UTF-8 does, and agrees."
    from mqstore.accel import fast_paths
    with fast_paths(True):
        _non_ascii_rows_stay_compiled()


def _non_ascii_rows_stay_compiled():
    msgs = [StoredMessage(topic="订单-été", queue_id=0, body=b"x", queue_offset=i, commit_log_offset=0,
                          properties={"TAGS": ["clé", "标签", "🚀", "TagA"][i % 4],
                                      "KEYS": f"clé-{i} 键{i} k{i}", "UNIQ_KEY": f"u🚀{i}"}) for i in range(40)]
    buf = bytearray(b"".join(encode_record(m) for m in msgs))
    h, pos, status = scan_segment(buf, check_crc=True, compiled=False)
    K = compiled_kernels()
    cols = dispatch._decode_columns(len(h), 4 * len(h) + 64)
    tid, codes, tags_wide, vs, vl, keys, key_hash, key_units, nk = cols
    K.decode_records(np.frombuffer(bytes(buf), np.uint8), h["topic_pos"].astype(np.int64), h["topic_len"].astype(np.int64),
                     h["props_pos"].astype(np.int64), h["props_len"].astype(np.int64), *dispatch._wanted_tables()[:2],
                     *cols, *dispatch._topic_table())
    assert not tags_wide.any() and int(nk[0]) == 4 * len(msgs) and (key_units[:int(nk[0])] >= 0).all()
    same_batch(decode_segment_batch(bytes(buf), h, True), decode_segment_batch(bytes(buf), h, True, compiled=False))
    at = bytes(buf).index("键3".encode())                     # CRC covers the body only: the record stays valid
    buf[at] = 0xFF
    h2 = scan_segment(buf, check_crc=True, compiled=False)[0]
    assert len(h2) == len(msgs)
    got, want = decode_segment_batch(bytes(buf), h2, True), decode_segment_batch(bytes(buf), h2, True, compiled=False)
    same_batch(got, want)
    same_batch(scan_decode_segment(bytes(buf), check_crc=True, strings=True)[3], want)


def test_warm_compiles_the_split_walks_hop_to():
    """warm() compiles (or loads) 10.3's `hop_to` too, though its own store's segments are below SPLIT_BYTES:
    in a fresh process, after warm() the kernel has a signature, and a split walk (SPLIT_BYTES lowered)
    adds none, so a store with large segments does not compile it in its first recovery."""
    pytest.importorskip("numba")
    code = (
        "import json, tempfile\n"
        "from mqstore import accel\n"
        "from mqstore.config import StoreConfig\n"
        "from mqstore.message import Message\n"
        "from mqstore.commit_log import CommitLog\n"
        "import mqstore.fast.recovery as fr\n"
        "from mqstore.fast import kernels as K\n"
        "before = len(K.hop_to.signatures)\n"
        "accel.warm()\n"
        "warmed = [str(s) for s in K.hop_to.signatures]\n"
        "d = tempfile.mkdtemp()\n"
        "log = CommitLog(d, StoreConfig.small()).load()\n"
        "log.put_batch([Message('T', b'x' * 100) for _ in range(2000)])\n"
        "fr.SPLIT_BYTES = 1\n"
        "verdict = fr.walk_segments_fast(log.mfq, 0, True)\n"
        "print(json.dumps([before, warmed, [str(s) for s in K.hop_to.signatures], str(verdict[1])]))\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, MQSTORE_ACCEL="1"),
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    before, warmed, after, status = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == 0 and warmed, (before, warmed)
    assert after == warmed, (warmed, after)
