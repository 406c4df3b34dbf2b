"mqstore.verify.check_store on a clean store and on damaged ones."
import itertools
from mqstore.config import StoreConfig
from mqstore.message import Message
from mqstore.store import MessageStore
from mqstore.verify import CrashReport, check_store

CONFIG = StoreConfig.small(commit_log_file_size=16 * 1024, flush_cq_thorough_interval_ms=600_000)


def _clock():
    c = itertools.count()
    return lambda: 1_700_000_000_000 + 10 * next(c)


def _store(root, n=40):
    clock = _clock()
    with MessageStore.open(root, CONFIG, clock=clock) as s:
        results = [s.put(Message("T", b"m%d" % i * 20, queue_id=i % 2, properties={"KEYS": f"k{i}"}))
                   for i in range(n)]
        s.wait_dispatched()
    return clock, results


def test_clean_store_is_ok(tmp_path):
    clock, results = _store(tmp_path / "s")
    r = check_store(tmp_path / "s", CONFIG, clock=clock)
    assert isinstance(r, CrashReport) and r.ok
    assert r.mode == "normal" and r.records == 40 and r.units == 40 and r.index_entries >= 40
    assert r.offsets == [x.commit_log_offset for x in results] and r.problems == r.gaps == []


def test_read_only_check_changes_nothing(tmp_path):
    clock, _ = _store(tmp_path / "s")
    before = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file() and p.name != "lock"}
    seen = []
    r = check_store(tmp_path / "s", CONFIG, read_only=True, progress=seen.append)
    assert r.ok and len(seen) == 40
    assert before == {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file() and p.name != "lock"}


def test_dropped_index_files_are_problems(tmp_path):
    clock, _ = _store(tmp_path / "s")
    for f in (tmp_path / "s" / "index").iterdir():
        f.unlink()
    r = check_store(tmp_path / "s", CONFIG, clock=clock, read_only=True)    # read-only: nothing rebuilt
    assert not r.ok and r.index_entries == 0
    assert sum("is not indexed" in p for p in r.problems) >= 40
    r = check_store(tmp_path / "s", CONFIG, clock=clock)       # a normal open rebuilds them (issue 25)
    assert r.ok and r.index_entries == 40


def test_flipped_byte_below_the_end_is_a_problem(tmp_path):
    clock, results = _store(tmp_path / "s")
    seg = tmp_path / "s" / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[results[3].commit_log_offset + results[3].size - 1] ^= 0xFF       # a property byte of record 3: its key
    seg.write_bytes(bytes(data))
    r = check_store(tmp_path / "s", CONFIG, clock=clock, read_only=True)
    assert not r.ok and r.problems and r.mode == "read-only"
