"""mqstore.scrub (chapter 13): the streaming verifier reports what chapter 7's check_store reports,
on random and damaged stores, window sizes small enough to cut records; its memory does not grow
with the store."""
import itertools, os, random, shutil, subprocess, sys, tracemalloc
from pathlib import Path

import pytest

from mqstore.config import StoreConfig
from mqstore.message import Message, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from mqstore.scrub import scrub_store
from mqstore.store import MessageStore
from mqstore.verify import check_store

CFG = StoreConfig.small(commit_log_file_size=16 * 1024, flush_cq_thorough_interval_ms=600_000)
T0 = 1_700_000_000_000


def clock():
    c = itertools.count()
    return lambda: T0 + 10 * next(c)


def write(root, n=120, seed=0, cfg=CFG):
    "n messages of random sizes over 3 topics x 3 queues, 0-3 keys, tags, some UNIQ_KEYs."
    rng = random.Random(seed)
    ck = clock()
    with MessageStore.open(root, cfg, clock=ck) as s:
        for i in range(n):
            props = {"TAGS": rng.choice(["a", "b", "c"])}
            keys = " ".join(f"k{i}-{j}" for j in range(rng.randrange(4)))
            if keys:
                props["KEYS"] = keys
            if rng.random() < 0.3:
                props["UNIQ_KEY"] = f"u{i:08X}"
            s.put(Message(f"T{rng.randrange(3)}", bytes(rng.randrange(256) for _ in range(rng.randrange(400))),
                          queue_id=rng.randrange(3), properties=props))
        s.wait_dispatched()
    return ck


def norm(r):
    return (r.mode, r.records, r.log_end, r.units, r.index_entries, sorted(r.problems), sorted(r.gaps),
            sorted(r.warnings))


def same(root, cfg=CFG, windows=(1 << 20, 3000, 700)):
    "check_store and scrub_store (with several windows) agree; return check_store's report."
    want = check_store(root, cfg, read_only=True)
    for w in windows:
        got = scrub_store(root, cfg, window=w)
        assert norm(got) == norm(want), w
    return want


def segment(root, n=0):
    return sorted((Path(root) / "commitlog").iterdir())[n]


def flip(path, at, mask=0x10):
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("seed", range(4))
def test_clean_random_stores_agree(tmp_path, seed):
    write(tmp_path / "s", n=60 + 40 * seed, seed=seed)
    r = same(tmp_path / "s")
    assert r.ok and r.records == 60 + 40 * seed


def test_flipped_body_byte_in_an_early_segment(tmp_path):
    write(tmp_path / "s", n=200)
    flip(segment(tmp_path / "s", 0), 2000)
    r = same(tmp_path / "s")
    assert not r.ok


def test_flipped_byte_in_the_last_segment(tmp_path):
    write(tmp_path / "s", n=200)
    seg = segment(tmp_path / "s", -1)
    flip(seg, 300)
    r = same(tmp_path / "s")
    assert not r.ok


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate", "wrong", "filler"])
def test_damaged_queue_files(tmp_path, damage):
    write(tmp_path / "s", n=200)
    q = tmp_path / "s" / "consumequeue" / "T1" / "1"
    f = sorted(q.iterdir())[0]
    data = bytearray(f.read_bytes())
    if damage == "delete":
        f.unlink()
    elif damage == "garbage":
        data[40:200] = random.Random(1).randbytes(160)
        f.write_bytes(bytes(data))
    elif damage == "truncate":
        f.write_bytes(bytes(data[:100]))
    elif damage == "wrong":                      # unit 3 points at the record of unit 7
        data[60:72] = data[140:152]
        f.write_bytes(bytes(data))
    else:                                        # unit 5 a filler
        data[100:120] = (0).to_bytes(8, "big") + (0x7FFFFFFF).to_bytes(4, "big") + bytes(8)
        f.write_bytes(bytes(data))
    try:
        r = same(tmp_path / "s")
    except Exception as e:                       # both must fail alike
        with pytest.raises(type(e)):
            scrub_store(tmp_path / "s", CFG)
        return
    assert not r.ok


@pytest.mark.parametrize("damage", ["delete", "zero-header", "entry"])
def test_damaged_index_files(tmp_path, damage):
    write(tmp_path / "s", n=200)
    files = sorted((tmp_path / "s" / "index").iterdir())
    if damage == "delete":
        files[0].unlink()
    elif damage == "zero-header":
        data = bytearray(files[0].read_bytes())
        data[:40] = bytes(40)
        files[0].write_bytes(bytes(data))
    else:                                        # entry 5's hash
        flip(files[0], 40 + 64 * 4 + 5 * 20 + 2)
    try:
        r = same(tmp_path / "s")
    except Exception as e:
        with pytest.raises(type(e)):
            scrub_store(tmp_path / "s", CFG)
        return
    assert not r.ok


