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


# ---------------------------------------------------------------------------------------------
# The realistic mix of issue 18, shared by every benchmark: bodies 0-2 KB, 1 in 6 IPv6 hosts,
# 0-3 keys, a tag, a UNIQ_KEY and 0-2 user properties, 8 topics x 4 queues.
import random, statistics, zlib

GIB = 1 << 30
MIX_TOPICS = ["orders", "payments", "audit-log", "clicks", "inventory", "shipping", "user-events", "metrics"]
MIX_TAGS = ["TagA", "TagB", "TagC", "created", "paid"]
MEAN_RECORD = 1222         # mean encoded record of the mix (body 1,024 B on average), measured


def mix_host(rng: random.Random, v6: bool):
    "An (ip, port) pair: IPv6 when `v6`."
    if v6:
        return (f"2001:db8:{rng.randrange(1 << 16):x}::{rng.randrange(1, 1 << 16):x}", rng.randrange(1024, 65536))
    return (f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}", rng.randrange(1024, 65536))


def mix_messages(n: int, seed: int = 1, first: int = 0) -> list:
    "`n` distinct Message objects of the realistic mix (each with its own properties dict), numbered from `first`."
    from mqstore.message import Message
    rng = random.Random(seed + first)
    pool = rng.randbytes(1 << 16)
    hosts = [mix_host(rng, k % 6 == 0) for k in range(600)]            # 1 in 6 IPv6
    out = []
    for i in range(first, first + n):
        blen = rng.randrange(2049)
        at = rng.randrange(len(pool) - 2048)
        props = {"TAGS": rng.choice(MIX_TAGS), "UNIQ_KEY": f"0A0000{i:026X}"}
        k = rng.randrange(4)
        if k:
            props["KEYS"] = " ".join(f"key-{rng.randrange(1 << 30)}" for _ in range(k))
        for j in range(rng.randrange(3)):
            props[("region", "trace", "tenant")[j]] = f"v{rng.randrange(1000)}"
        out.append(Message(MIX_TOPICS[i % 8], pool[at:at + blen], queue_id=(i // 8) % 4, properties=props,
                           born_timestamp=1_700_000_000_000 + i, born_host=hosts[i % 600]))
    return out


def mix_stream(n: int, chunk: int = 20_000):
    "The same `n` messages as mix_messages(n) in chunks, generated as they are consumed (bounded memory)."
    for first in range(0, n, chunk):
        yield from mix_messages(min(chunk, n - first), first=first)


def mix_count(nbytes: int) -> int:
    "How many messages of the mix fill about `nbytes` of commit log."
    return max(200, int(nbytes / MEAN_RECORD))


def segment_size() -> int:
    "The commit-log segment of the benchmarks: 1 GiB at scale 1.0, whole MiB, at least 4 MiB."
    return max(4 << 20, int(GIB * scale()) >> 20 << 20)


def write_mix_segments(folder: Path, messages, segment: int, seed: int = 2) -> int:
    """Encode `messages` straight into commit-log segments (1 in 6 with an IPv6 store host too, so
    every host layout occurs), as a store would place them; returns the end offset."""
    from mqstore.message import encode_blank, encode_record, patch_record
    rng = random.Random(seed)
    stores = [mix_host(rng, k % 6 == 0) for k in range(60)]
    folder.mkdir(parents=True, exist_ok=True)
    seg, pos, base, next_q = bytearray(segment), 0, 0, {}
    for i, m in enumerate(messages):
        q = next_q.get((m.topic, m.queue_id), 0)
        next_q[(m.topic, m.queue_id)] = q + 1
        rec = bytearray(encode_record(m.to_stored(store_host=stores[i % 60])))
        if pos + len(rec) + 8 > segment:
            seg[pos:pos + 8] = encode_blank(segment - pos)
            (folder / f"{base:020d}").write_bytes(seg)
            seg, pos, base = bytearray(segment), 0, base + segment
        patch_record(rec, 0, queue_offset=q, commit_log_offset=base + pos,
                     store_timestamp=1_700_000_000_000 + i)
        seg[pos:pos + len(rec)] = rec
        pos += len(rec)
    (folder / f"{base:020d}").write_bytes(seg)
    return base + pos


def body_crc_seconds(folder: Path, repeat: int) -> tuple[list, int, int]:
    """The limit of issue 18: `zlib.crc32` of every body separately over the records of the
    segments in `folder` (boundaries found beforehand, not timed). Returns (times, records, bytes)."""
    import mmap
    from mqstore.fast.records import scan_segment
    maps, spans, records, nbytes = [], [], 0, 0
    for p in sorted(folder.iterdir()):
        with open(p, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        h, end, _ = scan_segment(mm)
        maps.append(mm)
        spans.append((h["body_pos"].tolist(), (h["body_pos"] + h["body_len"]).tolist()))
        records, nbytes = records + len(h), nbytes + end
        del h
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for mm, (a, b) in zip(maps, spans):
            with memoryview(mm) as mv:
                for _ in map(zlib.crc32, map(mv.__getitem__, map(slice, a, b))):
                    pass
        times.append(time.perf_counter() - t0)
    for mm in maps:
        mm.close()
    return times, records, nbytes


def repeats(default: int = 3) -> int:
    "MQSTORE_BENCH_REPEAT: repetitions of each timed run (default 3)."
    return max(1, int(os.environ.get("MQSTORE_BENCH_REPEAT", default)))


def spread(times) -> str:
    "min / median / max of repeated timings, in seconds."
    return f"{min(times):.3f}/{statistics.median(times):.3f}/{max(times):.3f} s"


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def goal(bench: str, name: str, value: float, unit: str, limit_name: str, limit: float, target: float,
         times, extra: str = "") -> float:
    """Print one goal of issue 18 as measured: value / limit = ratio against its target, with the
    repetitions and their spread; append it to the results file. Returns the ratio."""
    ratio = value / limit if limit else float("nan")
    verdict = "met" if ratio >= target else "NOT met"
    print(f"GOAL {name}: >= {target:g}x of {limit_name}\n"
          f"     measured {value:,.3f} {unit} / limit {limit:,.3f} {unit} = {ratio:.3f}x ({verdict}); "
          f"{len(times)} runs, min/median/max {spread(times)}; load {load()}" + (f"; {extra}" if extra else ""))
    RESULTS.parent.mkdir(exist_ok=True)
    new = not RESULTS.exists()
    with RESULTS.open("a", newline="") as f:
        out = csv.writer(f)
        if new:
            out.writerow(["time", "bench", "figure", "value", "baseline", "baseline_value", "ratio", "unit", "machine"])
        out.writerow([time.strftime("%Y-%m-%dT%H:%M:%S"), bench, f"GOAL {name}", f"{value:.3f}", limit_name,
                      f"{limit:.3f}", f"{ratio:.4f}", f"{unit}; target >= {target:g}x; runs {spread(times)}",
                      machine()])
    return ratio


def mix_config(**changes):
    "The store configuration of the benchmarks: RocketMQ's defaults, segments of `segment_size()`."
    from mqstore.config import StoreConfig
    return StoreConfig(commit_log_file_size=segment_size(), **changes)


def build_store(root: Path, n: int, config, chunk: int = 20_000, batch: int = 1000) -> int:
    """A store of `n` messages of the mix written through MessageStore (the commit log's put_batch,
    the reput thread dispatching), then closed cleanly; returns the commit log's end offset."""
    from mqstore.store import MessageStore
    store = MessageStore.open(root, config)
    try:
        for first in range(0, n, chunk):
            msgs = mix_messages(min(chunk, n - first), first=first)     # = mix_stream(n), chunk by chunk
            for k in range(0, len(msgs), batch):
                assert store.commit_log.put_batch(msgs[k:k + batch]).status == "PUT_OK"
                store.reput.notify()
        assert store.wait_dispatched(3600)
        return store.commit_log.max_offset
    finally:
        store.close()


def child_env() -> dict:
    """The environment of a measured child process: as ours, but allowed to write bytecode. A user's
    installed package has its .pyc files; with PYTHONDONTWRITEBYTECODE set, every start would compile
    every module again and the command's start-up would be measured as it never runs."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
