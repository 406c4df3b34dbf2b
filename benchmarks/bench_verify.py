"""`mqstore verify` (the command's entry point, `mqstore.cli:main`, in a child process) of a store of
the realistic mix: time and peak memory.

The store (one segment of 1 GiB at MQSTORE_BENCH_SCALE=1.0) is written through MessageStore and
closed cleanly; the command then checks every CRC, every consume-queue unit and every index entry.
The child's peak resident memory is its own `VmHWM` (/proc/self/status), which it prints to stderr as
it exits: `ru_maxrss` from `os.wait4` would also count the pages of this (big) process that the child
shared between fork and exec. To show that memory does not grow with the store, a second store twice
the size is verified once and both peaks are printed. The limit of issue 18 is measured in the same
run: `zlib.crc32` of every body separately over the same records.
Goals (issue 18): verify >= 0.25x the limit; peak memory under 300 MB whatever the store's size."""
import json, os, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import GIB, body_crc_seconds, build_store, child_env, goal, load, mix_config, mix_count, repeats, scale, spread

HWM = ("import atexit, sys; atexit.register(lambda: sys.stderr.write(next(l for l in open('/proc/self/status') "
       "if l.startswith('VmHWM')))); ")
COMMAND = [sys.executable, "-c", HWM + "from mqstore.cli import main; sys.exit(main())"]


def child_hwm(stderr: bytes) -> int:
    "The peak RSS (bytes) a child printed as `VmHWM:  N kB` when it exited."
    line = [l for l in stderr.decode(errors="replace").splitlines() if l.startswith("VmHWM")][-1]
    return int(line.split()[1]) * 1024


def verify(root: Path) -> tuple[float, int, dict]:
    "Run `mqstore verify ROOT --json` in a child: (seconds, its own peak RSS in bytes, its JSON report)."
    t0 = time.perf_counter()
    child = subprocess.run(COMMAND + ["verify", str(root), "--json"], capture_output=True, env=child_env())
    dt = time.perf_counter() - t0
    assert child.returncode == 0 and child.stdout.strip(), (child.returncode, child.stdout[-500:], child.stderr[-1500:])
    report = json.loads(child.stdout)
    assert report["ok"], (str(report)[:500], child.stderr[-500:])
    return dt, child_hwm(child.stderr), report


def baseline_rss() -> int:
    "Peak RSS of the same interpreter importing mqstore.cli and numpy and loading the compiled kernels (the floor)."
    child = subprocess.run(COMMAND[:2] + [HWM + "import mqstore.cli, numpy, mqstore.fast.records as m; m.compiled_kernels()"], env=child_env(),
                           capture_output=True, check=True)
    return child_hwm(child.stderr)


def run(repeat: int | None = None) -> dict:
    repeat = repeat or repeats()
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-verify-"))
    try:
        store_dir = root / "store"
        n = mix_count(int(GIB * scale()))
        build_store(store_dir, n, mix_config())
        crc_times, records, nbytes = body_crc_seconds(store_dir / "commitlog", repeat)
        verify(store_dir)              # not counted: a first run after an export fills numba's cache
        times, peaks = [], []
        for _ in range(repeat):
            dt, peak, report = verify(store_dir)
            assert report["records"] == n, (report["records"], n)
            times.append(dt)
            peaks.append(peak)
        shutil.rmtree(store_dir, ignore_errors=True)
        build_store(root / "twice", 2 * n, mix_config())        # the same mix, twice the records
        _, peak2, report2 = verify(root / "twice")
        assert report2["records"] == 2 * n, (report2["records"], 2 * n)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"records": n, "bytes": nbytes, "verify": times, "peak": peaks, "crc": crc_times,
            "index entries": report["index_entries"], "units": report["units"], "floor": baseline_rss(),
            "peak twice": peak2, "records twice": 2 * n}


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
    peak, peak2 = max(r["peak"]) / 1e6, r["peak twice"] / 1e6
    print(f"GOAL mqstore verify peak memory: < 300 MB whatever the store's size\n"
          f"     measured peak RSS (the child's own VmHWM) {peak:,.0f} MB for {r['records']:,} records and "
          f"{peak2:,.0f} MB for {r['records twice']:,} ({'met' if max(peak, peak2) < 300 else 'NOT met'} at these "
          f"sizes; {r['bytes'] / 1e6:,.0f} MB of commit log; the interpreter with mqstore.cli, numpy and the compiled kernels alone: "
          f"{r['floor'] / 1e6:,.0f} MB); runs: " + ", ".join(f"{p / 1e6:,.0f}" for p in r["peak"]) + " MB")
