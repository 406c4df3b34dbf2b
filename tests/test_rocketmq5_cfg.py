"""Issue 26, the broker's configuration, delayed messages and 5.x transactions: broker.conf read as
Java's Properties and MessageStoreConfig read it; schedule units judged and rebuilt only under known
delay levels; the audit's half/op design. Every store is a copy of one RocketMQ 5.x wrote."""
import hashlib, json, shutil, zlib
from pathlib import Path
import pytest
from mqstore.cli import main, tree_hashes
from mqstore.config import StoreConfig
from mqstore.errors import BrokerConfError, ConfigError, DelayLevelsUnknownError
from mqstore.modern import parse_broker_conf, read_broker_conf, config_for_store, logical_lines, split_line, BROKER_KEYS
from mqstore.store import MessageStore

CUSTOM = "2s 4s 8s 16s 32s"
DEFAULT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
SCHEDULE_CQ = "consumequeue/SCHEDULE_TOPIC_XXXX/2/00000000000000000000"


def copy(vectors5, name, tmp_path) -> Path:
    return Path(shutil.copytree(vectors5 / name, tmp_path / name))


def conf(tmp_path, text, name="broker.conf") -> str:
    p = tmp_path / name
    p.write_text(text, encoding="latin-1")
    return str(p)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def records(vectors5, name):
    return [json.loads(x) for x in (vectors5 / f"{name}.jsonl").read_text().splitlines() if x]


# --- broker.conf syntax (java.util.Properties.load) --------------------------------------------------

@pytest.mark.parametrize("line, kv", [
    ("a=b", ("a", "b")), ("a = b", ("a", "b")), ("a:b", ("a", "b")), ("a b", ("a", "b")),
    ("a = = b", ("a", "= b")), ("a==b", ("a", "=b")), ("alone", ("alone", "")),
    (r"key\ with\ blanks=x", ("key with blanks", "x")), (r"k=\t\u0041\=", ("k", "\tA=")),
    ("a=b  ", ("a", "b  ")), (r"a\:b=c", ("a:b", "c")),
])
def test_split_line_as_properties(line, kv):
    assert split_line(line) == kv


def test_logical_lines_comments_blanks_and_continuations():
    text = "# c\n! c\n\n  a = 1 \\\n    2\\\\\nb=x\\\n\n c=\\\\\\\n  d\r\ne=f\r"
    assert list(logical_lines(text)) == ["a = 1 2\\\\", "b=x", "c=\\\\d", "e=f"]
    assert list(logical_lines("a=b\\\n# not a comment")) == ["a=b# not a comment"]


def test_malformed_unicode_escape_is_an_error():
    with pytest.raises(BrokerConfError, match="uxxxx"):
        parse_broker_conf(r"a=\u00G1")


