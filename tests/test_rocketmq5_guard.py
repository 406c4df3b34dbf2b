"""Never harm a store (issue 26): recognise everything under a store root before writing, refuse
what mqstore cannot maintain exactly as RocketMQ does, and change nothing when refusing.

Every store is a copy of one of RocketMQ 5.x's eight stores (book/data/rocketmq5, fixture vectors5)."""
import contextlib, hashlib, io, json, shutil
from pathlib import Path

import pytest

from mqstore.errors import MQStoreError

from mqstore.cli import main
from mqstore.config import StoreConfig
from mqstore.errors import UnmaintainedStructureError
from mqstore.modern import MAINTAINED, check_writable, recognise_store, skipped_line
from mqstore.store import MessageStore, repair_store

CASES = ("batch", "bcq", "comp", "crc", "delay", "delaycustom", "lmq", "txn")
BASE = {"commit log", "consume queues", "index files", "checkpoint", "lock file", "abort backup",
        "compaction checkpoint"}
EXPECTED = {"batch": set(), "bcq": {"batch consume queues"}, "comp": {"compressed records"},
            "crc": {"property CRC"}, "delay": {"schedule topics"}, "delaycustom": {"schedule topics"},
            "lmq": {"light message queues"}, "txn": {"transaction system topics"}}


def snapshot(root) -> dict:
    "Every entry under root (the lock file too): kind, size, mtime and sha256."
    out = {}
    for p in sorted(Path(root).rglob("*")):
        st = p.stat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (st.st_size if p.is_file() else -1, st.st_mtime_ns, digest)
    return out


def run(*argv):
    "mqstore ARGV in this process: (exit status, stdout, stderr)."
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def copy(vectors5, tmp_path):
    "copy(name) -> a fresh copy of one of the eight stores (never the store in place)."
    def make(name, as_name=None):
        return Path(shutil.copytree(vectors5 / name, tmp_path / (as_name or name)))
    return make


@pytest.mark.parametrize("case", CASES)
def test_recognise_names_what_each_store_holds(copy, case):
    root = copy(case)
    before = snapshot(root)
    names = {s["name"] for s in recognise_store(root)}
    assert names == BASE | EXPECTED[case]
    assert snapshot(root) == before                         # recognising reads only


def test_recognise_facts(copy):
    facts = {c: {s["name"]: s["facts"] for s in recognise_store(copy(c))} for c in ("comp", "crc", "bcq", "lmq", "txn")}
    assert facts["comp"]["compressed records"] == {"zlib (4.x, no type bits)": 1, "zlib": 1, "lz4": 1, "zstd": 1}
    assert facts["crc"]["property CRC"] == {"records": 8, "of": 8}
    assert facts["bcq"]["batch consume queues"] == {"topics": 1, "inner-batch records": 2}
    assert facts["lmq"]["light message queues"]["named"] == ["%LMQ%room1", "%LMQ%room2"]
    assert facts["txn"]["transaction system topics"]["RMQ_SYS_TRANS_HALF_TOPIC"] == 3


@pytest.mark.parametrize("case", CASES)
def test_inspect_lists_the_structures(copy, case):
    root = copy(case)
    rc, out, _ = run("inspect", root)
    assert rc == 0 and "structures:" in out
    for name in EXPECTED[case]:
        assert name in out
    rc, out, _ = run("inspect", root, "--json")
    d = json.loads(out)         # inspect reads no record before the last one a queue holds: what only
    unread = {"compressed records", "property CRC"}                 # the records show is "not looked for"
    assert {s["name"] for s in d["structures"]} == BASE | (EXPECTED[case] - unread)
    assert unread <= set(d["not_looked_for"])


def _break_bcq(root):
    "A consumequeue/ folder for the BatchCQ topic: the store RocketMQ refuses to load."
    shutil.copytree(root / "consumequeue" / "PlainTopic", root / "consumequeue" / "BCQTopic")


def _break_lmq(root):
    "A light queue with a queue id other than 0 (MixAll.LMQ_QUEUE_ID): nothing RocketMQ writes."
    (root / "consumequeue" / "%LMQ%room1" / "3").mkdir()


@pytest.mark.parametrize("case,structure,breaks", [("bcq", "batch consume queues", _break_bcq),
                                                    ("lmq", "light message queues", _break_lmq)])
def test_writing_refuses_batch_and_light_queues_it_cannot_keep(copy, case, structure, breaks):
    "Maintained since chapter 14's sections 4 and 5 (their own tests check the rebuilt files), unless the root is odd."
    assert MAINTAINED[structure] and check_writable(copy(case, case + "-as-written"), StoreConfig.small(), "repair")
    root = copy(case)
    breaks(root)
    before = snapshot(root)
    for argv in (("repair", root, "--yes"), ("recover", root, "--yes")):
        rc, out, err = run(*argv)
        assert rc == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "refused" in err
        assert snapshot(root) == before
    with pytest.raises(MQStoreError):
        MessageStore.open(root, StoreConfig.small())
    with pytest.raises(MQStoreError):
        repair_store(root, StoreConfig.small())
    assert snapshot(root) == before


