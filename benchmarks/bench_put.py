"""Puts through MessageStore with dispatch, async flush, on the realistic mix.

`python benchmarks/bench_put.py` (and `make bench`) measures what a user runs, in one run:
* `MessageStore.put`, one thread, timed until `wait_dispatched` returns (every message in its
  consume queue and the index): goal of issue 18 >= 100k msg/s;
* `put_batch` of 1,000 on the store, timed until `wait_dispatched` returns: goal >= 500k msg/s;
* the commit log's share (chapter 4): `CommitLog.put` and `CommitLog.put_batch` of 1,000 on the mix,
  no dispatch, against chapter 4's aims (200k and 1M msg/s).
The messages are the realistic mix (`_common.mix_messages`): a pool of distinct Message objects,
cycled when more puts are needed (every put encodes its message again).

`run()` keeps chapter 11's older figures (200-byte bodies, CommitLog only, no dispatch):
* single put vs sqlite3 (WAL, synchronous=NORMAL, 1,000 rows per transaction): target >= 2x;
* put_batch (1,000 messages per call) vs raw struct.pack_into of the same record bytes into a
  warm mmap (the copy alone, no encoding): target >= 0.5x.
Every message of a batch is a distinct Message object with its own properties dict, and is
encoded on every put (nothing is cached per object)."""
import mmap, shutil, sqlite3, struct, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import goal, load, mix_config, mix_messages, rate, report, repeats, scale, spread

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, encode_message

N = int(1_000_000 * scale())
BATCH = 1000
BODY = bytes(range(200))


def message(i=0):
    return Message("BenchTopic", BODY, queue_id=i % 4, properties={"TAGS": "t"})


_WARM = []


def warm_put_batch() -> None:
    "Load numba and the batch put's kernel once per process (numba's import is not a put; dispatch's load at first use)."
    if not _WARM:
        root = Path(tempfile.mkdtemp(prefix="mqstore-bench-warm-"))
        try:
            log = CommitLog(root, StoreConfig.small()).load()
            log.put_batch(mix_messages(3))
            log.shutdown()
        finally:
            shutil.rmtree(root, ignore_errors=True)
        _WARM.append(True)


def bench_single(root: Path, n: int = N) -> float:
    cfg = StoreConfig(commit_log_file_size=256 << 20, warm_mapped_file=True)
    log = CommitLog(root, cfg).load().start()
    msg = message()
    put = log.put
    put(msg)                    # untimed: the first put creates the first segment and touches its pages
    t0 = time.perf_counter()
    for _ in range(n):
        put(msg)
    dt = time.perf_counter() - t0
    log.shutdown()
    return rate(n, dt)


def bench_batch(root: Path, n: int = N) -> float:
    cfg = StoreConfig(commit_log_file_size=256 << 20, warm_mapped_file=True)
    log = CommitLog(root, cfg).load().start()
    batch = [message(i) for i in range(BATCH)]
    warm_put_batch()
    log.put_batch(batch[:1])    # untimed: the first put creates the first segment and touches its pages
    t0 = time.perf_counter()
    done = 0
    while done < n:
        log.put_batch(batch if n - done >= BATCH else batch[:n - done])
        done += BATCH
    dt = time.perf_counter() - t0
    log.shutdown()
    return rate(n, dt)


def bench_sqlite(root: Path, n: int = N, synchronous: str = "NORMAL") -> float:
    db = sqlite3.connect(root / f"bench-{synchronous}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, topic TEXT, queue_id INT, tags TEXT, body BLOB)")
    row = ("BenchTopic", 0, "t", BODY)
    db.execute("INSERT INTO m (topic, queue_id, tags, body) VALUES (?, ?, ?, ?)", row)   # untimed: the first insert creates the pages
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        db.execute("BEGIN")
        db.executemany("INSERT INTO m (topic, queue_id, tags, body) VALUES (?, ?, ?, ?)",
                       [row] * min(1000, n - start))
        db.execute("COMMIT")
    dt = time.perf_counter() - t0
    db.close()
    return rate(n, dt)


def bench_raw_mmap(root: Path, n: int = N) -> float:
    rec = bytes(encode_message(message()))
    size = len(rec) * n + 4096
    path = root / "raw"
    with open(path, "wb") as f:
        f.truncate(size)
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), size)
    mm[:] = bytes(size)                       # warm every page
    pack = struct.Struct(f">{len(rec)}s").pack_into
    k = len(rec)
    t0 = time.perf_counter()
    pos = 0
    for _ in range(n):
        pack(mm, pos, rec)
        pos += k
    dt = time.perf_counter() - t0
    mm.close()
    return rate(n, dt)


