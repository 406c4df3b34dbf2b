"""Durable puts: sync flush with group commit, 32 producer threads, through MessageStore.

`python benchmarks/bench_sync.py` (and `make bench`) measures, in one run and on the realistic mix:
* 32 threads calling `MessageStore.put` on a store with sync flush (each put returns after the
  flush covering it), in msg/s;
* the limit of issue 18: 32 x the single-thread fsync rate of this disk (write 1 KB + os.fsync,
  one thread, a file next to the store), measured before and after every group-commit run,
  because disk contention moves it 2-3x; the ratio uses the fsync rates of the same repetition;
* the disk's own ceiling for groups of 32: 32 x the rate of one thread copying 32 mean records of
  the mix (39 KB) into a mapped segment and forcing them (what one group-commit round does). A sync
  put cannot return before its group is on disk, and with one put in flight per thread no group
  holds more than 32 messages, so no group commit through the map beats it. (Pages dirtied through
  a map cost this disk about twice as much to force as the same bytes written with write(2).)
Goal (issue 18): group commit >= 0.25x of 32 x the single-thread fsync rate.

`run()` keeps chapter 11's older figures (200-byte bodies, CommitLog only):
* 32 producer threads, single puts, sync flush (each put returns after the msync covering it)
  vs persist-queue's SQLiteQueue with the same 32 threads (one durable transaction per put):
  target >= 20x;
* the same vs sqlite3 WAL synchronous=FULL, 1,000 rows per transaction, one thread: target >= 0.5x;
* put_batch of 1,000 under sync flush (one msync wait per batch), one thread, vs the same sqlite3
  FULL batch: the like-for-like comparison (both make 1,000 rows durable per commit)."""
import os, shutil, statistics, sys, tempfile, threading, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MEAN_RECORD, goal, load, mix_config, mix_messages, rate, report, repeats, scale, spread
from bench_put import BODY, bench_sqlite, message, warm_put_batch

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
    assert log.put(message(0)).status == "PUT_OK"      # untimed: the first put creates the first segment
    rounds_before = log.flush_service.flushes
    failed = []

    def producer(t, count):
        msg = message(t)
        for _ in range(count):
            if log.put(msg).status != "PUT_OK":
                failed.append(t)

    r = _threads(n, producer)
    rounds = log.flush_service.flushes - rounds_before
    log.shutdown()
    assert not failed, f"{len(failed)} puts timed out waiting for the flush"
    return r, rounds


def bench_sync_batch(root: Path, n: int = N):
    cfg = StoreConfig(commit_log_file_size=256 << 20, flush_disk_type=FLUSH_SYNC, warm_mapped_file=True)
    log = CommitLog(root, cfg).load().start()
    batch = [message(i) for i in range(1000)]
    warm_put_batch()                    # numba's import is not a put
    assert log.put(message(0)).status == "PUT_OK"      # untimed: the first put creates the first segment
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


def fsync_rate(folder: Path, seconds: float = 1.0, size: int = 1024) -> float:
    "fsyncs per second of one thread: append `size` bytes (1 KB) and os.fsync, for about `seconds`."
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "fsync-probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        block, k = os.urandom(size), 0
        t0 = time.perf_counter()
        while (dt := time.perf_counter() - t0) < seconds or k < 20:
            os.write(fd, block)
            os.fsync(fd)
            k += 1
    finally:
        os.close(fd)
        os.unlink(folder / "fsync-probe")
    return k / dt


def mapped_force_rate(folder: Path, size: int, seconds: float = 1.0) -> float:
    """Forces per second of one thread that copies `size` bytes into a mapped, pre-allocated segment and
    forces them (chapter 1's MappedFile.flush): the disk's rate for what a group-commit round does."""
    from mqstore.mapped_file import MappedFile
    mf = MappedFile.create(folder / "force-probe", 0, 1 << 30)
    try:
        block, k = os.urandom(size), 0
        t0 = time.perf_counter()
        while ((dt := time.perf_counter() - t0) < seconds or k < 20) and mf.free_space() >= size:
            mf.append(block)
            mf.flush(0)
            k += 1
    finally:
        mf.destroy()
        shutil.rmtree(folder / "force-probe", ignore_errors=True)
    return k / dt


