"""Batch consume queues (RocketMQ 5.x's BatchConsumeQueue) on the `bcq` store RocketMQ wrote:
read, verified, rebuilt byte for byte into batchconsumequeue/, never into consumequeue/ (chapter 14)."""
import json, re, shutil, zlib
from pathlib import Path
import numpy as np
import pytest
from mqstore import MessageStore, StoreConfig, Message
from mqstore.cli import main, open_store, tree_hashes
from mqstore.modern import (BCQ_UNIT_DTYPE, BatchQueues, encode_batch_unit, maintains_batch_consume_queues,
                            batch_topics)
from mqstore.store import repair_store
from mqstore.vectors import ROCKETMQ5_CASES

BCQ_FILE = Path("batchconsumequeue/BCQTopic/0/00000000000000000000")
PLAIN_FILE = Path("consumequeue/PlainTopic/0/00000000000000000000")


@pytest.fixture
def bcq(vectors5, tmp_path):
    "A copy of the bcq store (never the store in place) and its record."
    root = shutil.copytree(vectors5 / "bcq", tmp_path / "bcq")
    rec = [json.loads(line) for line in (vectors5 / "bcq.jsonl").read_text().splitlines() if line]
    return root, rec


def _original(vectors5, rel: Path) -> bytes:
    return (vectors5 / "bcq" / rel).read_bytes()


def _served(rec) -> dict:
    "queue -> [(physical offset, queue offset, inner num)] that RocketMQ's getMessage served."
    out = {}
    for name, q in next(r for r in rec if r["event"] == "after_write")["queues"].items():
        for line in q["read"]:
            m = re.fullmatch(r"(\d+):(.+)/(\d+)#(\d+)(?: innerNum=(\d+))?", line)
            out.setdefault(name, []).append((int(m[1]), int(m[4]), int(m[5] or 1)))
    return out


def test_get_serves_what_rocketmq_served(bcq):
    root, rec = bcq
    crcs = {r["offset"]: r["rmq_decoded_body_crc"] for r in rec if r["event"] == "put"}
    with open_store(root) as store:
        for name, want in _served(rec).items():
            topic, qid = name.split("/")
            res = store.get(topic, int(qid), 0, 32)
            got = [(m.commit_log_offset, m.queue_offset, int(m.properties.get("INNER_NUM", 1))) for m in res.messages]
            assert res.status.name == "FOUND" and got == want
            assert all(zlib.crc32(m.body) & 0x7FFFFFFF == crcs[m.commit_log_offset] for m in res.messages)
        assert store.get("BCQTopic", 0, 0).next_begin_offset == 8


def test_an_offset_inside_a_batch_serves_the_whole_batch(bcq):
    root, _ = bcq
    with open_store(root) as store:
        for asked, first, nxt in ((1, 0, 4), (3, 0, 4), (5, 979, 7), (6, 979, 7), (7, 1765, 8)):
            res = store.get("BCQTopic", 0, asked, 1)
            assert [m.commit_log_offset for m in res.messages] == [first] and res.next_begin_offset == nxt
        assert store.get("BCQTopic", 0, 8).status.name == "OFFSET_OVERFLOW_ONE"
        assert [m.commit_log_offset for m in store.get("BCQTopic", 0, 0, 5).messages] == [0]   # 4 + 3 > 5
        assert store.get("BCQTopic", 0, 0, tags="S").messages[0].commit_log_offset == 1765


def test_command_get_query_inspect_verify(bcq, capsys):
    root, _ = bcq
    before = tree_hashes(root)
    assert main(["get", str(root), "BCQTopic", "0", "0"]) == 0
    assert capsys.readouterr().out.startswith("FOUND: 3 message(s), next offset 8")
    assert main(["query", str(root), "BCQTopic", "single1"]) == 0
    assert "1 message(s)" in capsys.readouterr().out
    assert main(["inspect", str(root)]) == 0
    out = capsys.readouterr().out
    assert "batch consume queues: 1" in out and re.search(r"BCQTopic\s+0\s+offsets \[0, 8\), 3 units", out)
    assert main(["verify", str(root)]) == 0
    assert "no problems" in capsys.readouterr().out
    assert tree_hashes(root) == before


def _zero_unit(root, k):
    with open(root / BCQ_FILE, "r+b") as f:
        f.seek(46 * k)
        f.write(bytes(46))


def _tear_last_record(root):
    with open(root / "commitlog" / "00000000000000000000", "r+b") as f:
        f.seek(2040 + 176)
        f.write(bytes(100))