def test_every_mapped_key(tmp_path):
    values = {"mappedFileSizeCommitLog": "65536", "mappedFileSizeConsumeQueue": "1290", "maxHashSlotNum": "64",
              "maxIndexNum": "256", "maxMessageSize": "16384", "flushDiskType": " SYNC_FLUSH ",
              "flushIntervalCommitLog": "20", "flushCommitLogLeastPages": "2",
              "flushCommitLogThoroughInterval": "200", "syncFlushTimeout": "3000", "flushIntervalConsumeQueue": "30",
              "flushConsumeQueueLeastPages": "3", "flushConsumeQueueThoroughInterval": "300",
              "checkCRCOnRecover": "FALSE", "messageIndexEnable": "false", "messageIndexSafe": "True",
              "maxMsgsNumBatch": "32", "fileReservedTime": "48", "warmMapedFileEnable": "true",
              "messageDelayLevel": CUSTOM, "enabledAppendPropCRC": "true", "forceVerifyPropCRC": "true",
              "enableLmq": "true", "enableMultiDispatch": "true", "storePathCommitLog": "/data/cl",
              "mapperFileSizeBatchConsumeQueue": "2944"}
    assert set(values) == set(BROKER_KEYS)
    text = "\n".join(f"{k}={v}" for k, v in values.items()) + "\nstorePathRootDir=/data/store\nbrokerName=b\n"
    c = read_broker_conf(conf(tmp_path, text))
    cfg = c.config
    assert (cfg.commit_log_file_size, cfg.consume_queue_units, cfg.index_slots, cfg.index_entries) == (65536, 65, 64, 256)
    assert cfg.batch_consume_queue_units == 64                       # 2944 bytes of 46-byte units
    assert (cfg.max_message_size, cfg.flush_disk_type, cfg.flush_interval_ms, cfg.flush_least_pages) == (16384, "SYNC_FLUSH", 20, 2)
    assert (cfg.flush_thorough_interval_ms, cfg.sync_flush_timeout_ms, cfg.flush_cq_interval_ms) == (200, 3000, 30)
    assert (cfg.flush_cq_least_pages, cfg.flush_cq_thorough_interval_ms, cfg.check_crc_on_recover) == (3, 300, False)
    assert (cfg.message_index_enable, cfg.message_index_safe, cfg.max_msgs_num_batch) == (False, True, 32)
    assert (cfg.file_reserved_hours, cfg.warm_mapped_file, cfg.message_delay_level) == (48, True, CUSTOM)
    assert cfg.enabled_append_prop_crc and cfg.force_verify_prop_crc and cfg.enable_lmq and cfg.enable_multi_dispatch
    assert cfg.store_path_commit_log == "/data/cl" and c.root == "/data/store"
    assert c.unknown == {"brokerName": "b"} and set(c.given) == set(values)


def test_defaults_kept_and_last_line_wins():
    c = parse_broker_conf("maxMessageSize=1024\nmaxMessageSize=2048\n", base=StoreConfig.small())
    assert c.config.max_message_size == 2048 and c.config.commit_log_file_size == 64 * 1024
    assert parse_broker_conf("").config == StoreConfig()


@pytest.mark.parametrize("text, named", [
    ("enableLmq=yes", "enableLmq"), ("maxMessageSize=4M", "maxMessageSize"),
    ("maxMessageSize=2147483648", "maxMessageSize"), ("syncFlushTimeout=1.5", "syncFlushTimeout"),
    ("messageDelayLevel=1x 2s", "message_delay_level"), ("flushDiskType=FAST", "flush_disk_type"),
    ("mappedFileSizeCommitLog=100", "commit_log_file_size"), ("maxMessageSize=", "maxMessageSize"),
])
def test_bad_values_are_named_config_errors(text, named):
    with pytest.raises(BrokerConfError, match=named) as e:
        parse_broker_conf(text)
    assert isinstance(e.value, ConfigError)


def test_store_config_delay_levels_checked():
    assert StoreConfig(message_delay_level=None).message_delay_level is None
    assert StoreConfig.small().message_delay_level == DEFAULT
    with pytest.raises(ConfigError, match="message_delay_level"):
        StoreConfig(message_delay_level="5 s")


def test_sizes_the_files_contradict(vectors5, tmp_path):
    root = copy(vectors5, "delay", tmp_path)
    cfg = config_for_store(root, parse_broker_conf("messageDelayLevel=" + CUSTOM))
    assert (cfg.commit_log_file_size, cfg.consume_queue_units, cfg.message_delay_level) == (65536, 64, CUSTOM)
    for text, said in [("mappedFileSizeCommitLog=1073741824", "mappedFileSizeCommitLog"),
                       ("mappedFileSizeConsumeQueue=6000000", "mappedFileSizeConsumeQueue"),
                       ("maxHashSlotNum=5000000", "maxHashSlotNum")]:
        with pytest.raises(ConfigError, match=said):
            config_for_store(root, parse_broker_conf(text))
        code, _, err = run_main(root, "inspect", "--config", conf(tmp_path, text))
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1


