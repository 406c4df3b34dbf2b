"""Rebuild of consume queues and index files from 1 GiB of commit log of the realistic mix
(MQSTORE_BENCH_SCALE shrinks it): the single-process engine (the fast path) and Spark local[2],
in one run, on the same store, each repeated (MQSTORE_BENCH_REPEAT) with the spread printed.
Start-up is timed and printed separately and not counted in either rate: Spark's session and its
warm-up jobs (`mqstore.pipeline.warm_up`: a Python worker per core for DataFrame queries and one
for RDD jobs, the compiled kernels loaded in each), and the single process's first rebuild (the kernels loaded from numba's cache).
Goal (issue 18): Spark's per-core throughput >= 0.5x the single process's, on >= 1 GiB.
With a local master the rebuild's tasks leave their parts in a scratch folder inside the output
(`_rebuild_spark_folder`, chapter 12); the scratch is written, read and removed inside the timed run.

The store of `make bench` is the realistic mix (`_common.mix_stream`, 64 MiB segments so that
Spark has partitions). `generate()` below is the older tiled store of one record size:
The store is generated fast: a block of K encoded records of one size (20 queues over 4 topics,
KEYS and a UNIQ_KEY each) is tiled with numpy over 64 MiB segments, then the queue offsets,
physical offsets, store timestamps and the UNIQ_KEY digits are patched per record, and every
segment is closed by a blank. Session start is timed apart from the rebuild."""
import os, shutil, sys, tempfile, time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import goal, load, mix_count, mix_stream, rate, report, repeats, spread, write_mix_segments, scale

from mqstore.config import StoreConfig
from mqstore.message import (BLANK_MAGIC_CODE, PHYSICAL_OFFSET_POSITION, QUEUE_OFFSET_POSITION,
                             StoredMessage, encode_record, store_timestamp_position)

