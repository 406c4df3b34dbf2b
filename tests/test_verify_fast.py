"""`mqstore verify` after issue 30's speed-ups reports what it reported before. The code that changed is
kept here in its former shape (chapter 14's `record_problems` over a copy of the window, the light-queue
check's `property_spans` of every window, chapter 13's `window_claims` with `np.lexsort`, the queue units
read without giving pages back); `verify --json` runs with the former code and with today's on clean,
damaged and RocketMQ 5.x stores and prints the same report, byte for byte. Run in both modes
(MQSTORE_ACCEL=0: the map's find instead of the compiled search)."""
import json, random, shutil
from pathlib import Path

import numpy as np
import pytest

import mqstore.modern as modern
import mqstore.scrub as scrub
from mqstore.cli import main
from mqstore.vectors import ROCKETMQ5_CASES
from tests.conftest import GEOMETRY5
from tests.test_scrub import write, segment, flip, CFG


def former_record_problems(w) -> list:
    out, h = [], w.headers
    if not len(h):
        return out
    hay = bytes(w.buf[:int(h["offset"][-1] + h["total_size"][-1])])
    carriers = set(modern._rows_holding(hay, h, modern.PROPERTY_CRC32.encode()).tolist())
    for i in sorted(carriers | set(np.flatnonzero(h["sys_flag"] & 1).tolist())):
        pos, size = int(h["offset"][i]), int(h["total_size"][i])
        if i in carriers:
            c = modern.record_prop_crc(w.buf, pos, w.base)
            if not c.ok:
                out.append(f"commit log: record at {c.offset}: {modern.PROPERTY_CRC32} {c.digits} is not its CRC {c.computed}")
        if h["sys_flag"][i] & 1:
            b, k = int(h["body_pos"][i]), int(h["body_len"][i])
            try:
                modern.decompress_body(bytes(w.buf[b:b + k]), int(h["sys_flag"][i]), w.base + pos)
            except modern.BodyDecompressionError as e:
                out.append(f"commit log: {e}")
    return out


def former_light_window(self, w) -> None:
    from mqstore.fast.dispatch import property_spans
    h, b = w.headers, w.batch
    name = modern.PROPERTY_INNER_MULTI_DISPATCH
    _, length = property_spans(w.buf, h, (name,))[name]
    own = np.array([modern.is_lmq(t) for t in b.topics], bool)
    rows = np.flatnonzero((length > 0) | (own[b.topic_ids] if len(own) else False))
    for r in rows.tolist():
        p, k = int(h["props_pos"][r]), int(h["props_len"][r])
        self.record(int(w.offs[r]), int(h["total_size"][r]), int(b.tags_codes[r]), b.topics[int(b.topic_ids[r])],
                    int(h["queue_id"][r]), int(h["queue_offset"][r]), int(h["sys_flag"][r]),
                    modern.decode_properties(bytes(w.buf[p:p + k])))


def former_window_claims(w):
    h, b = w.headers, w.batch
    tx = h["sys_flag"] & scrub.TRANSACTION_ROLLBACK_TYPE
    rows = np.flatnonzero((tx == scrub.TRANSACTION_NOT_TYPE) | (tx == scrub.TRANSACTION_COMMIT_TYPE))
    qid = h["queue_id"][rows].astype(np.int64)
    order = rows[np.lexsort((rows, qid, b.topic_ids[rows]))]
    key = (b.topic_ids[order] << 32) | (h["queue_id"][order].astype(np.int64) & 0xFFFFFFFF)
    for g in np.split(order, np.flatnonzero(np.diff(key)) + 1) if len(order) else ():
        yield ((b.topics[int(b.topic_ids[g[0]])], int(h["queue_id"][g[0]])),
               h["queue_offset"][g].astype(np.int64), w.offs[g])


def reports(root, capsys, monkeypatch, *args) -> tuple:
    "(exit status, stdout) of `verify ROOT --json ARGS` with the former code, then with today's."
    out = []
    for former in (True, False):
        with monkeypatch.context() as m:
            if former:
                m.setattr(modern, "record_problems", former_record_problems)
                m.setattr(modern.LightQueueCheck, "window", former_light_window)
                m.setattr(scrub, "window_claims", former_window_claims)
                m.setattr(scrub, "_units_read", lambda q: q.units)
            rc = main(["verify", str(root), "--json", *args])
            out.append((rc, capsys.readouterr().out))
    assert out[0] == out[1], (root, out)
    return out[1]


