"""Light message queues and multi-dispatch (chapter 14) on the store RocketMQ 5.x wrote with
enableLmq and enableMultiDispatch (book/data/rocketmq5/lmq): served, verified, kept and rebuilt
byte for byte, and put again byte for byte."""
import json, shutil, zlib
from pathlib import Path
import pytest
from mqstore.cli import main, infer_config, open_store, tree_hashes
from mqstore.config import StoreConfig
from mqstore.store import MessageStore
from mqstore.modern import (light_claims, maintains_light_queues, java_hashmap_order, java_split,
                            refuse_light_rebuild, light_queues_in_use, PROPERTY_INNER_MULTI_QUEUE_OFFSET)
from mqstore.errors import LightQueueError

QUEUE_FILES = ("%LMQ%room1/0", "%LMQ%room2/0", "LmqParent/0", "LmqParent/1")
SEG = "00000000000000000000"


@pytest.fixture
def lmq(vectors5, tmp_path) -> Path:
    "A copy of the lmq store (never opened in place)."
    return Path(shutil.copytree(vectors5 / "lmq", tmp_path / "lmq"))


@pytest.fixture
def record(vectors5) -> list:
    return [json.loads(line) for line in (vectors5 / "lmq.jsonl").read_text().splitlines() if line]


def queue_bytes(root) -> dict:
    return {q: (Path(root) / "consumequeue" / q / SEG).read_bytes() for q in QUEUE_FILES
            if (Path(root) / "consumequeue" / q / SEG).exists()}


def java_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF          # UtilAll.crc32


def test_get_serves_every_queue_as_rocketmq(lmq, record):
    after = next(r for r in record if r["event"] == "after_write")
    crcs = {r["offset"]: r["rmq_decoded_body_crc"] for r in record if r["event"] == "put"}
    with open_store(lmq) as s:
        for name, q in after["queues"].items():
            topic, qid = name.rsplit("/", 1)
            res = s.get(topic, int(qid), q["min"], 32)
            assert res.status.name == "FOUND", name
            assert [f"{m.commit_log_offset}:{m.topic}/{m.queue_id}#{m.queue_offset}" for m in res.messages] == q["read"]
            assert all(java_crc(m.body) == crcs[m.commit_log_offset] for m in res.messages)


def test_query_serves_every_key(lmq, record):
    with open_store(lmq) as s:
        for r in (r for r in record if r["event"] == "put"):
            hits = s.query("LmqParent", r["rmq_decoded_props"]["KEYS"])
            assert [(h.commit_log_offset, java_crc(h.body)) for h in hits] == [(r["offset"], r["rmq_decoded_body_crc"])]