DAMAGE = {
    "unit zeroed": (lambda r: _zero_unit(r, 1), "repair"),
    "unit wrong": (lambda r: (r / BCQ_FILE).write_bytes(
        (r / BCQ_FILE).read_bytes()[:46 + 36] + b"\x00\x09" + (r / BCQ_FILE).read_bytes()[46 + 38:]), "repair"),
    "index deleted": (lambda r: [p.unlink() for p in (r / "index").iterdir()], "repair"),
    "abort": (lambda r: (r / "abort").touch(), "recover"),
    "abort, repair": (lambda r: (r / "abort").touch(), "repair"),
    "torn last record": (lambda r: (_tear_last_record(r), (r / "abort").touch()), "recover"),
    "plain queue deleted": (lambda r: (r / PLAIN_FILE).unlink(), "repair"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_then_repair_or_recover_rebuilds_byte_identical(bcq, vectors5, damage, capsys, broker_conf5):
    root, _ = bcq
    hurt, command = DAMAGE[damage]
    hurt(root)
    if damage.startswith("unit"):
        assert main(["verify", str(root)]) == 1
        assert "(batch)" in capsys.readouterr().out
    assert main([command, str(root), "--yes", "--config", broker_conf5]) == 0
    assert (root / BCQ_FILE).read_bytes() == _original(vectors5, BCQ_FILE)
    assert not (root / "consumequeue" / "BCQTopic").exists()
    if damage not in ("torn last record", "plain queue deleted"):
        # the tear removed the plain topic's only record; without a consume-queue file left, chapter 13's
        # infer_config cannot know its size (300,000 units by default): not this test's business
        assert (root / PLAIN_FILE).read_bytes() == _original(vectors5, PLAIN_FILE)
    assert main(["verify", str(root)]) == 0


@pytest.mark.parametrize("command", ["repair", "recover"])
def test_a_deleted_batch_file_is_refused_without_its_size(bcq, command, capsys):
    root, _ = bcq
    (root / BCQ_FILE).unlink()
    (root / "abort").touch()
    before = tree_hashes(root)
    assert main([command, str(root), "--yes"]) == 2
    err = capsys.readouterr().err
    assert "refused, nothing changed" in err and "mapperFileSizeBatchConsumeQueue" in err and err.count("\n") == 1
    assert tree_hashes(root) == before


def test_a_deleted_batch_file_is_rebuilt_when_the_size_is_given(bcq, vectors5):
    root, _ = bcq
    (root / BCQ_FILE).unlink()
    cfg = StoreConfig.small(batch_consume_queue_units=64)
    repair_store(root, cfg)
    assert (root / BCQ_FILE).read_bytes() == _original(vectors5, BCQ_FILE)
    (root / BCQ_FILE).unlink()
    MessageStore.open(root, cfg).close()             # a clean open catches the queue up too
    assert (root / BCQ_FILE).read_bytes() == _original(vectors5, BCQ_FILE)


@pytest.mark.parametrize("case", ["consumequeue folder", "no batchconsumequeue", "no 5.x folder", "stray folder",
                                  "odd size"])
def test_writing_commands_refuse_what_they_cannot_keep(bcq, case, capsys):
    root, _ = bcq
    if case == "consumequeue folder":
        (root / "consumequeue" / "BCQTopic" / "0").mkdir(parents=True)
        (root / "consumequeue" / "BCQTopic" / "0" / "00000000000000000000").write_bytes(bytes(1280))
    elif case == "no batchconsumequeue":
        shutil.rmtree(root / "batchconsumequeue")
    elif case == "no 5.x folder":                   # nor compaction/: the records alone say inner batches
        shutil.rmtree(root / "batchconsumequeue")
        shutil.rmtree(root / "compaction")
    elif case == "stray folder":
        (root / "batchconsumequeue" / "BCQTopic" / "x").mkdir()
    else:
        with open(root / BCQ_FILE, "ab") as f:
            f.write(b"\0")
    before = tree_hashes(root)
    for command in ("repair", "recover"):
        assert main([command, str(root), "--yes"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "refused, nothing changed" in err or (case == "odd size" and "does not match" in err)
    assert tree_hashes(root) == before
    with pytest.raises(Exception, match="refused"):
        MessageStore.open(root, StoreConfig.small())
    assert tree_hashes(root) == before
    if case == "consumequeue folder":
        assert main(["verify", str(root)]) == 1
        assert "RocketMQ refuses the store" in capsys.readouterr().out


def test_put_to_a_batch_topic_continues_its_numbering(bcq):
    root, _ = bcq
    with MessageStore.open(root, StoreConfig.small(), clock=lambda: 1795713960000) as store:
        r = store.put(Message(topic="BCQTopic", body=b"after", queue_id=0))
        store.wait_dispatched()
        assert r.queue_offset == 8
    units = np.frombuffer((root / BCQ_FILE).read_bytes(), BCQ_UNIT_DTYPE)
    assert units[3].tobytes() == encode_batch_unit(r.commit_log_offset, r.size, 0, r.store_timestamp, 8, 1)
    assert not (root / "consumequeue" / "BCQTopic").exists()
    assert main(["verify", str(root)]) == 0


@pytest.mark.parametrize("case", ROCKETMQ5_CASES)
def test_no_store_of_the_eight_is_refused_for_its_batch_queues(vectors5, tmp_path, case):
    root = shutil.copytree(vectors5 / case, tmp_path / case)
    assert maintains_batch_consume_queues(root, StoreConfig.small()) is None
    assert batch_topics(root) == (["BCQTopic"] if case == "bcq" else [])


def test_the_plugin_is_added_once_and_read_only_writes_nothing(bcq):
    root, _ = bcq
    before = tree_hashes(root)
    with MessageStore.open(root, StoreConfig.small(), read_only=True) as store:
        assert sum(isinstance(p, BatchQueues) for p in store.plugins) == 1
        assert store.cq_store.elsewhere == {"BCQTopic"}
    assert tree_hashes(root) == before


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_rebuild_into_out_writes_batch_queues_byte_identical(bcq, vectors5, tmp_path, engine):
    from mqstore import pipeline
    root, _ = bcq
    out = tmp_path / "out"
    report = pipeline.rebuild(root, out, engine=engine, config=StoreConfig.small())
    assert (out / BCQ_FILE).read_bytes() == _original(vectors5, BCQ_FILE)
    assert (out / PLAIN_FILE).read_bytes() == _original(vectors5, PLAIN_FILE)
    assert not (out / "consumequeue" / "BCQTopic").exists()
    assert report["batch_queues"] == {"BCQTopic-0": 3} and report["queues"] == {"PlainTopic-0": 1}