def store_group_commit(root: Path, msgs, n: int) -> tuple[float, int]:
    "Seconds for THREADS threads to make `n` puts durable through MessageStore (sync flush); flush rounds."
    from mqstore.config import FLUSH_SYNC
    from mqstore.store import MessageStore
    store = MessageStore.open(root, mix_config(flush_disk_type=FLUSH_SYNC))
    failed = []

    def producer(t, count):
        for i in range(count):
            if store.put(msgs[(t * count + i) % len(msgs)]).status != "PUT_OK":
                failed.append(t)

    per = n // THREADS
    ths = [threading.Thread(target=producer, args=(t, per)) for t in range(THREADS)]
    try:
        t0 = time.perf_counter()
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        dt = time.perf_counter() - t0
        rounds = store.commit_log.flush_service.flushes
    finally:
        store.close()
    assert not failed, f"{len(failed)} puts timed out waiting for the flush"
    return dt, rounds


def run_store(n: int = N, repeat: int | None = None) -> dict:
    repeat = repeat or repeats()
    n = max(THREADS, n // THREADS * THREADS)
    msgs = mix_messages(min(n, 20_000))
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-sync-store-"))
    out = {"messages": n, "group": [], "rounds": [], "fsync before": [], "fsync after": [], "disk": []}
    try:
        for k in range(repeat):
            out["fsync before"].append(fsync_rate(root))
            dt, rounds = store_group_commit(root / f"store{k}", msgs, n)
            out["group"].append(dt)
            out["rounds"].append(rounds)
            out["fsync after"].append(fsync_rate(root))
            out["disk"].append(THREADS * mapped_force_rate(root, THREADS * MEAN_RECORD))
            shutil.rmtree(root / f"store{k}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    m = run_store()
    n = m["messages"]
    per_run = [n / t / (THREADS * (a + b) / 2) for t, a, b in zip(m["group"], m["fsync before"], m["fsync after"])]
    fs = [(a + b) / 2 for a, b in zip(m["fsync before"], m["fsync after"])]
    print(f"# bench_sync: {n:,} durable puts of the realistic mix by {THREADS} threads through MessageStore "
          f"(sync flush, group commit; {n / statistics.median(m['rounds']):.1f} puts per flush round); "
          f"scale {scale()}, load {load()}")
    print(f"     single-thread fsync rate, before/after each run: "
          + ", ".join(f"{a:,.0f}/{b:,.0f}" for a, b in zip(m["fsync before"], m["fsync after"]))
          + f" fsync/s; ratio of each run to its own limit: " + ", ".join(f"{x:.3f}x" for x in per_run))
    disk = statistics.median(m["disk"])
    print(f"     this disk's own ceiling for groups of {THREADS}: {THREADS} x the rate of one thread copying "
          f"{THREADS} mean records ({THREADS * MEAN_RECORD:,} B) into a mapped segment and forcing them "
          f"= {disk:,.0f} msg/s, "
          f"{disk / (THREADS * statistics.median([(a + b) / 2 for a, b in zip(m['fsync before'], m['fsync after'])])):.3f}x "
          f"of the limit below; group commit reached {n / statistics.median(m['group']) / disk:.2f} of it")
    goal("bench_sync", f"group commit, {THREADS} threads, sync flush (msg/s)", n / statistics.median(m["group"]),
         "msg/s", f"{THREADS} x the single-thread fsync rate", THREADS * statistics.median(fs), 0.25, m["group"],
         f"per-run ratios min/median/max {min(per_run):.3f}/{statistics.median(per_run):.3f}/{max(per_run):.3f}x")
    r = run()
    report(f"bench_sync (chapter 11's figures): sync flush, 200-byte bodies, CommitLog; {N:,} puts by {THREADS} threads "
           f"({r['messages'] / max(r['flush rounds'], 1):.0f} puts per flush round)", [
        (f"group commit, {THREADS} threads (msg/s)", r["group commit"],
         f"persist-queue SQLiteQueue, {THREADS} thr", r["persist-queue"], "target >= 20x"),
        (f"group commit, {THREADS} threads (msg/s)", r["group commit"], "sqlite3 WAL FULL, 1,000/txn",
         r["sqlite3 WAL FULL"], "target >= 0.5x"),
        ("sync put_batch of 1,000 (msg/s)", r["sync put_batch"], "sqlite3 WAL FULL, 1,000/txn",
         r["sqlite3 WAL FULL"], "like for like"),
    ])
