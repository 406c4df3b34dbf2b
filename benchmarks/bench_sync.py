"""Durable puts: sync flush with group commit, 200-byte bodies, against durable baselines in the same run.

Figures (each a ratio in one run):
* 32 producer threads, single puts, sync flush (each put returns after the msync covering it)
  vs persist-queue's SQLiteQueue with the same 32 threads (one durable transaction per put):
  target >= 20x;
* the same vs sqlite3 WAL synchronous=FULL, 1,000 rows per transaction, one thread: target >= 0.5x;
* put_batch of 1,000 under sync flush (one msync wait per batch), one thread, vs the same sqlite3
  FULL batch: the like-for-like comparison (both make 1,000 rows durable per commit)."""
import shutil, sys, tempfile, threading, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import rate, report, scale
from bench_put import BODY, bench_sqlite, message

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig, FLUSH_SYNC

THREADS = 32
N = int(200_000 * scale())
N_QUEUE = max(500, int(10_000 * scale()))        # persist-queue runs at a few thousand puts/s


def _threads(n_total, body):
    per = n_total // THREADS
    ths = [threading.Thread(target=body, args=(t, per)) for t in range(THREADS)]
    t0 = time.perf_counter()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return rate(per * THREADS, time.perf_counter() - t0)


def bench_group_commit(root: Path, n: int = N):
    cfg = StoreConfig(commit_log_file_size=256 << 20, flush_disk_type=FLUSH_SYNC, warm_mapped_file=True)
    log = CommitLog(root, cfg).load().start()
    failed = []

    def producer(t, count):
        msg = message(t)
        for _ in range(count):
            if log.put(msg).status != "PUT_OK":
                failed.append(t)

    r = _threads(n, producer)
    rounds = log.flush_service.flushes
    log.shutdown()
    assert not failed, f"{len(failed)} puts timed out waiting for the flush"
    return r, rounds


def bench_sync_batch(root: Path, n: int = N):
    cfg = StoreConfig(commit_log_file_size=256 << 20, flush_disk_type=FLUSH_SYNC, warm_mapped_file=True)
    log = CommitLog(root, cfg).load().start()
    batch = [message(i) for i in range(1000)]
    t0 = time.perf_counter()
    for _ in range(max(1, n // 1000)):
        assert log.put_batch(batch).status == "PUT_OK"
    r = rate(max(1, n // 1000) * 1000, time.perf_counter() - t0)
    log.shutdown()
    return r


def bench_persist_queue(root: Path, n: int = N_QUEUE) -> float:
    from persistqueue import SQLiteQueue
    q = SQLiteQueue(str(root / "pq"), multithreading=True, auto_commit=True)
    item = {"topic": "BenchTopic", "queue_id": 0, "tags": "t", "body": BODY}

    def producer(t, count):
        for _ in range(count):
            q.put(item)

    return _threads(n, producer)


def run(n: int = N, n_queue: int = N_QUEUE) -> dict:
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-sync-"))
    try:
        group, rounds = bench_group_commit(root / "group", n)
        out = {"group commit": group, "flush rounds": rounds, "messages": n,
               "sync put_batch": bench_sync_batch(root / "batch", n),
               "persist-queue": bench_persist_queue(root, n_queue),
               "sqlite3 WAL FULL": bench_sqlite(root, n, "FULL")}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    r = run()
    report(f"bench_sync: sync flush, 200-byte bodies; {N:,} puts by {THREADS} threads "
           f"({r['messages'] / max(r['flush rounds'], 1):.0f} puts per flush round)", [
        (f"group commit, {THREADS} threads (msg/s)", r["group commit"],
         f"persist-queue SQLiteQueue, {THREADS} thr", r["persist-queue"], "target >= 20x"),
        (f"group commit, {THREADS} threads (msg/s)", r["group commit"], "sqlite3 WAL FULL, 1,000/txn",
         r["sqlite3 WAL FULL"], "target >= 0.5x"),
        ("sync put_batch of 1,000 (msg/s)", r["sync put_batch"], "sqlite3 WAL FULL, 1,000/txn",
         r["sqlite3 WAL FULL"], "like for like"),
    ])
