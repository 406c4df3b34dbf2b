"""Dispatch to consume queues and index: the per-record reput path against the bulk builders,
in one run over the same commit log of the realistic mix; and key-query latency over a full index file.

Like for like: both paths are timed from the mapped commit log to built files (scan, decode and
build for the bulk path; read, decode and dispatch for the reput path). The builders-only figure
is printed as the bulk path's share, not against the per-record path. What users run (put with
dispatch to `wait_dispatched`) is in bench_put. `write_log()` keeps chapter 11's older log.

The per-record baseline runs over the first N_SLOW records (it is ~100x slower) and is
reported per message; the bulk path runs over all N records. Figures are messages/s."""
import random, shutil, statistics, struct, sys, tempfile, time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GIB, load, mix_count, mix_stream, rate, report, scale, write_mix_segments

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.consume_queue import ConsumeQueueStore
from mqstore.accel import fast_paths
from mqstore.dispatch import ReputService
from mqstore.fast.dispatch import decode_segment_batch, build_consume_queues_bulk
from mqstore.fast.index import build_index_bulk, index_key_hashes, put_index_bulk
from mqstore.index import IndexService, IndexFile, index_key_hash
from mqstore.message import StoredMessage, encode_record, encode_blank, patch_record
from mqstore.fast.records import scan_segment

N = int(1_000_000 * scale())
N_SLOW = max(1000, N // 20)
SEGMENT = 64 << 20
TOPICS = [f"BenchTopic{i}" for i in range(8)]
TAGS = ["TagA", "TagB", "TagC", "Aa"]


def write_log(root: Path) -> int:
    "N records (8 topics x 4 queues, a tag, KEYS with one key, a UNIQ_KEY) straight into segments."
    rng = random.Random(1)
    next_q = {}
    (root / "commitlog").mkdir(parents=True)
    seg, pos, base = bytearray(SEGMENT), 0, 0
    ts = 1_700_000_000_000
    for i in range(N):
        topic, qid = TOPICS[i % 8], (i // 8) % 4
        m = StoredMessage(topic=topic, queue_id=qid, body=b"x" * 64, store_timestamp=ts,
                          properties={"TAGS": TAGS[i % 4], "KEYS": f"order-{i}", "UNIQ_KEY": f"{i:032X}"})
        rec = encode_record(m)
        if pos + len(rec) + 8 > SEGMENT:
            seg[pos:pos + 8] = encode_blank(SEGMENT - pos)
            (root / "commitlog" / f"{base:020d}").write_bytes(seg)
            seg, pos, base = bytearray(SEGMENT), 0, base + SEGMENT
        seg[pos:pos + len(rec)] = rec
        q = next_q.get((topic, qid), 0); next_q[(topic, qid)] = q + 1
        patch_record(seg, pos, queue_offset=q, commit_log_offset=base + pos, store_timestamp=ts)
        pos += len(rec)
        ts += rng.randint(0, 2)
    (root / "commitlog" / f"{base:020d}").write_bytes(seg)
    return base + pos


def per_record(root: Path, log) -> float:
    cqs = ConsumeQueueStore(root / "slow")
    idx = IndexService(root / "slow" / "index", clock=lambda: 1_700_000_000_000)
    reput = ReputService(log, [cqs, idx])
    # find the offset of record N_SLOW: walk headers of the first segment
    mf = log.mfq.files[0]
    with mf.view(0, mf.read_position) as buf:
        h, _, _ = scan_segment(buf, end=len(buf))
        stop = int(h["commit_log_offset"][min(N_SLOW, len(h)) - 1] + h["total_size"][min(N_SLOW, len(h)) - 1])
        n = min(N_SLOW, len(h))
        del h
    t0 = time.perf_counter()
    with fast_paths(False):                   # the reference: chapter 5's per-record pass
        reput.dispatch_until(stop)
    dt = time.perf_counter() - t0
    cqs.close(); idx.close()
    return rate(n, dt)


def bulk(root: Path, log):
    cqs = ConsumeQueueStore(root / "fast")
    idx = IndexService(root / "fast" / "index", clock=lambda: 1_700_000_000_000)
    t_scan = t_build = 0.0
    n = 0
    for mf in log.mfq.files:
        with mf.view(0, mf.read_position) as buf:
            t0 = time.perf_counter()
            h, _, _ = scan_segment(buf)
            batch = decode_segment_batch(buf, h, strings=False)
            t1 = time.perf_counter()
            build_consume_queues_bulk(cqs, batch)
            build_index_bulk(idx, batch)
            t2 = time.perf_counter()
            n += len(h)
            del batch, h
        t_scan += t1 - t0
        t_build += t2 - t1
    cqs.close(); idx.close()
    return n, t_scan, t_build


def query_latency(root: Path, slots: int = 500_000, entries: int = 2_000_000, samples: int | None = None):
    "p50 / p99 of IndexService.query over one full file (500,000 slots, 2,000,000 entries)."
    svc = IndexService(root / "qindex", slots, entries, clock=lambda: 1_700_000_000_000)
    keys = [f"BenchTopic#key-{i}" for i in range(entries - 1)]
    put_index_bulk(svc, index_key_hashes(keys), np.arange(entries - 1) * 100, 1_700_000_000_000 + np.arange(entries - 1))
    assert svc.files[-1].is_full()
    rng = random.Random(3)
    samples = int(20_000 * max(scale(), 0.05)) if samples is None else samples
    sample = [rng.randrange(entries - 1) for _ in range(samples)]
    lat = []
    for i in sample:
        t0 = time.perf_counter()
        r = svc.query("BenchTopic", f"key-{i}", 0, 2**62)
        lat.append(time.perf_counter() - t0)
        assert i * 100 in r.offsets
    svc.close()
    lat.sort()
    return lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6


def main():
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-dispatch-"))
    try:
        t0 = time.perf_counter()
        n_mix = mix_count(int(GIB * scale()))
        end = write_mix_segments(root / "commitlog", mix_stream(n_mix), SEGMENT)
        print(f"wrote {n_mix:,} records of the realistic mix ({end / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - t0:.1f} s; scale {scale()}, load {load()}")
        log = CommitLog(root, StoreConfig(commit_log_file_size=SEGMENT)).load()
        slow = per_record(root, log)
        n, t_scan, t_build = bulk(root, log)
        log.shutdown()
        p50, p99 = query_latency(root)
        bench = f"bench_dispatch: {n:,} records to consume queues + index (per-record on {min(N_SLOW, n):,})"
        end_to_end = rate(n, t_scan + t_build)
        builders = rate(n, t_build)
        report(bench, [
            ("bulk rebuild, scan+decode+build (msg/s)", end_to_end, "target 2 M msg/s", 2_000_000.0,
             "target >= 1x"),
            ("bulk rebuild, scan+decode+build (msg/s)", end_to_end, "per-record reput path", slow, "speed-up"),
            ("bulk builders only, CQ+index (msg/s)", builders, "bulk rebuild, scan+decode+build", end_to_end,
             "builders' share"),
        ])
        report("bench_dispatch: key query over a full index file (500,000 slots, 2,000,000 entries)", [
            ("query p50 (us)", p50, "target", 50.0, "lower is better"),
            ("query p99 (us)", p99, "target p50", 50.0, "lower is better"),
        ])
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
