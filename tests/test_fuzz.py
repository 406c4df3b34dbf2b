"""Issue 14's fuzz suite: damaged stores and bad API input, every outcome classified.

The generator is chapter 8's (`mqstore.crash.fuzz_batch`): seeded, each case under an alarm in the
process that runs it. Here the cases run in batches, each batch in a subprocess with a time limit,
two at a time, so that a hang, a crash of the interpreter or a leaked thread is a failure too.
Every case must end in a named mqstore.errors exception, a clean recovery (or an accepted call
that returned the right thing), or verification's documented status (the problems it reports);
any outcome starting with DEFECT fails the test.

MQSTORE_FUZZ_CASES sets the number of cases (default 10,000), MQSTORE_FUZZ_SEED the first seed.
"""
import json, os, subprocess, sys, time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

CASES = int(os.environ.get("MQSTORE_FUZZ_CASES", "10000"))
SEED = int(os.environ.get("MQSTORE_FUZZ_SEED", "0"))
BATCH, STORE_SHARE = 1000, 0.1            # 100 damaged stores and 900 API calls per batch
BATCH_TIMEOUT_S = 300
ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys
from mqstore.crash import fuzz_batch
work, seed, n_store, n_api = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(json.dumps(fuzz_batch(work, seed, n_store, n_api)))
"""


def run_batch(work: Path, seed: int, n: int) -> list:
    "One batch in a subprocess: [(kind, outcome, detail)]; a timeout or a crash is a DEFECT row."
    n_store = round(n * STORE_SHARE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-c", CHILD, str(work / f"batch{seed}"), str(seed), str(n_store), str(n - n_store - 1)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BATCH_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return [("batch", "DEFECT: hang", f"batch {seed} did not finish in {BATCH_TIMEOUT_S} s")]
    if p.returncode != 0:
        return [("batch", "DEFECT: exception", f"batch {seed} exited {p.returncode}: {p.stderr[-2000:]}")]
    return [tuple(r) for r in json.loads(p.stdout.strip().splitlines()[-1])]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_fuzz_bad_input_gets_named_errors_clean_recoveries_or_reported_problems(tmp_path, record_property):
    sizes = [BATCH] * (CASES // BATCH) + ([CASES % BATCH] if CASES % BATCH else [])
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        batches = list(pool.map(lambda a: run_batch(tmp_path, *a),
                                [(SEED + i, n) for i, n in enumerate(sizes)]))
    elapsed = time.monotonic() - t0
    results = [r for b in batches for r in b]
    counts = Counter(f"{kind}: {outcome}" for kind, outcome, _ in results)
    errors = Counter(f"{kind}: {detail}" for kind, outcome, detail in results if outcome == "named error")
    print(f"\n{len(results)} fuzz cases in {elapsed:.0f} s (seed {SEED}):")
    for k, v in sorted(counts.items()):
        print(f"  {k:<40} {v:>6}")
    print("named errors:", dict(errors.most_common()))
    record_property("fuzz_counts", dict(counts))
    defects = [r for r in results if r[1].startswith("DEFECT")]
    assert not defects, f"{len(defects)} defect(s); the first: {defects[:3]}"
    assert len(results) >= CASES