def test_cli_get_of_a_light_queue(lmq, capsys):
    assert main(["get", str(lmq), "%LMQ%room1", "0", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("FOUND: 3 message(s)") and "UNIT_MISMATCH" not in out


def test_verify_finds_no_problem_and_writes_nothing(lmq, capsys):
    before = tree_hashes(lmq)
    assert main(["verify", str(lmq)]) == 0
    assert "no problems" in capsys.readouterr().out
    assert tree_hashes(lmq) == before


@pytest.mark.parametrize("queue", QUEUE_FILES)
def test_verify_reports_a_missing_queue_file(lmq, queue, capsys):
    (lmq / "consumequeue" / queue / SEG).unlink()
    assert main(["verify", str(lmq)]) == 1
    assert queue.replace("/", "-") in capsys.readouterr().out


def test_verify_reports_a_wrong_light_unit(lmq, capsys):
    f = lmq / "consumequeue" / "%LMQ%room1" / "0" / SEG
    data = bytearray(f.read_bytes())
    data[20:28] = (673).to_bytes(8, "big")          # unit 1 points at the record of unit 2
    f.write_bytes(bytes(data))
    assert main(["verify", str(lmq)]) == 1
    assert "%LMQ%room1-0: unit 1 = (673, 330, 76) disagrees" in capsys.readouterr().out


def _damage(root: Path, how: str) -> None:
    if how == "light":
        (root / "consumequeue" / "%LMQ%room1" / "0" / SEG).unlink()
    elif how == "parent":
        (root / "consumequeue" / "LmqParent" / "0" / SEG).unlink()
    elif how == "index":
        for p in (root / "index").iterdir():
            p.unlink()
    elif how == "abort":
        (root / "abort").write_bytes(b"")


@pytest.mark.parametrize("how, command", [("light", "repair"), ("parent", "repair"), ("index", "repair"),
                                          ("abort", "repair"), ("abort", "recover")])
def test_damage_then_command_leaves_rocketmq_queue_files(lmq, vectors5, how, command, broker_conf5):
    _damage(lmq, how)
    assert main([command, str(lmq), "--yes", "--config", broker_conf5]) == 0
    assert queue_bytes(lmq) == queue_bytes(vectors5 / "lmq")
    assert main(["verify", str(lmq)]) == 0


@pytest.mark.parametrize("how", ["light", "parent"])
def test_recover_of_a_clean_store_with_a_file_gone_then_repair(lmq, vectors5, how):
    "As RocketMQ's recovery, `recover` of a cleanly shut store writes no queue it lost; no other queue changes; repair mends."
    _damage(lmq, how)
    gone = "%LMQ%room1/0" if how == "light" else "LmqParent/0"
    assert main(["recover", str(lmq), "--yes"]) == 0
    want, got = queue_bytes(vectors5 / "lmq"), queue_bytes(lmq)
    assert {q: b for q, b in got.items() if q != gone} == {q: b for q, b in want.items() if q != gone}
    assert main(["repair", str(lmq), "--yes"]) == 0
    assert queue_bytes(lmq) == want


def test_torn_last_record_keeps_every_light_unit(lmq, vectors5):
    "The last record (offset 1016, LmqParent-1 #1) is torn: only its unit goes; every light unit stays."
    seg = lmq / "commitlog" / SEG
    data = bytearray(seg.read_bytes())
    data[1016 + 4:1287] = bytes(1287 - 1016 - 4)          # only its size was written
    seg.write_bytes(bytes(data))
    (lmq / "abort").write_bytes(b"")
    assert main(["recover", str(lmq), "--yes"]) == 0
    want, got = queue_bytes(vectors5 / "lmq"), queue_bytes(lmq)
    for q in ("%LMQ%room1/0", "%LMQ%room2/0", "LmqParent/0"):
        assert got[q] == want[q], q
    assert got["LmqParent/1"][:20] == want["LmqParent/1"][:20] and got["LmqParent/1"][20:] == bytes(1260)


def test_crash_recovery_with_torn_light_tails_mends_them(lmq, vectors5):
    "Crash recovery keeps all light units: last units zeroed (a kill mid-write) are written again."
    for q, n in (("%LMQ%room1/0", 3), ("%LMQ%room2/0", 2)):
        f = lmq / "consumequeue" / q / SEG
        data = bytearray(f.read_bytes())
        data[(n - 1) * 20:n * 20] = bytes(20)
        f.write_bytes(bytes(data))
    (lmq / "abort").write_bytes(b"")
    with MessageStore.open(lmq, infer_config(lmq)) as s:
        assert s.cq_store.get_queue("%LMQ%room1", 0).max_offset_in_queue == 3
        assert s.cq_store.get_queue("%LMQ%room2", 0).max_offset_in_queue == 2
    assert queue_bytes(lmq) == queue_bytes(vectors5 / "lmq")


def test_put_again_writes_rocketmqs_bytes(lmq, vectors5, tmp_path):
    "RocketMQ's four messages, put again with enable_lmq at the same store times: the same log and queues."
    with open_store(lmq) as s:
        sent = [(m.store_timestamp, m.to_message(), m.store_host) for _, m in s.commit_log.messages(0)]
    for _, m, _ in sent:
        m.properties.pop(PROPERTY_INNER_MULTI_QUEUE_OFFSET, None)
    now = [0]
    cfg = infer_config(lmq).with_(enable_lmq=True, enable_multi_dispatch=True, store_host=sent[0][2])
    with MessageStore.open(tmp_path / "again", cfg, clock=lambda: now[0]) as s:
        for ts, m, _ in sent:
            now[0] = ts
            s.put(m)
    assert (tmp_path / "again" / "commitlog" / SEG).read_bytes() == (vectors5 / "lmq" / "commitlog" / SEG).read_bytes()
    assert queue_bytes(tmp_path / "again") == queue_bytes(vectors5 / "lmq")


def test_enable_lmq_without_multi_dispatch(lmq, vectors5, tmp_path, capsys):
    """enableLmq=true, enableMultiDispatch=false: RocketMQ fills INNER_MULTI_QUEUE_OFFSET but its dispatcher
    writes no light unit (MultiDispatchUtils.isNeedHandleMultiDispatch reads only enableMultiDispatch).
    mqstore's put does the same, and a writing command refuses a root with light queues, changing nothing."""
    with open_store(lmq) as s:
        sent = [(m.store_timestamp, m.to_message(), m.store_host) for _, m in s.commit_log.messages(0)]
    for _, m, _ in sent:
        m.properties.pop(PROPERTY_INNER_MULTI_QUEUE_OFFSET, None)
    cfg = infer_config(lmq).with_(enable_lmq=True, store_host=sent[0][2])
    assert not light_queues_in_use(lmq, cfg)
    assert light_queues_in_use(lmq, StoreConfig())                   # no configuration, a light folder: on
    assert light_queues_in_use(lmq, cfg.with_(enable_multi_dispatch=True))
    now = [0]
    with MessageStore.open(tmp_path / "only", cfg, clock=lambda: now[0]) as s:
        for ts, m, _ in sent:
            now[0] = ts
            s.put(m)
    assert (tmp_path / "only" / "commitlog" / SEG).read_bytes() == (vectors5 / "lmq" / "commitlog" / SEG).read_bytes()
    assert sorted(p.name for p in (tmp_path / "only" / "consumequeue").iterdir()) == ["LmqParent"]
    rocketmq = queue_bytes(vectors5 / "lmq")
    assert queue_bytes(tmp_path / "only") == {q: rocketmq[q] for q in ("LmqParent/0", "LmqParent/1")}
    assert maintains_light_queues(lmq, cfg).startswith("enableLmq without enableMultiDispatch")
    conf = tmp_path / "broker.conf"
    conf.write_text("enableLmq=true\nenableMultiDispatch=false\n")
    before = tree_hashes(lmq)
    assert main(["repair", str(lmq), "--yes", "--config", str(conf)]) != 0
    assert "enableLmq without enableMultiDispatch" in capsys.readouterr().err
    assert tree_hashes(lmq) == before


def test_put_continues_the_light_queues(lmq):
    from mqstore.message import Message
    cfg = infer_config(lmq).with_(enable_lmq=True, enable_multi_dispatch=True)
    with MessageStore.open(lmq, cfg, clock=lambda: 1795713962000) as s:
        s.put(Message("LmqParent", b"x", properties={"INNER_MULTI_DISPATCH": "%LMQ%room2,%LMQ%room3", "WAIT": "true"}))
        s.wait_dispatched()
        m = s.look(1287)
        assert m.properties[PROPERTY_INNER_MULTI_QUEUE_OFFSET] == "2,0" and "WAIT" not in m.properties
        assert [x.commit_log_offset for x in s.get("%LMQ%room2", 0, 2).messages] == [1287]
        assert [x.commit_log_offset for x in s.get("%LMQ%room3", 0, 0).messages] == [1287]
    assert main(["verify", str(lmq)]) == 0


def test_record_rules():
    assert java_split("0,") == ["0"] and java_split(",0") == ["", "0"] and java_split(",,") == []
    props = {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", PROPERTY_INNER_MULTI_QUEUE_OFFSET: "4,0,"}
    assert light_claims("T", 0, props) == [("%LMQ%a", 0, 4), ("%LMQ%b", 0, 0)]      # trailing "" dropped
    assert light_claims("%RETRY%g", 0, props) == [] and light_claims("rmq_sys_x", 0, props) == []
    assert light_claims("T", 0x4, props) == []                                      # prepared: no unit
    assert light_claims("T", 0, {**props, PROPERTY_INNER_MULTI_QUEUE_OFFSET: "4"}) == []   # lengths differ
    assert list(java_hashmap_order({"TAGS": "a", "KEYS": "b"})) == ["KEYS", "TAGS"]


def test_maintains_light_queues(lmq, tmp_path):
    assert maintains_light_queues(lmq, infer_config(lmq)) is None
    assert maintains_light_queues(lmq, StoreConfig(enable_multi_dispatch=True)) is not None
    bare = Path(shutil.copytree(lmq, tmp_path / "bare"))
    shutil.rmtree(bare / "consumequeue")
    reason = maintains_light_queues(bare, infer_config(bare))
    assert reason.startswith("the record at 0 asks for light queues")
    assert maintains_light_queues(bare, infer_config(bare).with_(enable_lmq=True, enable_multi_dispatch=True)) is None
    (lmq / "consumequeue" / "%LMQ%room1" / "3").mkdir()
    assert "consumequeue/%LMQ%room1/3" in maintains_light_queues(lmq, infer_config(lmq))


def test_plain_store_is_maintained_and_untouched(vectors5, tmp_path):
    batch = Path(shutil.copytree(vectors5 / "batch", tmp_path / "batch"))
    assert maintains_light_queues(batch, infer_config(batch)) is None


def test_spark_rebuild_refuses_light_queues(lmq, tmp_path):
    before = tree_hashes(lmq)
    with pytest.raises(LightQueueError, match="light message queues"):
        refuse_light_rebuild(lmq, infer_config(lmq))
    assert main(["rebuild", str(lmq), "--out", str(tmp_path / "out")]) == 2
    assert tree_hashes(lmq) == before and not (tmp_path / "out").exists()


def test_both_switches_set_to_false_on_a_root_with_light_queues(lmq, tmp_path, capsys):
    """A configuration that sets enableLmq and enableMultiDispatch to false is not one that sets neither:
    RocketMQ under it writes no light unit, so the light dispatcher stays off and a writing command refuses
    a root that holds light queues (a repair would not write them again), changing nothing."""
    off = infer_config(lmq).with_(enable_lmq=False, enable_multi_dispatch=False)
    assert infer_config(lmq).enable_lmq is None and infer_config(lmq).enable_multi_dispatch is None
    assert light_queues_in_use(lmq, infer_config(lmq)) and not light_queues_in_use(lmq, off)
    assert not light_queues_in_use(lmq, infer_config(lmq).with_(enable_multi_dispatch=False))
    assert maintains_light_queues(lmq, off).startswith("the configuration sets enableMultiDispatch off")
    conf = tmp_path / "broker.conf"
    for text in ("enableLmq=false\nenableMultiDispatch=false\n", "enableMultiDispatch=false\n"):
        conf.write_text(text)
        before = tree_hashes(lmq)
        assert main(["repair", str(lmq), "--yes", "--config", str(conf)]) != 0
        assert "the configuration sets enableMultiDispatch off" in capsys.readouterr().err
        assert tree_hashes(lmq) == before
    bare = Path(shutil.copytree(lmq, tmp_path / "bare"))       # no light folder: RocketMQ writes none, nor does mqstore
    for p in (bare / "consumequeue").glob("%LMQ%*"):
        shutil.rmtree(p)
    assert maintains_light_queues(bare, off) is None
    assert maintains_light_queues(bare, infer_config(bare)).startswith("the record at 0 asks for light queues")
