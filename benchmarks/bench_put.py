"""Puts of 200-byte bodies with async flush, one thread, against baselines run in the same process.

Figures (each a ratio in one run):
* single put vs sqlite3 (WAL, synchronous=NORMAL, 1,000 rows per transaction): target >= 2x;
* put_batch (1,000 messages per call) vs raw struct.pack_into of the same record bytes into a
  warm mmap (the copy alone, no encoding): target >= 0.5x.
Every message of a batch is a distinct Message object with its own properties dict, and is
encoded on every put (nothing is cached per object)."""
import mmap, shutil, sqlite3, struct, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import rate, report, scale

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, encode_message

N = int(1_000_000 * scale())
BATCH = 1000
BODY = bytes(range(200))


def message(i=0):
    return Message("BenchTopic", BODY, queue_id=i % 4, properties={"TAGS": "t"})


def bench_single(root: Path, n: int = N) -> float:
    cfg = StoreConfig(commit_log_file_size=256 << 20, warm_mapped_file=True)
    log = CommitLog(root, cfg).load().start()
    msg = message()
    put = log.put
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


if __name__ == "__main__":
    r = run()
    report(f"bench_put: {N:,} puts, 200-byte bodies, async flush, one thread", [
        ("single put (msg/s)", r["single put"], "sqlite3 WAL NORMAL, 1,000/txn", r["sqlite3 WAL NORMAL"],
         "target >= 2x"),
        ("put_batch of 1,000 (msg/s)", r["put_batch"], "raw struct.pack_into, warm mmap", r["raw pack_into"],
         "target >= 0.5x"),
        ("single put (msg/s)", r["single put"], "raw struct.pack_into, warm mmap", r["raw pack_into"], "ceiling"),
    ])
