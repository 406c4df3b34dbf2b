"""Issue 15: read-only commands change nothing under the store root; a clean reopen does not index a
prepared tail record twice; `mqstore repair` rebuilds what verify finds wrong. Real files, no mocks."""
import fcntl, hashlib, itertools, json, os, shutil, subprocess, sys, textwrap
from pathlib import Path

import pytest

from mqstore.cli import main
from mqstore.config import StoreConfig
from mqstore.crash import leave_empty_segment, leave_empty_file, scan_log, tear_record
from mqstore.index import IndexService, build_key, index_key_hash
from mqstore.message import Message, TRANSACTION_PREPARED_TYPE
from mqstore.store import MessageStore

CFG = StoreConfig.small(commit_log_file_size=8192)
MQSTORE = str(Path(sys.executable).with_name("mqstore"))
T0 = 1_700_000_000_000


def clock():
    c = itertools.count()
    return lambda: T0 + 10 * next(c)


def write(root, n=300, start=0, ck=None, close=True):
    "n messages over 3 topics x 2 queues, each with one key; a clean close unless `close` is False."
    store = MessageStore.open(root, CFG, clock=ck or clock())
    for i in range(start, start + n):
        store.put(Message(f"T{i % 3}", f"body-{i};".encode() * 5, queue_id=i % 2,
                          properties={"KEYS": f"k{i}", "TAGS": "even" if i % 2 == 0 else "odd"}))
    store.wait_dispatched()
    if close:
        store.close()
    return store


def snapshot(root) -> dict:
    "Every entry under root (the root too): kind, size, mtime and, for files, the sha256 of the bytes."
    root = Path(root)
    out = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_mtime_ns, digest)
    return out


# -- stores in the states an operator meets ------------------------------------------------

def zero_byte_last_segment(root):
    write(root)
    leave_empty_segment(root, CFG)
    q = root / "consumequeue" / "T0" / "0"
    last = sorted(q.iterdir())[-1]
    leave_empty_file(q, f"{int(last.name) + CFG.consume_queue_units * 20:020d}")


def zeroed_index_header(root):
    write(root)
    first = sorted((root / "index").iterdir())[0]
    with open(first, "r+b") as f:
        f.write(bytes(40))                  # a header a power cut never let reach the disk


def torn_tail(root):
    store = write(root, close=False)
    store.halt()
    off, size = scan_log(root, CFG)[0][-1]
    tear_record(root, CFG, off, size)


def abort_file(root):
    store = write(root, close=False)
    store.halt()
    assert (root / "abort").exists()


STATES = {"zero-byte last segment": zero_byte_last_segment, "zeroed index header": zeroed_index_header,
          "torn tail": torn_tail, "abort file": abort_file}
READ_ONLY = {"inspect": ["inspect", "{root}"], "verify": ["verify", "{root}"],
             "get": ["get", "{root}", "T1", "0", "0", "-n", "5"], "query": ["query", "{root}", "T1", "k7"],
             "dump": ["dump", "{root}", "0"]}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    "One master copy per state (built once); each test works on a fresh copy of it."
    base = tmp_path_factory.mktemp("states")
    made = {}
    for name, make in STATES.items():
        root = base / name.replace(" ", "-")
        make(root)
        made[name] = root
    return made


@pytest.mark.parametrize("state", list(STATES))
def test_read_only_commands_change_nothing_under_the_root(state, damaged, tmp_path, capsys):
    root = tmp_path / "store"
    shutil.copytree(damaged[state], root)
    before = snapshot(root)
    for command, args in READ_ONLY.items():
        status = main([a.format(root=root) for a in args])
        out = capsys.readouterr()
        assert status in ((0, 1) if command == "verify" else (0,)), (command, out.err)
        assert snapshot(root) == before, (state, command)
    assert not (root / "lock").exists() or "lock" in {Path(k).name for k in before}