def run_main(root, *args):
    import io, contextlib
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([args[0], str(root), *map(str, args[1:])])
    return code, "", err.getvalue()


# --- delayed messages ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, right, wrong", [("delay", DEFAULT, CUSTOM), ("delaycustom", CUSTOM, DEFAULT)])
def test_verify_judges_schedule_units_only_with_levels(vectors5, tmp_path, capsys, name, right, wrong):
    root = copy(vectors5, name, tmp_path)
    before = tree_hashes(root)
    code, out, _ = run(capsys, "verify", root, "--config", conf(tmp_path, f"messageDelayLevel={right}\n"))
    assert code == 0 and "no problems" in out and "not judged" not in out
    code, out, _ = run(capsys, "verify", root, "--config", conf(tmp_path, f"messageDelayLevel={wrong}\n", "w.conf"))
    assert code == 1 and "SCHEDULE_TOPIC_XXXX-2: unit 0" in out and "1 problem" in out
    code, out, _ = run(capsys, "verify", root)
    assert code == 0 and "no problems" in out
    assert "1 schedule unit(s) not judged: the delay levels are the broker's messageDelayLevel; give --config" in out
    assert tree_hashes(root) == before


@pytest.mark.parametrize("name, levels", [("delay", DEFAULT), ("delaycustom", CUSTOM)])
def test_repair_rewrites_the_schedule_queue_only_with_levels(vectors5, tmp_path, capsys, name, levels):
    root = copy(vectors5, name, tmp_path)
    (root / SCHEDULE_CQ).unlink()
    before = tree_hashes(root)
    code, _, err = run(capsys, "repair", root, "--yes")
    assert code == 2 and "SCHEDULE_TOPIC_XXXX" in err and "messageDelayLevel" in err and "nothing changed" in err
    assert len(err.strip().splitlines()) == 1 and tree_hashes(root) == before
    code, out, _ = run(capsys, "repair", root, "--yes", "--config", conf(tmp_path, f"messageDelayLevel={levels}\n"))
    assert code == 0 and "verify: no problems" in out
    for q in ("SCHEDULE_TOPIC_XXXX/2", "rmq_sys_wheel_timer/0", "DelayTopic/0"):
        f = f"consumequeue/{q}/00000000000000000000"
        assert (root / f).read_bytes() == (vectors5 / name / f).read_bytes(), q


def test_recover_after_a_crash_needs_the_levels(vectors5, tmp_path, capsys):
    root = copy(vectors5, "delaycustom", tmp_path)
    (root / "abort").touch()
    before = tree_hashes(root)
    code, _, err = run(capsys, "recover", root, "--yes")
    assert code == 2 and "messageDelayLevel" in err and tree_hashes(root) == before
    code, out, _ = run(capsys, "recover", root, "--yes", "--config", conf(tmp_path, f"messageDelayLevel={CUSTOM}\n"))
    assert code == 0 and not (root / "abort").exists()
    assert (root / SCHEDULE_CQ).read_bytes() == (vectors5 / "delaycustom" / SCHEDULE_CQ).read_bytes()


def test_python_api_levels(vectors5, tmp_path):
    root = copy(vectors5, "delaycustom", tmp_path)
    before = tree_hashes(root)
    with pytest.raises(DelayLevelsUnknownError, match="SCHEDULE_TOPIC_XXXX"):
        MessageStore.open(root, StoreConfig.small(message_delay_level=None))
    assert tree_hashes(root) == before
    shutil.rmtree(root / "consumequeue")
    from mqstore.store import repair_store
    repair_store(root, StoreConfig.small(message_delay_level=CUSTOM))
    assert (root / SCHEDULE_CQ).read_bytes() == (vectors5 / "delaycustom" / SCHEDULE_CQ).read_bytes()


