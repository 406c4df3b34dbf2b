"Shared helpers of the benchmarks: machine facts and the results file."
import csv, os, platform, sys, time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "latest.csv"


def machine() -> str:
    return (f"{os.cpu_count()} CPUs, Python {platform.python_version()}, numpy {np.__version__}, "
            f"{platform.system()} {platform.machine()}")


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def report(bench: str, rows: list[tuple[str, float, str, float, str]]) -> None:
    """Print rows of (figure, value, baseline name, baseline value, unit) with their ratios
    and append them to benchmarks/results/latest.csv."""
    print(f"# {bench}  ({machine()})")
    w = max(len(r[0]) for r in rows)
    print(f"{'figure':<{w}}  {'value':>14}  {'baseline':<34} {'baseline value':>14}  ratio")
    for fig, val, base, bval, unit in rows:
        ratio = val / bval if bval else float("nan")
        print(f"{fig:<{w}}  {val:>14,.0f}  {base:<34} {bval:>14,.0f}  {ratio:5.2f}x  ({unit})")
    RESULTS.parent.mkdir(exist_ok=True)
    new = not RESULTS.exists()
    with RESULTS.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(["time", "bench", "figure", "value", "baseline", "baseline_value", "ratio", "unit", "machine"])
        for fig, val, base, bval, unit in rows:
            out.writerow([time.strftime("%Y-%m-%dT%H:%M:%S"), bench, fig, f"{val:.1f}", base,
                          f"{bval:.1f}", f"{val / bval:.3f}" if bval else "", unit, machine()])


def scale() -> float:
    "MQSTORE_BENCH_SCALE shrinks every benchmark (e.g. 0.01 for a smoke run)."
    return float(os.environ.get("MQSTORE_BENCH_SCALE", "1"))
