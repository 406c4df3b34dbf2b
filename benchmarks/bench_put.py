"""Single puts of 200-byte bodies (async flush, one thread) against two baselines run in
the same process: sqlite3 (WAL, synchronous=NORMAL, 1,000 rows per transaction) and raw
struct.pack_into of the same bytes into a warm mmap."""
import mmap, os, shutil, sqlite3, struct, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import rate, report, scale

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, encode_message

N = int(1_000_000 * scale())
BODY = bytes(range(200))


def bench_mqstore(root: Path) -> float:
    cfg = StoreConfig(commit_log_file_size=256 << 20, warm_mapped_file=True)
    log = CommitLog(root, cfg).load().start()
    msg = Message("BenchTopic", BODY, queue_id=0, properties={"TAGS": "t"})
    put = log.put
    t0 = time.perf_counter()
    for _ in range(N):
        put(msg)
    dt = time.perf_counter() - t0
    log.shutdown()
    return rate(N, dt)


def bench_sqlite(root: Path) -> float:
    db = sqlite3.connect(root / "bench.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, topic TEXT, queue_id INT, tags TEXT, body BLOB)")
    row = ("BenchTopic", 0, "t", BODY)
    t0 = time.perf_counter()
    for start in range(0, N, 1000):
        db.execute("BEGIN")
        db.executemany("INSERT INTO m (topic, queue_id, tags, body) VALUES (?, ?, ?, ?)",
                       [row] * min(1000, N - start))
        db.execute("COMMIT")
    dt = time.perf_counter() - t0
    db.close()
    return rate(N, dt)


def bench_raw_mmap(root: Path) -> float:
    rec = bytes(encode_message(Message("BenchTopic", BODY, properties={"TAGS": "t"})))
    size = len(rec) * N + 4096
    path = root / "raw"
    with open(path, "wb") as f:
        f.truncate(size)
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), size)
    mm[:] = bytes(size)                       # warm every page
    fmt = struct.Struct(f">{len(rec)}s")
    pack = fmt.pack_into
    n = len(rec)
    t0 = time.perf_counter()
    pos = 0
    for _ in range(N):
        pack(mm, pos, rec)
        pos += n
    dt = time.perf_counter() - t0
    mm.close()
    return rate(N, dt)


if __name__ == "__main__":
    root = Path(tempfile.mkdtemp(prefix="mqstore-bench-put-"))
    try:
        ours = bench_mqstore(root / "store")
        lite = bench_sqlite(root)
        raw = bench_raw_mmap(root)
    finally:
        shutil.rmtree(root)
    report(f"bench_put: {N:,} puts, 200-byte bodies, async flush, one thread", [
        ("mqstore put (msg/s)", ours, "sqlite3 WAL NORMAL, 1,000/txn", lite, "target >= 2x"),
        ("mqstore put (msg/s)", ours, "raw struct.pack_into, warm mmap", raw, "ceiling"),
    ])