def test_torn_tail_after_a_crash(tmp_path):
    ck = write(tmp_path / "s", n=150)
    seg = segment(tmp_path / "s", -1)
    data = bytearray(seg.read_bytes())
    end = len(data.rstrip(b"\0"))
    data[end - 50:end] = bytes(50)
    seg.write_bytes(bytes(data))
    same(tmp_path / "s")


def test_transactions_and_missing_queue(tmp_path):
    ck = clock()
    with MessageStore.open(tmp_path / "s", CFG, clock=ck) as s:
        for i in range(80):
            flag = [0, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE][i % 3]
            s.put(Message(f"T{i % 2}", b"x" * (i * 7 % 300), queue_id=i % 2,
                          properties={"KEYS": f"k{i} k{i}", "TAGS": "t"}, sys_flag=flag))
        s.wait_dispatched()
    assert same(tmp_path / "s").ok
    shutil.rmtree(tmp_path / "s" / "consumequeue" / "T0")
    assert not same(tmp_path / "s").ok


def test_accel_off_agrees(tmp_path):
    "The fallback path (no compiled kernels) in a child process: same report as check_store."
    write(tmp_path / "s", n=200)
    flip(segment(tmp_path / "s", 1), 500)
    code = ("import sys; from tests.test_scrub import same, CFG; same(sys.argv[1]); print('same')")
    env = dict(os.environ, MQSTORE_ACCEL="0")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], env=env, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0 and "same" in out.stdout, out.stderr[-2000:]


def peak_python_memory(root, cfg):
    tracemalloc.start()
    scrub_store(root, cfg, window=64 * 1024)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_memory_does_not_grow_with_the_store(tmp_path):
    cfg = StoreConfig.small(commit_log_file_size=64 * 1024, consume_queue_units=4096, index_entries=4096,
                            index_slots=512)
    write(tmp_path / "a", n=400, cfg=cfg)
    write(tmp_path / "b", n=1600, cfg=cfg)
    scrub_store(tmp_path / "a", cfg)             # the compiled kernels load once: not the store's memory
    small, big = peak_python_memory(tmp_path / "a", cfg), peak_python_memory(tmp_path / "b", cfg)
    assert big < 1.5 * small + 256 * 1024, (small, big)


@pytest.mark.parametrize("claims", [((10, 5), (100, 3)), ((10, 5), (20, 5), (110, 5)), ((100, 130),)])
def test_records_claiming_taken_queue_offsets(tmp_path, claims):
    "Records whose header claims a queue offset another record has (in the same window or far apart)."
    from mqstore.crash import scan_log
    root = tmp_path / "s"
    with MessageStore.open(root, CFG, clock=clock()) as s:
        for i in range(120):
            s.put(Message("T", b"x" * 200, queue_id=0, properties={"KEYS": f"k{i}"}))
        s.wait_dispatched()
    records, _ = scan_log(root, CFG)
    for victim, qoff in claims:
        off = records[victim][0]
        seg = segment(root, off // CFG.commit_log_file_size)
        data = bytearray(seg.read_bytes())
        at = off % CFG.commit_log_file_size + 20              # the header's queue offset
        data[at:at + 8] = qoff.to_bytes(8, "big")
        seg.write_bytes(bytes(data))
    r = same(root)
    assert not r.ok


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("window", [97, 700, 3000, 1 << 20])
def test_windows_scanned_ahead_are_the_windows_in_turn(tmp_path, seed, window):
    "segment_windows_ahead yields the windows and the verdict of segment_windows, damaged or not."
    from mqstore.scrub import segment_windows, segment_windows_ahead, log_segments
    write(tmp_path, seed=seed)
    if seed:
        flip(segment(tmp_path, seed), 900 + 37 * seed)           # a bad CRC or length in segment `seed`
    with MessageStore.open(tmp_path, CFG, read_only=True) as s:
        for mf, start, end in log_segments(s.commit_log):
            def run(walk):
                out, it = [], walk(mf, start, end, window)
                try:
                    while True:
                        w = next(it)
                        out.append((w.offs.tolist(), w.headers.tobytes(), w.base, bytes(w.buf[:16])))
                except StopIteration as stop:
                    return out, stop.value
            assert run(segment_windows_ahead) == run(segment_windows)
            it = segment_windows_ahead(mf, start, end, 700)      # stopped after one window: nothing held
            next(it, None)
            it.close()
    # the store closed above, so no view of a window scanned ahead was left exported