def test_repair_refuses_a_bcq_whose_batch_folder_is_gone(copy):
    "The records alone (inner-batch sysFlag) still name the BatchCQ topic: no consumequeue/BCQTopic is written."
    root = copy("bcq")
    shutil.rmtree(root / "batchconsumequeue")
    before = snapshot(root)
    rc, _, err = run("repair", root, "--yes")
    assert rc == 2 and "batch consume queues" in err
    assert snapshot(root) == before and not (root / "consumequeue" / "BCQTopic").exists()


def test_crc_store_opens_for_writing_only_when_the_config_appends_the_property(copy):
    root = copy("crc")
    before = snapshot(root)
    with pytest.raises(UnmaintainedStructureError) as e:
        MessageStore.open(root, StoreConfig.small())
    assert e.value.structure == "property CRC" and snapshot(root) == before
    assert check_writable(root, StoreConfig.small(), "repair")
    assert check_writable(root, StoreConfig.small(), "recover")
    assert check_writable(root, StoreConfig.small(enabled_append_prop_crc=True), "open")


@pytest.mark.parametrize("case", ["batch", "comp", "delay", "delaycustom", "txn"])
def test_maintained_stores_pass_the_check(copy, case):
    for action in ("open", "recover", "repair", "rebuild"):
        assert check_writable(copy(case, f"{case}-{action}"), StoreConfig.small(), action)


def _rocksdb(root):
    for f in ("CURRENT", "MANIFEST-000001", "000001.sst"):
        (root / "consumequeue" / f).write_bytes(b"rocksdb")
    return "RocksDB consume queues"


def _timer(root):
    (root / "timerlog").mkdir()
    (root / "timerlog" / "00000000000000000000").write_bytes(b"\0" * 64)
    (root / "timerwheel").write_bytes(b"\0" * 64)
    return "timer files"


def _unknown(root):
    (root / "backup-2024").mkdir()
    return "unknown entries"


@pytest.mark.parametrize("damage", [_rocksdb, _timer, _unknown])
def test_odd_roots_refuse_every_writing_command(copy, damage):
    root = copy("batch")
    structure = damage(root)
    before = snapshot(root)
    for argv in (("repair", root, "--yes"), ("recover", root, "--yes"), ("rebuild", root, "--out", root)):
        rc, out, err = run(*argv)
        assert rc == 2, argv
        assert len(err.strip().splitlines()) == 1 and structure in err, (argv, err)
        assert snapshot(root) == before
    for opener in (lambda: MessageStore.open(root, StoreConfig.small()),
                   lambda: repair_store(root, StoreConfig.small())):
        with pytest.raises(UnmaintainedStructureError):
            opener()
        assert snapshot(root) == before
    # reading commands still work, and say in one line what they skipped
    rc, out, err = run("verify", root)
    assert rc == 0 and "no problems" in out
    assert structure in err and len([l for l in err.splitlines() if "skipped" in l]) == 1
    rc, out, err = run("inspect", root)
    assert rc == 0 and structure in out and "skipped" in err
    assert structure in skipped_line(root)
    assert snapshot(root) == before


def test_a_second_commit_log_folder_refuses(copy):
    root = copy("batch")
    second = root / "commitlog2"
    second.mkdir()
    config = StoreConfig.small(store_path_commit_log=f"{root / 'commitlog'},{second}")
    names = {s["name"] for s in recognise_store(root, config)}
    assert "commit log in several folders" in names
    before = snapshot(root)
    for action in ("open", "recover", "repair"):
        with pytest.raises(UnmaintainedStructureError) as e:
            check_writable(root, config, action)
        assert e.value.structure == "commit log in several folders"
    with pytest.raises(UnmaintainedStructureError):
        MessageStore.open(root, config)
    rc, _, err = run("repair", root, "--yes")                # without the configuration: an unknown folder
    assert rc == 2 and "commitlog2" in err
    assert snapshot(root) == before
    rc, out, err = run("verify", root)
    assert rc == 0 and "commitlog2" in err


def test_a_fresh_folder_still_opens_for_writing(tmp_path):
    for root in (tmp_path / "missing", tmp_path / "empty"):
        if root.name == "empty":
            root.mkdir()
        with MessageStore.open(root, StoreConfig.small()) as store:
            assert not store.read_only
        assert (root / "lock").exists()
        assert check_writable(root, StoreConfig.small(), "open")   # and what it wrote is maintained


def test_rebuild_elsewhere_is_not_a_write_into_the_store(copy, tmp_path):
    root = copy("bcq")
    before = snapshot(root)
    rc, out, _ = run("rebuild", root, "--out", tmp_path / "out", "--engine", "local")
    assert rc == 0 and snapshot(root) == before