def test_timer_wheel_unit_is_the_tag_hash(vectors5):
    from mqstore.message import java_string_hash
    for name in ("delay", "delaycustom"):
        unit = (vectors5 / name / "consumequeue/rmq_sys_wheel_timer/0/00000000000000000000").read_bytes()[:20]
        assert int.from_bytes(unit[12:20], "big", signed=True) == java_string_hash("T")


def test_rebuild_out_with_and_without_levels(vectors5, tmp_path, capsys):
    root = copy(vectors5, "delaycustom", tmp_path)
    code, _, err = run(capsys, "rebuild", root, "--engine", "local", "--out", tmp_path / "o1")
    assert code == 2 and "messageDelayLevel" in err
    code, _, _ = run(capsys, "rebuild", root, "--engine", "local", "--out", tmp_path / "o2",
                     "--config", conf(tmp_path, f"messageDelayLevel={CUSTOM}\n"))
    assert code == 0
    assert (tmp_path / "o2" / SCHEDULE_CQ).read_bytes()[:20] == (root / SCHEDULE_CQ).read_bytes()[:20]


@pytest.mark.parametrize("name", ["delay", "delaycustom"])
def test_get_and_query_serve_every_message(vectors5, tmp_path, capsys, name):
    root = copy(vectors5, name, tmp_path)
    for r in records(vectors5, name):
        if r["event"] != "put":
            continue
        code, out, _ = run(capsys, "get", root, r["topic"], r["queueId"], r["queueOffset"], "-n", "1", "--json")
        got = json.loads(out)["messages"]
        assert code == 0 and got[0]["commit_log_offset"] == r["offset"]
        assert got[0]["body_length"] == r["rmq_decoded_body_len"]
        key = r["rmq_decoded_props"].get("KEYS")
        if key:
            code, out, _ = run(capsys, "query", root, r["topic"], key, "--json")
            assert code == 0 and [m["commit_log_offset"] for m in json.loads(out)["messages"]] == [r["offset"]]


# --- 5.x transactions in the audit -----------------------------------------------------------------

def test_audit_txn_half_op_design(vectors5, tmp_path, capsys):
    root = copy(vectors5, "txn", tmp_path)
    code, out, _ = run(capsys, "audit", root, "--json")
    f = json.loads(out)["findings"]
    assert code == 1 and f["orphan_resolutions"] == []
    assert [(u["offset"], u["topic"]) for u in f["unresolved_prepared"]] == [(816, "RMQ_SYS_TRANS_HALF_TOPIC")]


def test_audit_half_closed_by_a_batched_op(tmp_path):
    from mqstore.auditing import audit_local
    from mqstore.message import Message
    from mqstore.transaction import HALF_TOPIC, OP_TOPIC
    with MessageStore.open(tmp_path / "s", StoreConfig.small(), clock=lambda: 1_700_000_000_000) as s:
        halves = [s.put(Message(HALF_TOPIC, b"x", properties={"TRAN_MSG": "true"})) for _ in range(4)]
        s.put(Message(OP_TOPIC, b"0,2,", properties={"TAGS": "d"}))
        s.put(Message(OP_TOPIC, b"3,", properties={"TAGS": "x"}))        # not the remove tag
    f = audit_local(tmp_path / "s")["findings"]
    assert [u["offset"] for u in f["unresolved_prepared"]] == [halves[1].commit_log_offset, halves[3].commit_log_offset]


@pytest.mark.spark
def test_audit_txn_spark_equals_local(vectors5, tmp_path):
    from mqstore import pipeline
    from mqstore.auditing import audit_local
    root = copy(vectors5, "txn", tmp_path)
    a, b = audit_local(root), pipeline.audit(root, engine="spark")
    assert a["findings"] == b["findings"] and a["topics"] == b["topics"] and a["queues"] == b["queues"]
    assert [u["offset"] for u in b["findings"]["unresolved_prepared"]] == [816]