def run(n: int = N, quiet: bool = False) -> dict:
    "Every figure of this benchmark (messages/s), for chapter 11 too."
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-put-"))
    try:
        out = {"single put": bench_single(root / "single", n), "put_batch": bench_batch(root / "batch", n),
               "sqlite3 WAL NORMAL": bench_sqlite(root, n), "raw pack_into": bench_raw_mmap(root, n)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


POOL = min(N, 100_000)                    # distinct messages of the mix, cycled
CATCH_UP = []                             # store_put in batches: seconds from the last put to wait_dispatched


def store_put(root: Path, msgs, n: int, batch: int = 0) -> float:
    "Seconds for `n` puts (one by one, or `batch` at a time) on a new store, until wait_dispatched."
    from mqstore.store import MessageStore
    warm_put_batch()
    store = MessageStore.open(root, mix_config())
    try:
        if batch:
            put_batch = getattr(store, "put_batch", None)
            if put_batch is None:                         # MessageStore has no put_batch yet
                def put_batch(ms, log=store.commit_log, reput=store.reput):
                    r = log.put_batch(ms)
                    reput.notify()
                    return r
            chunks = [msgs[k:k + batch] for k in range(0, len(msgs), batch)]
            t0 = time.perf_counter()
            done = 0
            while done < n:
                for c in chunks:
                    c = c[:n - done]
                    if not c:
                        break
                    put_batch(c)
                    done += len(c)
        else:
            put = store.put
            t0 = time.perf_counter()
            for i in range(n):
                put(msgs[i % len(msgs)])
        t1 = time.perf_counter()
        assert store.wait_dispatched(3600)
        t2 = time.perf_counter()
        if batch:
            CATCH_UP.append(t2 - t1)          # how much of the time is dispatch catching up at the end
        return t2 - t0
    finally:
        store.close()


def _single_and_batch(timed, prefix: str, n: int, repeat: int | None) -> dict:
    "`timed(root, msgs, n[, BATCH])` one by one and in batches, `repeat` times each, on fresh roots."
    repeat = repeat or repeats()
    msgs = mix_messages(min(n, POOL))
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        single, batch = [], []
        for k in range(repeat):
            single.append(timed(root / f"single{k}", msgs, n))
            shutil.rmtree(root / f"single{k}")
            batch.append(timed(root / f"batch{k}", msgs, n, BATCH))
            shutil.rmtree(root / f"batch{k}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"messages": n, "put": single, "put_batch": batch}


def run_store(n: int = N, repeat: int | None = None) -> dict:
    "MessageStore.put and put_batch of 1,000 on the realistic mix, to wait_dispatched: seconds per run."
    del CATCH_UP[:]
    out = _single_and_batch(store_put, "mqstore-bench-put-store-", n, repeat)
    out["put_batch catch-up"] = list(CATCH_UP)
    return out


def log_put(root: Path, msgs, n: int, batch: int = 0) -> float:
    "Seconds for `n` puts of the mix on a CommitLog alone (one by one, or `batch` at a time), async flush."
    warm_put_batch()
    log = CommitLog(root, mix_config()).load().start()
    try:
        t0 = time.perf_counter()
        if batch:
            chunks, done = [msgs[k:k + batch] for k in range(0, len(msgs), batch)], 0
            while done < n:
                for c in chunks:
                    c = c[:n - done]
                    if not c:
                        break
                    log.put_batch(c)
                    done += len(c)
        else:
            put = log.put
            for i in range(n):
                put(msgs[i % len(msgs)])
        return time.perf_counter() - t0
    finally:
        log.shutdown()


def run_log(n: int = N, repeat: int | None = None) -> dict:
    "CommitLog.put and CommitLog.put_batch of 1,000 on the realistic mix (no dispatch): seconds per run."
    return _single_and_batch(log_put, "mqstore-bench-put-log-", n, repeat)


if __name__ == "__main__":
    import statistics
    m = run_store()
    print(f"# bench_put: {m['messages']:,} puts of the realistic mix through MessageStore, async flush, "
          f"dispatch to consume queues and index measured to wait_dispatched; scale {scale()}, load {load()}")
    note = "" if hasattr(__import__("mqstore.store").store.MessageStore, "put_batch") else \
        "MessageStore has no put_batch: the store's CommitLog.put_batch + reput notify"
    goal("bench_put", "MessageStore.put + dispatch, async flush (msg/s)",
         m["messages"] / statistics.median(m["put"]), "msg/s", "the goal's 100k msg/s", 100_000.0, 1.0, m["put"])
    goal("bench_put", "put_batch of 1,000 on the store + dispatch (msg/s)",
         m["messages"] / statistics.median(m["put_batch"]), "msg/s", "the goal's 500k msg/s", 500_000.0, 1.0,
         m["put_batch"], note)
    print(f"     of which dispatch catching up after the last put_batch (wait_dispatched): "
          f"min/median/max {spread(m['put_batch catch-up'])}")
    lg = run_log()
    goal("bench_put", "CommitLog.put, the mix, no dispatch (msg/s)", lg["messages"] / statistics.median(lg["put"]),
         "msg/s", "chapter 4's aim of 200k msg/s", 200_000.0, 1.0, lg["put"])
    goal("bench_put", "CommitLog.put_batch of 1,000, the mix, no dispatch (msg/s)",
         lg["messages"] / statistics.median(lg["put_batch"]), "msg/s", "chapter 4's aim of 1M msg/s", 1_000_000.0,
         1.0, lg["put_batch"])
    r = run()
    report(f"bench_put (chapter 11's figures): {N:,} puts, 200-byte bodies, CommitLog only, async flush", [
        ("single put (msg/s)", r["single put"], "sqlite3 WAL NORMAL, 1,000/txn", r["sqlite3 WAL NORMAL"],
         "target >= 2x"),
        ("put_batch of 1,000 (msg/s)", r["put_batch"], "raw struct.pack_into, warm mmap", r["raw pack_into"],
         "target >= 0.5x"),
        ("single put (msg/s)", r["single put"], "raw struct.pack_into, warm mmap", r["raw pack_into"], "ceiling"),
    ])
