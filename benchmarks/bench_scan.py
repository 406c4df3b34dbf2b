"""Recovery scan: scan_segment with the body CRC over a mapped segment of 1 KB records.

Figures (each a ratio in one run):
* scan_segment(check_crc=True), the numpy fast path, in bytes/s against 1 GB/s: target >= 1x;
* the same against the reference walk (`fast=False`: `_walk` per record, chapter 3's reader);
* the same against zlib.crc32 over the whole segment in one call (the machine's CRC ceiling)."""
import mmap, shutil, sys, tempfile, time, zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import report, scale

from mqstore.message import StoredMessage, encode_record, patch_record, scan_segment

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


if __name__ == "__main__":
    r = run()
    report(f"bench_scan: {r['records']:,} records of 1 KB ({r['bytes'] / 2**20:.0f} MiB), mmap, figures in MB/s", [
        ("scan_segment + CRC (MB/s)", r["fast"] / 1e6, "target 1 GB/s", 1000.0, "target >= 1x"),
        ("scan_segment + CRC (MB/s)", r["fast"] / 1e6, "reference walk + CRC (per record)", r["reference"] / 1e6,
         "speed-up"),
        ("scan_segment + CRC (MB/s)", r["fast"] / 1e6, "zlib.crc32 of the whole segment", r["zlib"] / 1e6,
         "ceiling"),
        ("scan_segment, no CRC (MB/s)", r["fast no crc"] / 1e6, "target 1 GB/s", 1000.0, "headers only"),
    ])