@pytest.mark.parametrize("state", list(STATES))
def test_read_only_open_keeps_zero_byte_files_and_headers(state, damaged, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(damaged[state], root)
    before = snapshot(root)
    with MessageStore.open(root, CFG, read_only=True) as store:
        assert store.commit_log.max_offset > 0
        assert all(not mf.writable for mf in store.commit_log.mfq.files)
        assert all(not f.mf.writable for f in store.index.files)
    assert snapshot(root) == before


def test_read_only_open_beside_a_broker_lock(tmp_path):
    "A running broker holds a POSIX record lock on byte 0 of `lock`; a read-only open neither waits nor takes it."
    root = tmp_path / "store"
    write(root)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys
        fd = os.open({str(root / 'lock')!r}, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        print("held", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(root)
        r = subprocess.run([MQSTORE, "inspect", str(root), "--json"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["commitlog"]["valid_end"] > 0
        assert snapshot(root) == before
        fd = os.open(root / "lock", os.O_RDWR)           # the holder still has it
        with pytest.raises(OSError):
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        os.close(fd)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


# -- the prepared record at the tail ---------------------------------------------------------

def raw_index_entries(root, key: str):
    "(file, phy offset) of every raw index entry whose hash is the key's, read without `query`."
    idx = IndexService(root / "index", CFG.index_slots, CFG.index_entries).load(read_only=True)
    h = index_key_hash(key)
    try:
        return [(f.name, int(e["phy_offset"])) for f in idx.files for e in f.entries() if e["key_hash"] == h]
    finally:
        idx.close()


def test_clean_reopen_does_not_index_a_prepared_tail_twice(tmp_path):
    root = tmp_path / "store"
    ck = clock()
    store = write(root, n=10, ck=ck, close=False)
    r = store.put(Message("EdgeTopic", b"half", sys_flag=TRANSACTION_PREPARED_TYPE, properties={"KEYS": "p1"}))
    store.wait_dispatched()
    store.close()
    key = build_key("EdgeTopic", "p1")
    assert [phy for _, phy in raw_index_entries(root, key)] == [r.commit_log_offset]
    for _ in range(3):                                   # every clean restart used to add one
        MessageStore.open(root, CFG, clock=ck).close()
    assert [phy for _, phy in raw_index_entries(root, key)] == [r.commit_log_offset]
    with MessageStore.open(root, CFG, clock=ck) as store:   # and the store goes on writing after it
        nxt = store.put(Message("EdgeTopic", b"after", properties={"KEYS": "a1"}))
        store.wait_dispatched()
        assert [m.commit_log_offset for m in store.query("EdgeTopic", "a1")] == [nxt.commit_log_offset]
        assert store.get("EdgeTopic", 0, 0, 5).messages[-1].commit_log_offset == nxt.commit_log_offset


def test_clean_reopen_still_rebuilds_queues_from_the_start_when_none_exist(tmp_path):
    root = tmp_path / "store"
    write(root, n=40)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    with MessageStore.open(root, CFG) as store:
        store.wait_dispatched()
        assert [m.commit_log_offset for m in store.get("T0", 0, 0, 1).messages] == [0]
        assert len(store.query("T0", "k0")) == 1


# -- repair ----------------------------------------------------------------------------------

def delete_cq_file(root):
    files = sorted((root / "consumequeue" / "T1" / "0").iterdir())
    assert len(files) >= 2                               # the first of several: the queue looks expired
    files[0].unlink()


def delete_cq_folder(root):
    shutil.rmtree(root / "consumequeue" / "T2" / "1")


def garbage_cq_file(root):
    p = sorted((root / "consumequeue" / "T2" / "1").iterdir())[0]
    p.write_bytes(os.urandom(p.stat().st_size))


def delete_index_file(root):
    files = sorted((root / "index").iterdir())
    assert len(files) >= 2
    files[0].unlink()


def hole_in_old_segment(root):
    segs = sorted((root / "commitlog").iterdir())
    assert len(segs) >= 5                                # out of reach of the last-three-segments walk
    with open(segs[1], "r+b") as f:
        f.seek(3000)
        f.write(bytes(500))


def zero_first_index_header(root):
    with open(sorted((root / "index").iterdir())[0], "r+b") as f:
        f.write(bytes(40))


DAMAGE = {"deleted consume-queue file": delete_cq_file, "deleted queue folder": delete_cq_folder, "garbage consume-queue file": garbage_cq_file,
          "deleted index file": delete_index_file, "hole in an older segment": hole_in_old_segment,
          "zeroed index header": zero_first_index_header, "torn tail after a crash": None}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    root = tmp_path_factory.mktemp("healthy") / "store"
    write(root, n=450)                                   # two consume-queue files per queue
    return root


def log_records(root):
    "Every message a walk of the commit log reaches, read back through a read-only open."
    offsets = [off for off, _ in scan_log(root, CFG)[0]]
    with MessageStore.open(root, CFG, read_only=True) as store:
        return [store.look(off) for off in offsets]


def assert_everything_reachable(root):
    records = log_records(root)
    assert records
    with MessageStore.open(root, CFG, read_only=True) as store:
        for m in records:
            got = store.get(m.topic, m.queue_id, m.queue_offset, 1).messages
            assert [x.commit_log_offset for x in got] == [m.commit_log_offset], m.commit_log_offset
            assert m.commit_log_offset in [x.commit_log_offset for x in store.query(m.topic, m.keys[0])]
    return records


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_repair_ends_with_a_clean_verify(damage, healthy, tmp_path, capsys):
    root = tmp_path / "store"
    if DAMAGE[damage] is None:                           # a crash with a torn last record
        torn_tail(root)
    else:
        shutil.copytree(healthy, root)
        DAMAGE[damage](root)
    before_walk = {off for off, _ in scan_log(root, CFG)[0]}
    assert main(["verify", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"mqstore repair {root}" in out                # verify names the remedy
    assert main(["repair", str(root), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "verify: no problems" in out
    assert main(["verify", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["problems"] == []
    assert not (root / "abort").exists()
    records = assert_everything_reachable(root)
    kept, healthy_offsets = {m.commit_log_offset for m in records}, {off for off, _ in scan_log(healthy, CFG)[0]}
    if damage == "hole in an older segment":             # the rest of the damaged segment is out of reach
        seg = CFG.commit_log_file_size
        torn = max(off for off in healthy_offsets if off <= seg + 3000)
        assert kept == {off for off in healthy_offsets if not torn <= off < 2 * seg}
        assert len(report["gaps"]) == len(healthy_offsets - kept)
    elif damage == "torn tail after a crash":
        assert len(kept) == 299 and kept == before_walk
    else:
        assert kept == healthy_offsets and report["gaps"] == []


def test_repair_asks_first_and_changes_nothing_when_told_no(healthy, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(healthy, root)
    delete_cq_file(root)
    before = snapshot(root)
    r = subprocess.run([MQSTORE, "repair", str(root)], input="n\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not confirmed" in r.stderr and "[y/N]" in r.stdout
    assert snapshot(root) == before
    r = subprocess.run([MQSTORE, "repair", str(root)], input="y\n", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert subprocess.run([MQSTORE, "verify", str(root)], capture_output=True, timeout=120).returncode == 0


def test_repair_of_a_healthy_store_writes_nothing(healthy, tmp_path, capsys):
    root = tmp_path / "store"
    shutil.copytree(healthy, root)
    before = snapshot(root)
    assert main(["repair", str(root), "--yes"]) == 0
    assert "nothing to repair" in capsys.readouterr().out
    assert snapshot(root) == before


def test_an_unreadable_index_file_names_repair(healthy, tmp_path, capsys):
    root = tmp_path / "store"
    shutil.copytree(healthy, root)
    with open(sorted((root / "index").iterdir())[0], "r+b") as f:
        f.seek(36)
        f.write((10**6).to_bytes(4, "big"))              # an indexCount no file of this size can hold
    assert main(["inspect", str(root)]) == 2
    assert f"mqstore repair {root}" in capsys.readouterr().err
    assert main(["repair", str(root), "--yes"]) == 0
    capsys.readouterr()
    assert main(["verify", str(root)]) == 0
    assert_everything_reachable(root)
