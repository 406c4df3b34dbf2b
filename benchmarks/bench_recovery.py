"""Recovery through `MessageStore.open`, normal and abnormal, on a store of the realistic mix.

The store (one segment of 1 GiB at MQSTORE_BENCH_SCALE=1.0) is written through MessageStore and
closed cleanly. Then, in one run:
* normal recovery: `MessageStore.open` of the cleanly closed store (timed to the open store);
* abnormal recovery: before each open the `abort` file is put back and the checkpoint is replaced
  by the stale one saved before any message was written, as after a crash whose checkpoint never
  reached the disk: nothing is deleted by the benchmark, the store itself drops the index files
  and re-dispatches and re-indexes every record (chapter 7's recovery; the count is printed, from
  one more run with an observer, which is not timed: an observer receives an event per record);
* the limit of issue 18: `zlib.crc32` of every body separately over the same records.
Goals (issue 18): abnormal recovery >= 0.5x the limit; normal recovery at least as fast."""
import shutil, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (GIB, body_crc_seconds, build_store, goal, load, mix_config, mix_count, repeats, scale,
                     spread)

from mqstore.checkpoint import create_abort_file
from mqstore.store import MessageStore


def open_timed(root: Path, config, events=None):
    "Seconds from MessageStore.open to an open store (the close after it is not timed)."
    t0 = time.perf_counter()
    store = MessageStore.open(root, config, observer=None if events is None else events.append)
    dt = time.perf_counter() - t0
    exit_ok = store.last_exit_ok
    store.close()
    return dt, exit_ok


def run(repeat: int | None = None) -> dict:
    repeat = repeat or repeats()
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-recovery-"))
    try:
        store_dir, config = root / "store", mix_config()
        MessageStore.open(store_dir, config).close()                   # an empty store
        stale = (store_dir / "checkpoint").read_bytes()                # its checkpoint: stale from now on
        n = mix_count(int(GIB * scale()))
        t0 = time.perf_counter()
        end = build_store(store_dir, n, config)
        t_build = time.perf_counter() - t0
        crc_times, records, nbytes = body_crc_seconds(store_dir / "commitlog", repeat)
        assert records == n, (records, n)
        normal, abnormal, redispatched = [], [], []
        for k in range(repeat + 1):
            dt, ok = open_timed(store_dir, config)
            assert ok
            normal.append(dt)
            create_abort_file(store_dir)
            (store_dir / "checkpoint").write_bytes(stale)
            # the last run is not timed: with an observer (a Python call per record checked, as the
            # book's pictures need) it counts what abnormal recovery re-dispatched
            events = [] if k == repeat else None
            dt, ok = open_timed(store_dir, config, events)
            assert not ok
            if events is None:
                abnormal.append(dt)
            else:
                redispatched.append(sum(e.count for e in events if type(e).__name__ == "Redispatched"))
                normal.pop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"records": n, "bytes": nbytes, "end": end, "build s": t_build, "normal": normal,
            "abnormal": abnormal, "crc": crc_times, "redispatched": redispatched}


if __name__ == "__main__":
    r = run()
    gb = r["bytes"] / 1e9
    print(f"# bench_recovery: {r['records']:,} records of the realistic mix, {r['bytes'] / 2**20:,.0f} MiB of "
          f"commit log (segments of {mix_config().commit_log_file_size >> 20} MiB), scale {scale()}, "
          f"written through MessageStore in {r['build s']:.1f} s; load {load()}")
    limit = gb / statistics.median(r["crc"])
    print(f"     limit: per-body zlib.crc32 over the same records {limit:.3f} GB/s, runs {spread(r['crc'])}")
    print(f"     abnormal recovery re-dispatched {r['redispatched']} records per run (of {r['records']:,})")
    ab = gb / statistics.median(r["abnormal"])
    no = gb / statistics.median(r["normal"])
    goal("bench_recovery", "abnormal recovery, everything re-dispatched and re-indexed (GB/s)", ab, "GB/s",
         "per-body zlib.crc32 over the same records", limit, 0.5, r["abnormal"])
    goal("bench_recovery", "normal recovery (GB/s)", no, "GB/s",
         "per-body zlib.crc32 over the same records", limit, 0.5, r["normal"],
         f"normal / abnormal = {no / ab:.2f}x (goal >= 1x)")