GIB = 1 << 30
TOTAL = int(GIB * scale())
SEGMENT = 64 << 20 if TOTAL >= 256 << 20 else max(1 << 20, TOTAL // 8)
K = 4000                       # distinct template records (a multiple of the 20 queues)
BODY = 900
TOPICS = ["orders", "payments", "audit-log", "clicks"]
START = 1_700_000_000_000
HEX = np.frombuffer(b"0123456789ABCDEF", np.uint8)


def _record(j, body_len, rng):
    m = StoredMessage(topic=TOPICS[j % 4], queue_id=(j // 4) % 5, body=rng.bytes(body_len),
                      born_timestamp=START, store_host=("127.0.0.1", 10911),
                      properties={"TAGS": "tag" + "ABC"[j % 3], "KEYS": f"key{j % 997:04d} k{j:05d}",
                                  "UNIQ_KEY": "0A000001" + "0" * 24})
    return encode_record(m, version=1)


def template():
    "K encoded records of one size (bodies padded so topics of any length fit) and their UNIQ_KEY digits."
    rng = np.random.default_rng(1)
    longest = max(len(t) for t in TOPICS)
    recs = [_record(j, BODY + longest - len(TOPICS[j % 4]), rng) for j in range(K)]
    assert len({len(r) for r in recs}) == 1
    uniq = [r.index(b"UNIQ_KEY\x01") + len("UNIQ_KEY\x01") + 8 for r in recs]
    return np.frombuffer(b"".join(recs), np.uint8).reshape(K, len(recs[0])), np.array(uniq)


def generate(root: Path) -> tuple[int, int]:
    "Write TOTAL bytes of segments; return (records, bytes of records)."
    block, uniq_at = template()
    size = block.shape[1]
    per_seg = (SEGMENT - 8) // size          # a record is written only if 8 bytes stay free
    if per_seg * size + 8 > SEGMENT:
        per_seg -= 1
    segs = max(1, TOTAL // SEGMENT)
    folder = root / "commitlog"
    folder.mkdir(parents=True)
    queue_rank = np.zeros(K, np.int64)       # rank of template record j inside its queue
    seen = {}
    for j in range(K):
        q = (j % 4, (j // 4) % 5)
        queue_rank[j] = seen.get(q, 0)
        seen[q] = queue_rank[j] + 1
    per_queue = K // 20
    ts_at = store_timestamp_position(0)
    digits = np.arange(23, -1, -1) * 4
    g0 = 0
    for s in range(segs):
        g = np.arange(g0, g0 + per_seg, dtype=np.int64)
        j = g % K
        recs = block[j]                                         # (per_seg, size) copy
        qo = (g // K) * per_queue + queue_rank[j]
        phy = s * SEGMENT + np.arange(per_seg, dtype=np.int64) * size
        ts = START + g // 20
        for at, values in ((QUEUE_OFFSET_POSITION, qo), (PHYSICAL_OFFSET_POSITION, phy), (ts_at, ts)):
            recs[:, at:at + 8] = values.astype(">i8").view(np.uint8).reshape(-1, 8)
        hexd = HEX[(g[:, None] >> digits) & 0xF]                # 24 hex digits of the record number
        cols = uniq_at[j][:, None] + np.arange(24)
        np.put_along_axis(recs, cols, hexd, axis=1)
        data = np.zeros(SEGMENT, np.uint8)
        data[:per_seg * size] = recs.reshape(-1)
        end = per_seg * size
        data[end:end + 8] = np.array([SEGMENT - end, BLANK_MAGIC_CODE], ">i4").view(np.uint8)
        data.tofile(folder / f"{s * SEGMENT:020d}")
        g0 += per_seg
    return g0, g0 * size


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(repeat: int | None = None) -> dict:
    """Both engines on one store of the mix, in one run: every timing (seconds), for chapter 11 too.
    Start-up is timed apart: the single process's first rebuild (numba loads its kernels), Spark's
    session and its warm-up jobs (`warm_up`: a Python worker per core and kind, kernels loaded in each)."""
    import statistics
    from mqstore.pipeline import rebuild, spark_session, tree_digests, warm_up
    repeat = repeat or repeats()
    work = Path(tempfile.mkdtemp(prefix="mqstore-bench-spark-"))
    config = StoreConfig(commit_log_file_size=SEGMENT)
    out = {"single": [], "spark": []}
    try:
        n = mix_count(TOTAL)
        end, out["write s"] = timed(lambda: write_mix_segments(work / "store" / "commitlog", mix_stream(n), SEGMENT))
        out.update(records=n, bytes=end, segment=SEGMENT, segments=len(list((work / "store" / "commitlog").iterdir())))
        _, out["single start-up"] = timed(lambda: rebuild(work / "store", work / "warm", engine="local", config=config))
        for k in range(repeat):
            single, t = timed(lambda: rebuild(work / "store", work / f"single{k}", engine="local", config=config))
            out["single"].append(t)
        spark, out["session"] = timed(lambda: spark_session("local[2]", app_name="bench_spark"))
        out["cores"], out["master"] = spark.sparkContext.defaultParallelism, spark.sparkContext.master
        out["workers"], out["warm-up"] = timed(lambda: warm_up(spark))
        for k in range(repeat):
            par, t = timed(lambda: rebuild(work / "store", work / f"spark{k}", spark=spark, config=config))
            out["spark"].append(t)
        spark.stop()
        assert single["messages"] == par["messages"] == n
        out["same"] = tree_digests(work / "single0") == tree_digests(work / "spark0")
        assert out["same"], "the Spark rebuild differs from the single-process rebuild"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


if __name__ == "__main__":
    import statistics
    r = run()
    n, end, cores, singles, sparks = r["records"], r["bytes"], r["cores"], r["single"], r["spark"]
    print(f"# bench_spark: {n:,} records of the realistic mix, {end / 2**20:,.0f} MiB in {r['segments']} segments "
          f"of {SEGMENT >> 20} MiB (written in {r['write s']:.1f} s); scale {scale()}, load {load()}")
    print(f"     start-up, not counted: single process, first rebuild (kernels loaded) {r['single start-up']:.1f} s; "
          f"Spark session ({r['master']}) {r['session']:.1f} s, warm-up job {r['warm-up']:.1f} s: "
          + ", ".join(f"worker {w['pid']} {w['seconds']:.2f} s (numba cache hits {w['cache_hits']}, "
                      f"misses {w['cache_misses']})" for w in r["workers"]))
    mib = end / 2**20
    r_single, r_spark = mib / statistics.median(singles), mib / statistics.median(sparks)
    print(f"     single process {r_single:,.1f} MiB/s (runs {spread(singles)}), Spark local[{cores}] "
          f"{r_spark:,.1f} MiB/s (runs {spread(sparks)}); identical output: {r['same']}")
    goal("bench_spark", f"Spark rebuild per core, local[{cores}] (MiB/s)", r_spark / cores, "MiB/s",
         "the single-process rebuild (fast path)", r_single, 0.5, sparks,
         f"single-process runs {spread(singles)}; store {mib:,.0f} MiB (the goal asks >= 1 GiB)")
    report(f"bench_spark: rebuild of {mib:,.0f} MiB ({n:,} records of the mix), single process vs Spark local[{cores}]", [
        (f"Spark local[{cores}] rebuild (MiB/s)", r_spark, "single-process rebuild (MiB/s)", r_single, "both cores"),
        (f"Spark local[{cores}] rebuild (msg/s)", n / statistics.median(sparks), "single-process rebuild (msg/s)",
         n / statistics.median(singles), "both cores"),
    ])
