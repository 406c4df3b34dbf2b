"""`mqstore verify` (the command's entry point, `mqstore.cli:main`, in a child process) of a store of
the realistic mix: time and peak memory.

The store (one segment of 1 GiB at MQSTORE_BENCH_SCALE=1.0) is written through MessageStore and
closed cleanly; the command then checks every CRC, every consume-queue unit and every index entry.
The child's peak resident memory comes from `os.wait4` (ru_maxrss), so it covers the interpreter,
numpy and the command, and nothing of this process. The limit of issue 18 is measured in the same
run: `zlib.crc32` of every body separately over the same records.
Goals (issue 18): verify >= 0.25x the limit; peak memory under 300 MB whatever the store's size."""
import json, os, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GIB, body_crc_seconds, build_store, goal, load, mix_config, mix_count, repeats, scale, spread

COMMAND = [sys.executable, "-c", "import sys; from mqstore.cli import main; sys.exit(main())"]


def verify(root: Path) -> tuple[float, int, dict]:
    "Run `mqstore verify ROOT --json` in a child: (seconds, peak RSS in bytes, its JSON report)."
    t0 = time.perf_counter()
    child = subprocess.Popen(COMMAND + ["verify", str(root), "--json"], stdout=subprocess.PIPE)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    dt = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stdout.close()
    report = json.loads(out)
    assert child.returncode == 0 and report["ok"], (child.returncode, str(report)[:500])
    return dt, usage.ru_maxrss * 1024, report


def baseline_rss() -> int:
    "Peak RSS of the same interpreter importing mqstore.cli and doing nothing (the floor of the child)."
    child = subprocess.Popen(COMMAND[:2] + ["import mqstore.cli, numpy"])
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0
    return usage.ru_maxrss * 1024


def run(repeat: int | None = None) -> dict:
    repeat = repeat or repeats()
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-verify-"))
    try:
        store_dir = root / "store"
        n = mix_count(int(GIB * scale()))
        build_store(store_dir, n, mix_config())
        crc_times, records, nbytes = body_crc_seconds(store_dir / "commitlog", repeat)
        times, peaks = [], []
        for _ in range(repeat):
            dt, peak, report = verify(store_dir)
            assert report["records"] == n, (report["records"], n)
            times.append(dt)
            peaks.append(peak)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"records": n, "bytes": nbytes, "verify": times, "peak": peaks, "crc": crc_times,
            "index entries": report["index_entries"], "units": report["units"], "floor": baseline_rss()}


if __name__ == "__main__":
    r = run()
    gb = r["bytes"] / 1e9
    print(f"# bench_verify: `mqstore verify` (child process) of {r['records']:,} records of the realistic mix, "
          f"{r['bytes'] / 2**20:,.0f} MiB, {r['units']:,} consume-queue units, {r['index entries']:,} index "
          f"entries; scale {scale()}, load {load()}")
    limit = gb / statistics.median(r["crc"])
    print(f"     limit: per-body zlib.crc32 over the same records {limit:.3f} GB/s, runs {spread(r['crc'])}")
    goal("bench_verify", "mqstore verify (GB/s)", gb / statistics.median(r["verify"]), "GB/s",
         "per-body zlib.crc32 over the same records", limit, 0.25, r["verify"])
    peak = max(r["peak"]) / 1e6
    print(f"GOAL mqstore verify peak memory: < 300 MB whatever the store's size\n"
          f"     measured peak RSS {peak:,.0f} MB ({'met' if peak < 300 else 'NOT met'} at this size; "
          f"{r['bytes'] / 1e6:,.0f} MB of commit log; the interpreter with mqstore.cli and numpy alone: "
          f"{r['floor'] / 1e6:,.0f} MB); runs: " + ", ".join(f"{p / 1e6:,.0f}" for p in r["peak"]) + " MB")
