"""Reading RocketMQ 5.x stores right (chapter 14, issue 26): compressed bodies handed out decompressed,
the __CRC32# property checked by verify and (forceVerifyPropCRC) by recovery, and written by put."""
import contextlib, hashlib, io, json, shutil, zlib
from pathlib import Path

import pytest

from mqstore.cli import main
from mqstore.config import StoreConfig
from mqstore.errors import BodyDecompressionError, ConfigError
from mqstore.message import Message, body_crc, check_record, decode_record
from mqstore.modern import (decompress_body, prop_crc_digits, prop_crc_value, record_prop_crc, body_text,
                            PROPERTY_CRC32)
from mqstore.scrub import scrub_store
from mqstore.store import MessageStore

SEG = "commitlog/00000000000000000000"


def copy(vectors5, name, tmp_path, as_name=None) -> Path:
    return shutil.copytree(vectors5 / name, tmp_path / (as_name or name))


def puts(vectors5, name) -> list:
    return [r for r in map(json.loads, (vectors5 / f"{name}.jsonl").read_text().splitlines())
            if r["event"] == "put"]


def hashes(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def cli(*words):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main([str(w) for w in words])
    return status, out.getvalue()


def flip_flag(root: Path, offset: int) -> None:
    with open(root / SEG, "r+b") as f:
        f.seek(offset + 16)
        b = f.read(1)
        f.seek(offset + 16)
        f.write(bytes([b[0] ^ 1]))


# --- compressed bodies ------------------------------------------------------------------------------

def test_comp_api_serves_rocketmq_bodies(vectors5, tmp_path):
    "get, look and query hand out the body RocketMQ's decoder returned; stored bytes and type kept."
    root = copy(vectors5, "comp", tmp_path)
    recs = puts(vectors5, "comp")
    with MessageStore.open(root, StoreConfig.small(), read_only=True) as store:
        got = store.get("CompTopic", 0, 0, 32).messages
        assert len(got) == len(recs) == 5
        for m, r in zip(got, recs):
            assert (len(m.body), body_crc(m.body)) == (r["rmq_decoded_body_len"], r["rmq_decoded_body_crc"])
            assert m.commit_log_offset == r["offset"]
            looked = store.look(r["offset"])
            assert looked.body == m.body and looked.stored_body == m.stored_body
            if "stored_len" in r:
                assert len(m.stored_body) == r["stored_len"] and m.compression in ("zlib", "lz4", "zstd")
                assert m.to_message().body == m.stored_body       # a broker-side copy keeps the stored bytes
            key = r["rmq_decoded_props"]["KEYS"]
            hits = [h for h in store.query("CompTopic", key) if h.commit_log_offset == r["offset"]]
            assert len(hits) == 1 and body_crc(hits[0].body) == r["rmq_decoded_body_crc"]
    assert [m.compression for m in got] == [None, "zlib", "zlib", "lz4", "zstd"]


def test_comp_cli_get_query_dump(vectors5, tmp_path):
    root = copy(vectors5, "comp", tmp_path)
    recs = puts(vectors5, "comp")
    status, out = cli("get", root, "CompTopic", 0, 0, "--json")
    data = json.loads(out)
    assert status == 0 and [m["body_length"] for m in data["messages"]] == [r["rmq_decoded_body_len"] for r in recs]
    assert [m["compression"] for m in data["messages"]] == [None, "zlib", "zlib", "lz4", "zstd"]
    status, out = cli("get", root, "CompTopic", 0, 0)
    assert "'compressible-zstd" in out and "'compressible-lz4" in out and "\\x" not in out
    status, out = cli("query", root, "CompTopic", "key-lz4", "--json")
    assert [m["body_length"] for m in json.loads(out)["messages"]] == [6000]
    status, out = cli("dump", root, 4892, "--json")
    facts = json.loads(out)
    body = bytes.fromhex(facts["body_hex"])
    assert facts["compression"] == "lz4" and facts["stored_body_length"] == 1677 and facts["body_length"] == 6000
    assert body.startswith(b"compressible-lz4")


def test_corrupt_compressed_body_is_an_error_and_a_verify_problem(vectors5, tmp_path):
    root = copy(vectors5, "comp", tmp_path)
    zstd = puts(vectors5, "comp")[4]
    m = decode_record((root / SEG).read_bytes(), zstd["offset"])
    with pytest.raises(BodyDecompressionError):
        decompress_body(m.body[:100], m.sys_flag)
    with pytest.raises(BodyDecompressionError):
        decompress_body(m.body, (m.sys_flag & ~0x700) | 0x500)
    # damage the zstd body and fix up the body CRC, so only decompression can tell
    data = bytearray((root / SEG).read_bytes())
    body_pos = zstd["offset"] + 88                      # IPv4 hosts: the body follows the 88-byte header
    data[body_pos + 20] ^= 0xFF
    data[zstd["offset"] + 8:zstd["offset"] + 12] = body_crc(bytes(data[body_pos:body_pos + 433])).to_bytes(4, "big")
    (root / SEG).write_bytes(bytes(data))
    with MessageStore.open(root, StoreConfig.small(), read_only=True) as store:
        with pytest.raises(BodyDecompressionError):
            store.look(zstd["offset"])
    problems = scrub_store(root, StoreConfig.small()).problems
    assert len(problems) == 1 and f"record at {zstd['offset']}" in problems[0] and "zstd" in problems[0]


@pytest.mark.spark
def test_comp_spark_rows_have_rocketmq_bodies(vectors5, tmp_path):
    pytest.importorskip("pyspark")
    from mqstore.pipeline import read_messages, spark_session
    root = copy(vectors5, "comp", tmp_path)
    recs = puts(vectors5, "comp")
    spark = spark_session()
    rows = read_messages(spark, root, config=StoreConfig.small(),
                         columns=["offset", "body", "stored_body", "compression"]).orderBy("offset").collect()
    assert [(r.offset, body_crc(r.body)) for r in rows] == [(r["offset"], r["rmq_decoded_body_crc"]) for r in recs]
    assert [r.compression for r in rows] == [None, "zlib", "zlib", "lz4", "zstd"]
    assert [len(r.stored_body) for r in rows][1:] == [r["stored_len"] for r in recs[1:]]


def test_body_text_only_for_text():
    assert body_text(b"hello\nworld") == "'hello world'"
    assert body_text(bytes(range(256))) == "<256 bytes, binary>"
    assert body_text(b"") == "''"


# --- the property CRC -------------------------------------------------------------------------------

def test_digit_order():
    assert prop_crc_digits(2096561374) == "4731656902"
    assert prop_crc_value("4731656902") == 2096561374
    assert prop_crc_digits(0) == "0" * 10


def test_crc_records_match_rocketmq(vectors5):
    data = (vectors5 / "crc" / SEG).read_bytes()
    for r in puts(vectors5, "crc"):
        c = record_prop_crc(data, r["offset"])
        assert c.ok and c.digits == r["rmq_decoded_props"][PROPERTY_CRC32]


@pytest.mark.parametrize("name", ["comp", "crc"])
def test_verify_finds_no_problem(vectors5, tmp_path, name):
    root = copy(vectors5, name, tmp_path)
    before = hashes(root)
    status, out = cli("verify", root)
    assert status == 0 and "no problems" in out, out
    assert hashes(root) == before


def test_flipped_flag_found_by_verify_not_by_body_crc(vectors5, tmp_path):
    root = copy(vectors5, "crc", tmp_path)
    flip_flag(root, 764)
    assert check_record((root / SEG).read_bytes(), 764, check_crc=True).ok
    status, out = cli("verify", root)
    assert status == 1 and "record at 764: __CRC32# 8604387580 is not its CRC" in out


def test_recover_with_force_verify_truncates_at_the_flipped_record(vectors5, tmp_path):
    "RocketMQ with forceVerifyPropCRC truncates the log at the first record whose __CRC32# is wrong."
    root = copy(vectors5, "crc", tmp_path)
    flip_flag(root, 764)
    (root / "abort").write_bytes(b"")                   # a crash: abnormal recovery
    with MessageStore.open(root, StoreConfig.small(enabled_append_prop_crc=True, force_verify_prop_crc=True)) as store:
        assert store.commit_log.max_offset == 764
        assert store.wait_dispatched()
        got = store.get("CrcTopic", 0, 0, 32).messages + store.get("CrcTopic", 1, 0, 32).messages
        assert sorted(m.commit_log_offset for m in got) == [0, 403, 595]
    assert scrub_store(root, StoreConfig.small()).problems == []


def test_normal_recovery_with_force_verify_truncates_too(vectors5, tmp_path):
    root = copy(vectors5, "crc", tmp_path)
    flip_flag(root, 1351)
    with MessageStore.open(root, StoreConfig.small(force_verify_prop_crc=True), read_only=True) as store:
        assert store.commit_log.max_offset == 1351         # read-only: clipped in memory
    with MessageStore.open(root, StoreConfig.small(enabled_append_prop_crc=True)) as store:
        assert store.commit_log.max_offset == 2239         # without the setting nothing reads the property
    with MessageStore.open(root, StoreConfig.small(enabled_append_prop_crc=True, force_verify_prop_crc=True)) as store:
        assert store.commit_log.max_offset == 1351


def test_force_verify_on_a_store_without_the_property_refuses(vectors5, tmp_path):
    root = copy(vectors5, "comp", tmp_path)
    before = hashes(root)
    with pytest.raises(ConfigError, match="__CRC32#"):
        MessageStore.open(root, StoreConfig.small(force_verify_prop_crc=True))
    assert hashes(root) == before


def test_repair_after_flip_leaves_rocketmq_files(vectors5, tmp_path):
    "The flip removes nothing from the log: repair leaves every queue and index file as RocketMQ wrote it."
    root = copy(vectors5, "crc", tmp_path)
    flip_flag(root, 764)
    (root / "consumequeue" / "CrcTopic" / "1" / "00000000000000000000").unlink()
    status, out = cli("repair", root, "--yes")
    assert "still 1 problem" in out and "record at 764" in out   # the log itself is not repair's to rewrite
    rebuilt, want = hashes(root), hashes(vectors5 / "crc")
    for name in want:
        if name.startswith("consumequeue/"):
            assert rebuilt.get(name) == want[name], name
    # an index file is named by the time it was made: compare the contents
    index = lambda h: sorted(v for k, v in h.items() if k.startswith("index/"))
    assert index(rebuilt) == index(want)


def _sent(vectors5):
    data = (vectors5 / "crc" / SEG).read_bytes()
    return data, [decode_record(data, r["offset"]) for r in puts(vectors5, "crc")]


def test_put_writes_rocketmq_records(vectors5, tmp_path):
    data, sent = _sent(vectors5)
    cfg = StoreConfig.small(enabled_append_prop_crc=True, store_host=sent[0].store_host)
    now = [0]
    with MessageStore.open(tmp_path / "ours", cfg, clock=lambda: now[0]) as store:
        for m in sent:
            now[0] = m.store_timestamp
            msg = m.to_message()
            msg.properties.pop(PROPERTY_CRC32)           # the encoder adds it, as MessageExtEncoder does
            r = store.put(msg)
            assert (r.commit_log_offset, r.size) == (m.commit_log_offset, m.total_size)
        mine = store.commit_log.mfq.files[0].read(0, store.commit_log.max_offset)
    assert mine == data[:len(mine)] and len(mine) == 2239


def test_put_batch_writes_rocketmq_records(vectors5, tmp_path):
    data, sent = _sent(vectors5)
    cfg = StoreConfig.small(enabled_append_prop_crc=True, store_host=sent[0].store_host)
    now = [0]
    with MessageStore.open(tmp_path / "ours", cfg, clock=lambda: now[0]) as store:
        for m in sent:                                  # one store time per batch: batches of one
            now[0] = m.store_timestamp
            store.put_batch([m.to_message()])
        mine = store.commit_log.mfq.files[0].read(0, store.commit_log.max_offset)
    assert mine == data[:2239]


def test_put_without_the_setting_writes_no_property(tmp_path):
    with MessageStore.open(tmp_path / "s", StoreConfig.small()) as store:
        r = store.put(Message("T", b"x", properties={"KEYS": "k"}))
        assert PROPERTY_CRC32 not in store.look(r.commit_log_offset).properties
    with MessageStore.open(tmp_path / "t", StoreConfig.small(enabled_append_prop_crc=True)) as store:
        r = store.put(Message("T", b"x", properties={"KEYS": "k"}))
        rb = store.put_batch([Message("T", b"y"), Message("U", b"z" * 100, properties={"TAGS": "a"})])
        assert store.wait_dispatched()
        for off in [r.commit_log_offset] + list(rb.commit_log_offsets):
            mf = store.commit_log.mfq.find_by_offset(off)
            assert record_prop_crc(mf.read(off, store.look(off).total_size), 0, off).ok


def test_force_verify_without_the_property_refuses_before_touching_anything(vectors5, tmp_path):
    "Not a byte, not a modification time, not a lock file: the refusal comes before the open writes."
    root = copy(vectors5, "batch", tmp_path)
    (root / "lock").unlink()
    stamps = lambda: {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}
    before = stamps()
    with pytest.raises(ConfigError, match="__CRC32#"):
        MessageStore.open(root, StoreConfig.small(force_verify_prop_crc=True))
    assert stamps() == before and not (root / "lock").exists()


# --- recognition reads a segment a window at a time (issue 30: verify's and open's memory) --------------------

@pytest.mark.parametrize("name", ["batch", "bcq", "comp", "crc", "delay", "delaycustom", "lmq", "txn"])
@pytest.mark.parametrize("window", [512, 4096, 1 << 16])
def test_windowed_recognition_finds_what_a_whole_segment_scan_finds(name, window):
    "record_structures in windows (pages given back) == segment_facts of each whole segment, added up."
    from mqstore import modern
    from mqstore.auditing import mapped_segment
    root = Path(__file__).resolve().parent.parent / "book" / "data" / "rocketmq5" / name
    whole, records = {}, 0
    for seg in modern._segments(root / "commitlog"):
        with mapped_segment(seg) as buf:
            facts, n = modern.segment_facts(buf)
        records += n
        for k, more in facts.items():
            modern._add(whole, k, "commitlog", **more)
    found, counts = modern.record_structures(root, window=window)
    assert counts["records"] == records and records > 0
    assert found == whole


@pytest.mark.parametrize("window", [512, 4096])
@pytest.mark.parametrize("damage_at", [0.3, 0.6])
def test_windowed_recognition_stops_where_a_whole_scan_stops_on_a_damaged_segment(tmp_path, window, damage_at):
    from mqstore import modern
    from mqstore.auditing import mapped_segment
    src = Path(__file__).resolve().parent.parent / "book" / "data" / "rocketmq5" / "lmq"
    root = tmp_path / "lmq"
    shutil.copytree(src, root)
    seg = modern._segments(root / "commitlog")[0]
    data = bytearray(seg.read_bytes())
    used = len(data.rstrip(b"\0"))
    at = int(used * damage_at)
    data[at:at + 40] = bytes(40)                                # a hole inside a record
    seg.write_bytes(bytes(data))
    whole = {}
    with mapped_segment(seg) as buf:
        facts, records = modern.segment_facts(buf)
    for k, more in facts.items():
        modern._add(whole, k, "commitlog", **more)
    found, counts = modern.record_structures(root, window=window)
    assert counts["records"] == records and found == whole
