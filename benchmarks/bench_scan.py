"""Recovery scan: scan_segment with the body CRC over mapped segments of the realistic mix.

`python benchmarks/bench_scan.py` (and `make bench`) measures the segment scan on issue 18's mix
(bodies 0-2 KB, 1 in 6 IPv6 hosts, 0-3 keys, tags, a few properties) in one run against the limit
of issue 18, `zlib.crc32` of every body separately over the same records, and against the
reference walk (`fast=False`) on a prefix; repetitions and their spread are printed.

`run()` keeps chapter 11's figures (1 KB records, IPv4 only):
* scan_segment(check_crc=True), the numpy fast path, in bytes/s against 1 GB/s: target >= 1x;
* the same against the reference walk (`fast=False`: `_walk` per record, chapter 3's reader);
* the same against zlib.crc32 over the whole segment in one call (the machine's CRC ceiling)."""
import mmap, shutil, statistics, sys, tempfile, time, zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (GIB, body_crc_seconds, goal, load, mix_count, mix_messages, mix_stream, report, repeats,
                     scale, segment_size, spread, write_mix_segments)

from mqstore.message import StoredMessage, encode_record, patch_record
from mqstore.fast.records import scan_segment

SEGMENT = max(4 << 20, int((512 << 20) * scale()))
RECORD = 1024


def write_segment(path: Path) -> int:
    "1 KB records (topic, tags, keys, a 900-odd-byte body) up to SEGMENT bytes; returns the record count."
    proto = StoredMessage(topic="ScanTopic", body=b"", properties={"TAGS": "a", "KEYS": "k"})
    head = len(encode_record(proto))
    recs = []
    for i in range(64):                       # 64 different bodies, repeated
        body = bytes((i * 7 + j) % 251 for j in range(RECORD - head))
        recs.append(bytearray(encode_record(StoredMessage(topic="ScanTopic", body=body,
                                                          properties={"TAGS": "a", "KEYS": "k"}))))
    assert all(len(r) == RECORD for r in recs)
    count = SEGMENT // RECORD - 1
    out = bytearray(SEGMENT)
    for i in range(count):
        r = recs[i % 64]
        patch_record(r, 0, queue_offset=i, commit_log_offset=i * RECORD, store_timestamp=1_700_000_000_000 + i)
        out[i * RECORD:(i + 1) * RECORD] = r
    path.write_bytes(out)
    return count


def timed(f, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        v = f()
        best = min(best, time.perf_counter() - t0)
    return best, v


def run() -> dict:
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-scan-"))
    try:
        count = write_segment(root / "seg")
        with open(root / "seg", "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            mm[:] and None                                        # page it in once
            t_fast, (h, end, why) = timed(lambda: scan_segment(mm, check_crc=True))
            assert len(h) == count and h["crc_ok"].all(), (len(h), count, why)
            n_ref = min(count, 50_000)                            # the reference walk is slow: a prefix
            t_ref, (h2, _, _) = timed(lambda: scan_segment(mm, check_crc=True, end=n_ref * RECORD, fast=False), 1)
            assert len(h2) == n_ref
            t_nocrc, _ = timed(lambda: scan_segment(mm))
            t_crc, _ = timed(lambda: zlib.crc32(mm))
            del h, h2
        finally:
            mm.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    nbytes = count * RECORD
    return {"records": count, "bytes": nbytes, "fast": nbytes / t_fast, "fast no crc": nbytes / t_nocrc,
            "reference": n_ref * RECORD / t_ref, "zlib": nbytes / t_crc,
            "fast records/s": count / t_fast, "reference records/s": n_ref / t_ref}


def run_mix(repeat: int | None = None) -> dict:
    "scan_segment(check_crc=True) over the realistic mix against per-body zlib.crc32 of the same records."
    repeat = repeat or repeats()
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-scan-mix-"))
    try:
        seg = segment_size()
        n = mix_count(int(GIB * scale()))
        end = write_mix_segments(root / "commitlog", mix_stream(n), seg)
        crc_times, records, nbytes = body_crc_seconds(root / "commitlog", repeat)
        maps = []
        for p in sorted((root / "commitlog").iterdir()):
            with open(p, "rb") as f:
                maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        try:
            def scan_all(**kw):
                rows = 0
                for mm in maps:
                    h, _, _ = scan_segment(mm, check_crc=True, **kw)
                    assert h["crc_ok"].all()
                    rows += len(h)
                return rows
            fast = []
            for _ in range(repeat):
                t0 = time.perf_counter(); rows = scan_all(); fast.append(time.perf_counter() - t0)
            assert rows == records == n, (rows, records, n)
            n_ref = min(n, 20_000)
            h, _, _ = scan_segment(maps[0])
            stop = int(h["offset"][min(n_ref, len(h)) - 1] + h["total_size"][min(n_ref, len(h)) - 1])
            n_ref = min(n_ref, len(h))
            v6 = int(((h["sys_flag"] & 0x30) != 0).sum()) / len(h)
            del h
            t0 = time.perf_counter()
            scan_segment(maps[0], check_crc=True, end=stop, fast=False)
            t_ref = time.perf_counter() - t0
        finally:
            for mm in maps:
                mm.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"records": n, "bytes": nbytes, "fast times": fast, "crc times": crc_times, "v6 share": v6,
            "reference": stop / t_ref, "reference records": n_ref}


if __name__ == "__main__":
    m = run_mix()
    gb = m["bytes"] / 1e9
    print(f"# bench_scan: {m['records']:,} records of the realistic mix, {m['bytes'] / 2**20:,.0f} MiB, "
          f"{m['v6 share']:.0%} of rows with an IPv6 host, scale {scale()}, load {load()}")
    fast = gb / statistics.median(m["fast times"])
    limit = gb / statistics.median(m["crc times"])
    goal("bench_scan", "scan_segment(check_crc=True), realistic mix (GB/s)", fast, "GB/s",
         "per-body zlib.crc32 over the same records", limit, 0.5, m["fast times"],
         f"limit runs {spread(m['crc times'])}")
    print(f"     reference walk (fast=False) on the first {m['reference records']:,} records: "
          f"{m['reference'] / 1e9:.3f} GB/s; the fast scan is {fast / (m['reference'] / 1e9):.1f}x that")