def damage_4x(root: Path, how: str) -> None:
    q = sorted((root / "consumequeue" / "T1" / "1").iterdir())[0]
    data = bytearray(q.read_bytes())
    if how == "body":
        flip(segment(root, 0), 2000)
    elif how == "last segment":
        flip(segment(root, -1), 300)
    elif how == "queue garbage":
        data[40:200] = random.Random(1).randbytes(160)
        q.write_bytes(bytes(data))
    elif how == "queue wrong unit":
        data[60:72] = data[140:152]
        q.write_bytes(bytes(data))
    elif how == "queue tags":
        data[76:80] = bytes(4)
        q.write_bytes(bytes(data))
    elif how == "queue offset claimed twice":                # records' headers claim others' queue offsets
        from mqstore.crash import scan_log
        records, _ = scan_log(root, CFG)
        size = CFG.commit_log_file_size
        for victim, other in ((10, 40), (150, 20)):
            o = records[other][0]
            head = segment(root, o // size).read_bytes()[o % size:o % size + 28]
            off = records[victim][0]
            seg = segment(root, off // size)
            raw = bytearray(seg.read_bytes())
            at = off % size
            raw[at + 12:at + 16], raw[at + 20:at + 28] = head[12:16], head[20:28]   # the other's queue, queue offset
            seg.write_bytes(bytes(raw))
    elif how == "index entry":
        flip(sorted((root / "index").iterdir())[0], 40 + 64 * 4 + 5 * 20 + 2)


@pytest.mark.parametrize("how", ["clean", "body", "last segment", "queue garbage", "queue wrong unit", "queue tags",
                                 "queue offset claimed twice", "index entry"])
def test_same_report_on_4x_stores(tmp_path, capsys, monkeypatch, how):
    write(tmp_path / "s", n=200, seed=3)
    if how != "clean":
        damage_4x(tmp_path / "s", how)
    rc, text = reports(tmp_path / "s", capsys, monkeypatch)
    assert (rc == 0) == (how == "clean") and json.loads(text)["records"] > 0


BROKER = {"delaycustom": "messageDelayLevel=2s 4s 8s 16s 32s\n", "crc": "enabledAppendPropCRC=true\n",
          "lmq": "enableLmq=true\nenableMultiDispatch=true\n"}


@pytest.mark.parametrize("name, how", [(n, h) for n in ROCKETMQ5_CASES for h in ("clean", "queue file", "index files",
                                        "body byte", "property byte")] + [("lmq", "light unit")])
def test_same_report_on_rocketmq5_stores(vectors5, tmp_path, capsys, monkeypatch, name, how):
    root = Path(shutil.copytree(vectors5 / name, tmp_path / name))
    conf = tmp_path / "broker.conf"
    conf.write_text(GEOMETRY5 + BROKER.get(name, "") + f"storePathRootDir={root}\n")
    seg = sorted((root / "commitlog").iterdir())[0]
    raw = bytearray(seg.read_bytes())
    end = len(raw.rstrip(b"\0"))
    if how == "queue file":
        sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file())[-1].unlink()
    elif how == "index files":
        for p in (root / "index").iterdir():
            p.unlink()
    elif how in ("body byte", "property byte"):               # the middle of the log; the last record's properties
        raw[end // 2 if how == "body byte" else end - 3] ^= 0x10 if how == "body byte" else 0x01
        seg.write_bytes(bytes(raw))
    elif how == "light unit":
        f = root / "consumequeue" / "%LMQ%room1" / "0" / "00000000000000000000"
        data = bytearray(f.read_bytes())
        data[20:28] = (673).to_bytes(8, "big")
        f.write_bytes(bytes(data))
    rc, text = reports(root, capsys, monkeypatch, "--config", str(conf))
    assert rc in (0, 1) and (rc == 0) == (how == "clean" or not json.loads(text)["problems"])


def compressed_bodies(rng, n):
    "Bodies with sysFlag's compressed bit: good zlib, and zlib, lz4, zstd and type-4 bodies spoiled in every way."
    import zlib
    from mqstore.message import COMPRESSED_FLAG, COMPRESSION_LZ4, COMPRESSION_ZSTD, COMPRESSION_ZLIB
    out = []
    for i in range(n):
        text = b" ".join(b"item %d qty %d" % (rng.randrange(1000), rng.randrange(9)) for _ in range(rng.randrange(0, 300)))
        good = zlib.compress(text, rng.choice([0, 1, 6, 9]))
        kind = rng.randrange(12)
        body = {0: good[:-1] + bytes([good[-1] ^ 1]), 1: good[:-rng.randrange(1, 5)], 2: good + b"\0",
                3: bytes([0x88, 0x1B]) + good[2:], 4: bytes([0x78, 0x9D]) + good[2:], 5: good[2:-4], 6: b"",
                7: good + good, 8: good[:2] + bytes([good[2] ^ 0x40]) + good[3:]}.get(kind, good)
        flag = COMPRESSED_FLAG | rng.choice([0, COMPRESSION_ZLIB, COMPRESSION_ZLIB, COMPRESSION_LZ4, COMPRESSION_ZSTD,
                                             0x400])
        out.append((body, flag if kind != 11 else COMPRESSED_FLAG))
    return out


@pytest.mark.parametrize("seed, split", [(1, None), (2, 0), (3, 0)])
def test_same_report_on_compressed_bodies(tmp_path, capsys, monkeypatch, seed, split):
    "mqstore.modern.record_problems with ISA-L's pass (10.3's zlib_bodies_ok): the same problems, worded alike."
    import mqstore.fast.recovery as fr
    from mqstore.message import Message
    from mqstore.store import MessageStore
    if split is not None:
        monkeypatch.setattr(fr, "BODY_SPLIT", split)            # the two threads even on small windows
    rng = random.Random(seed)
    with MessageStore.open(tmp_path / "s", CFG) as s:
        for i, (body, flag) in enumerate(compressed_bodies(rng, 150)):
            s.put(Message(f"T{i % 3}", body, queue_id=i % 2, sys_flag=flag, properties={"KEYS": f"k{i}"}))
    rc, text = reports(tmp_path / "s", capsys, monkeypatch)
    problems = json.loads(text)["problems"]
    assert rc == 1 and 20 < len(problems) < 150 and all("decompress" in p["detail"] or "codec" in p["detail"]
                                                        for p in problems), problems[:3]


def _reference_passes(body: bytes, sys_flag: int) -> bool:
    "Does chapter 14's decompress_body (the reference) take the body?"
    from mqstore.modern import decompress_body, BodyDecompressionError
    try:
        decompress_body(body, sys_flag)
        return True
    except BodyDecompressionError:
        return False


def test_zlib_bodies_ok_passes_only_what_the_reference_passes():
    "10.3's zlib_bodies_ok never passes a body chapter 14's decompress_body refuses; it passes every good zlib body."
    from mqstore import accel
    from mqstore.fast.recovery import zlib_bodies_ok
    rng = random.Random(5)
    bodies = compressed_bodies(rng, 2000)
    rows = np.zeros(len(bodies), [("body_pos", "<i4"), ("body_len", "<i4"), ("sys_flag", "<i4")])
    rows["body_len"] = [len(b) for b, _ in bodies]
    rows["body_pos"] = np.cumsum(rows["body_len"]) - rows["body_len"]
    rows["sys_flag"] = [f for _, f in bodies]
    with accel.fast_paths(True):
        ok = zlib_bodies_ok(memoryview(b"".join(b for b, _ in bodies)), rows, np.arange(len(bodies)))
    ref = np.array([_reference_passes(b, f) for b, f in bodies])
    zlib_kind = np.isin(rows["sys_flag"] & 0x700, [0, 0x300])
    assert not (ok & ~ref).any() and (ok == (ref & zlib_kind)).all() and 300 < ok.sum() < 1500


def _deflate_bits(fields) -> bytes:
    "(value, width, is a Huffman code) fields packed as deflate packs them: first bit lowest, a code's top bit first."
    acc, n = 0, 0
    for v, w, huff in fields:
        acc |= (int(format(v, f"0{w}b")[::-1], 2) if huff else v) << n
        n += w
    return acc.to_bytes((n + 7) // 8, "little")


def _one_literal_stream(dist_lens) -> bytes:
    "A zlib stream of one dynamic block inflating to b'a', its distance code of lengths `dist_lens` (never used)."
    import zlib
    order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1]
    codes = {0: (0b0, 1), 1: (0b10, 2), 2: (0b11, 2)}
    lens = [1 if s in (97, 256) else 0 for s in range(257)] + list(dist_lens)
    f = [(1, 1, False), (2, 2, False), (0, 5, False), (len(dist_lens) - 1, 5, False), (14, 4, False)]
    f += [({0: 1, 1: 2, 2: 2}.get(s, 0), 3, False) for s in order]
    f += [(*codes[x], True) for x in lens] + [(0, 1, True), (1, 1, True)]
    return b"\x78\x01" + _deflate_bits(f) + zlib.adler32(b"a").to_bytes(4, "big")


def test_zlib_bodies_ok_agrees_with_the_reference_on_every_spoiling():
    """10.3's zlib_bodies_ok (ISA-L's one-shot inflate, the header check, zlib for the rest) gives decompress_body's
    verdict on good bodies (one block, several, stored, fixed codes), every cut, trailing bytes, every one-bit flip of
    their first bytes, and codes zlib refuses that ISA-L alone would pass (an incomplete distance code)."""
    import zlib
    from mqstore import accel
    from mqstore.fast.recovery import zlib_bodies_ok
    rng = random.Random(11)
    text = b" ".join(rng.choice([b"order", b"item", b"queue", b"topic", b"%d" % rng.randrange(99)]) for _ in range(4000))
    good = [zlib.compress(x, lv) for lv in (0, 1, 5, 9) for x in (b"", b"a", b"ab" * 600, text[:60], text, rng.randbytes(2000))]
    good += [zlib.compress(text + rng.randbytes(60000) + text, 5), _one_literal_stream([1]), _one_literal_stream([0])]
    spoiled = [_one_literal_stream([2]), _one_literal_stream([2, 1]), _one_literal_stream([1, 1, 1])]
    for b in good:
        spoiled += [b[:j] for j in range(0, len(b), max(1, len(b) // 60))] + [b + b"\0", b + b"more"]
        for j in range(min(len(b), 40) * 8):
            x = bytearray(b)
            x[j // 8] ^= 1 << (j % 8)
            spoiled.append(bytes(x))
    bodies = good + spoiled
    rows = np.zeros(len(bodies), [("body_pos", "<i8"), ("body_len", "<i4"), ("sys_flag", "<i4")])
    rows["body_len"] = [len(b) for b in bodies]
    rows["body_pos"] = np.cumsum(rows["body_len"]) - rows["body_len"]
    rows["sys_flag"] = [1, 0x301] * (len(bodies) // 2) + [1] * (len(bodies) % 2)
    ref = np.array([_reference_passes(b, int(f)) for b, f in zip(bodies, rows["sys_flag"])])
    for split in (None, 0):
        with accel.fast_paths(True):
            import mqstore.fast.recovery as fr
            old, fr.BODY_SPLIT = fr.BODY_SPLIT, (fr.BODY_SPLIT if split is None else split)
            try:
                ok = zlib_bodies_ok(memoryview(b"".join(bodies)), rows, np.arange(len(bodies)))
            finally:
                fr.BODY_SPLIT = old
        assert (ok == ref).all(), [i for i in np.flatnonzero(ok != ref)][:5]
    assert ref[:len(good)].all() and not ref[len(good):len(good) + 3].any() and 0 < ref[len(good):].sum() < len(spoiled)
    from mqstore.fast.records import compiled_kernels
    with accel.fast_paths(True):
        K = compiled_kernels()
    shown = np.zeros(len(bodies), np.bool_)            # the compiled loop alone: it vouches for the one-block bodies
    K.zlib_exact(np.frombuffer(b"".join(bodies), np.uint8), rows["body_pos"].astype(np.int64),
                 rows["body_len"].astype(np.int64), np.zeros(1 << 15, np.uint64), np.empty(1 << 20, np.uint8), shown)
    n = len(good) - 3                                  # then several blocks, a lone 1-bit distance code, none: zlib's
    assert not (shown & ~ref).any() and shown[:n].all() and list(shown[n:n + 3]) == [False, True, False]
