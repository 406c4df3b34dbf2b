"The mqstore command on a store written by the tests and on the store assembled from RocketMQ's records."
import hashlib, itertools, json, shutil, subprocess, sys
from pathlib import Path

import pytest

from mqstore.cli import main, infer_config, tree_hashes
from mqstore.config import StoreConfig
from mqstore.message import Message
from mqstore.realstore import assemble_vector_store
from mqstore.store import MessageStore

MQSTORE = str(Path(sys.executable).with_name("mqstore"))


def run(*args, cwd=None):
    return subprocess.run([MQSTORE, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def real_store(vectors, tmp_path_factory):
    return assemble_vector_store(vectors, tmp_path_factory.mktemp("real") / "store")


@pytest.fixture
def our_store(tmp_path):
    c = itertools.count()
    root = tmp_path / "ours"
    cfg = StoreConfig.small(commit_log_file_size=8192)
    with MessageStore.open(root, cfg, clock=lambda: 1_700_000_000_000 + 10 * next(c)) as store:
        for i in range(60):
            store.put(Message(f"T{i % 3}", f"body-{i}".encode() * 10, queue_id=i % 2,
                              properties={"KEYS": f"k{i}", "TAGS": "even" if i % 2 == 0 else "odd"}))
    return root


def test_infer_config(real_store, our_store):
    c = infer_config(real_store)
    assert (c.commit_log_file_size, c.consume_queue_units, c.index_slots, c.index_entries) == (1 << 30, 300_000, 64, 256)
    c = infer_config(our_store)
    assert (c.commit_log_file_size, c.consume_queue_units, c.index_slots) == (8192, 64, 64)


def test_inspect_real_store_json(real_store):
    r = run("inspect", real_store, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["commitlog"]["valid_end"] == 13574 and d["clean_shutdown"]
    assert {(q["topic"], q["queue_id"]): q["max_offset"] for q in d["queues"]}[("TopicTest", 0)] == 24
    assert d["index"][0]["entries"] == 38


def test_dump_get_query_real_store(real_store, vectors):
    msgs = [json.loads(l) for l in (vectors / "messages.jsonl").read_text().splitlines()]
    r = run("dump", real_store, 4629, "--json")
    facts = json.loads(r.stdout)
    m4 = next(m for m in msgs if m["commitLogOffset"] == 4629)
    assert facts["topic"] == m4["topic"] and facts["body_crc"] == m4["bodyCRC"] and facts["total_size"] == m4["storeSize"]
    r = run("get", real_store, "TopicTest", 3, 0, "-n", 10, "--json")
    got = [m["commit_log_offset"] for m in json.loads(r.stdout)["messages"]]
    want = sorted(m["commitLogOffset"] for m in msgs
                  if m["topic"] == "TopicTest" and m["queueId"] == 3 and m.get("consumeQueueEntry"))
    assert got == want
    r = run("query", real_store, "TopicTest", "order-1001", "--json")
    assert [m["commit_log_offset"] for m in json.loads(r.stdout)["messages"]] == [4629]
    r = run("dump", real_store, 4629)
    assert "PROPERTIES" in r.stdout and "00001215" in r.stdout


def test_read_only_commands_change_nothing(real_store, our_store):
    for root in (real_store, our_store):
        before = tree_hashes(root)
        for args in (["inspect", root], ["dump", root, 0], ["get", root, "TopicTest", 0, 0], ["query", root, "T0", "k0"]):
            assert run(*args).returncode == 0, args
        assert tree_hashes(root) == before
        assert not (Path(root) / "abort").exists() or root == our_store


def test_get_and_query_our_store(our_store):
    r = run("get", our_store, "T0", 0, 0, "-n", 100, "--tags", "even", "--json")
    d = json.loads(r.stdout)
    assert d["status"] == "FOUND" and len(d["messages"]) == 10 and all(m["tags"] == "even" for m in d["messages"])
    r = run("query", our_store, "T1", "k1", "--json")
    assert len(json.loads(r.stdout)["messages"]) == 1


def test_recover_needs_yes_and_then_writes(our_store):
    (our_store / "abort").write_bytes(b"")           # pretend the last run crashed
    r = run("recover", our_store)
    assert r.returncode == 2 and "--yes" in r.stderr
    r = run("recover", our_store, "--yes")
    assert r.returncode == 0, r.stderr
    assert "abnormal" in r.stdout and not (our_store / "abort").exists()


def default_levels(tmp_path) -> str:
    "A broker.conf with RocketMQ's default delay levels: the vector store holds a delayed message (chapter 14)."
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel = 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h\n")
    return str(conf)


def test_rebuild_local_equals_the_brokers_queues(real_store, tmp_path):
    r = run("rebuild", real_store, "--out", tmp_path / "out", "--engine", "local", "--config", default_levels(tmp_path))
    assert r.returncode == 0, r.stderr
    for f in (real_store / "consumequeue").rglob("*"):
        if f.is_file():
            assert (tmp_path / "out" / "consumequeue" / f.relative_to(real_store / "consumequeue")).read_bytes() \
                == f.read_bytes()


@pytest.mark.parametrize("args, fragment", [
    (["inspect", "{tmp}/missing"], "no such folder"),
    (["inspect", "{tmp}/afile"], "not a store"),
    (["dump", "{real}", "4630"], "no message starts"),
    (["dump", "{real}", "99999999999"], "outside the commit log"),
    (["get", "{real}", "TopicTest", "0", "-1"], "queue offset"),
    (["query", "{real}", "TopicTest", "k", "--begin", "9", "--end", "1"], "after"),
    (["dump", "{real}", "not-a-number"], "invalid int"),
    (["frobnicate", "{real}"], "invalid choice"),
    (["get", "{real}"], "required"),
])
def test_bad_input_is_one_line_and_status_2(real_store, tmp_path, args, fragment):
    (tmp_path / "afile").write_text("x")
    args = [a.format(tmp=tmp_path, real=real_store) for a in args]
    r = run(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert fragment in r.stderr and "Traceback" not in r.stderr
    assert len([l for l in r.stderr.splitlines() if "error" in l]) == 1


def test_every_command_has_help():
    for cmd in ("inspect", "dump", "verify", "recover", "rebuild", "audit", "get", "query"):
        r = run(cmd, "--help")
        assert r.returncode == 0 and "usage: mqstore " + cmd in r.stdout


@pytest.mark.spark
def test_rebuild_and_audit_with_spark(real_store, tmp_path):
    "The Spark engine through the command line: same queue files as the broker's, a clean audit."
    r = run("rebuild", real_store, "--out", tmp_path / "spark", "--engine", "spark", "--master", "local[2]", "--json",
            "--config", default_levels(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["engine"] == "spark"
    for f in (real_store / "consumequeue").rglob("*"):
        if f.is_file():
            assert (tmp_path / "spark" / "consumequeue" / f.relative_to(real_store / "consumequeue")).read_bytes() \
                == f.read_bytes()
    r = run("audit", real_store, "--engine", "spark", "--json")
    report = json.loads(r.stdout)
    assert r.returncode in (0, 1) and report["engine"] == "spark" and report["messages"] == 42
    assert not report["findings"]["crc_failures"] and not report["findings"]["offset_mismatches"]


def test_verify_clean_and_damaged(our_store, tmp_path):
    r = run("verify", our_store, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["ok"] and json.loads(r.stdout)["records"] == 60
    # a flipped body byte in the first record: the CRC walk stops there
    bad = tmp_path / "bad"
    shutil.copytree(our_store, bad)
    with open(bad / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    before = tree_hashes(bad)
    r = run("verify", bad, "--json")
    assert r.returncode == 1
    said = " ".join(" ".join(map(str, p.values())) for p in json.loads(r.stdout)["problems"])
    assert "CORRUPT" in said and ("below its end" in said or "bad record" in said)
    assert tree_hashes(bad) == before
    # a consume-queue unit pointing at the wrong place
    bad2 = tmp_path / "bad2"
    shutil.copytree(our_store, bad2)
    cq = next((bad2 / "consumequeue" / "T1" / "0").iterdir())
    data = bytearray(cq.read_bytes())
    data[20:28] = (12345).to_bytes(8, "big")
    cq.write_bytes(bytes(data))
    r = run("verify", bad2)
    assert r.returncode == 1 and "consistency" in r.stdout


def test_verify_the_real_store(real_store):
    r = run("verify", real_store)
    assert r.returncode == 0 and "no problems" in r.stdout


# ---------------------------------------------------------------- issue 25, items 6-8

HOLD = """import sys, time
from mqstore.config import StoreConfig
from mqstore.store import MessageStore
store = MessageStore.open(sys.argv[1], StoreConfig.small(commit_log_file_size=8192))
print("open", flush=True)
time.sleep(120)
"""


def test_inspect_tells_a_running_store_from_a_crashed_one(our_store):
    "The abort file exists during every run: `inspect` says 'in use' (and by whom) while the lock is held."
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(our_store)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        assert (our_store / "abort").exists()
        before = tree_hashes(our_store)
        r = run("inspect", our_store)
        assert r.returncode == 0, r.stderr
        first = r.stdout.splitlines()[0]
        assert f"in use: its lock is held by process {holder.pid}" in first and "crashed" not in first
        d = json.loads(run("inspect", our_store, "--json").stdout)
        assert d["held_by"] == holder.pid and not d["clean_shutdown"]
        assert tree_hashes(our_store) == before                  # asking changed nothing
    finally:
        holder.kill()
        holder.wait()
    r = run("inspect", our_store)                                 # killed: abort left, nobody holds the lock
    assert "abort file present and nobody holds the lock: last run crashed" in r.stdout.splitlines()[0]
    assert json.loads(run("inspect", our_store, "--json").stdout)["held_by"] is None


def test_inspect_never_creates_the_lock_file(real_store, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(real_store, root)
    (root / "lock").unlink(missing_ok=True)
    r = run("inspect", root)
    assert r.returncode == 0 and "(clean shutdown)" in r.stdout.splitlines()[0]
    assert not (root / "lock").exists()


def test_python_dash_m_runs_the_command(real_store, tmp_path):
    r = subprocess.run([sys.executable, "-m", "mqstore", "inspect", str(real_store), "--json"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["commitlog"]["valid_end"] == 13574
    r = subprocess.run([sys.executable, "-m", "mqstore", "inspect", str(tmp_path / "nothing")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    r = subprocess.run([sys.executable, "-m", "mqstore", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("usage: mqstore")


WITHOUT = """import sys
for name in ("pyarrow", "pandas", "pyspark"):        # as on an install without the [spark] extra
    sys.modules[name] = None
from mqstore.cli import main
status = main(sys.argv[1:])
assert not {"pyarrow", "pandas", "pyspark"} & {m.split(".")[0] for m, v in sys.modules.items() if v is not None}
sys.exit(status)
"""


def test_audit_without_arrow(our_store, real_store):
    "The in-process audit needs numpy only; the Spark engine names the extra that brings what it needs."
    for root in (our_store, real_store):
        with_all = run("audit", root, "--json")
        r = subprocess.run([sys.executable, "-c", WITHOUT, "audit", str(root), "--json"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == with_all.returncode == 0, r.stderr
        assert r.stderr == "" and json.loads(r.stdout) == json.loads(with_all.stdout)
    r = subprocess.run([sys.executable, "-c", WITHOUT, "audit", str(our_store), "--engine", "spark"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["mqstore audit: error: this needs pyarrow, which is not installed: "
                                     "pip install 'mqstore[spark]'"]
