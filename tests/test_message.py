"""Tests of mqstore.message: the commit-log record format (chapter 3)."""
import ipaddress, json, mmap, struct, zlib
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, assume, HealthCheck, strategies as st

from mqstore.errors import (CorruptRecordError, TornRecordError, InvalidTopicError, MessageTooLargeError,
                            PropertiesTooLongError, InvalidPropertyError, MessageError,
                            NotARecordStartError, QueryError, RecordError, OffsetOutOfRangeError)
from mqstore.message import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH, MAX_MESSAGE_SIZE, COMPRESSED_FLAG, MULTI_TAGS_FLAG, TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY, PROPERTY_PRODUCER_GROUP, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED, transaction_type, compression_type, encode_properties, decode_properties, java_string_hash, tags_code, body_crc, cq_tags_code, Message, StoredMessage, encode_record, encode_message, patch_record, encode_blank, decode_record, check_record, RecordStatus, record_fields, create_message_id, decode_message_id, choose_version, record_layout, MIN_RECORD_SIZE
from mqstore.fast.records import scan_segment, header_ip, scan_topics, scan_properties, scan_tags_codes, SCAN_DTYPE


# ---------------------------------------------------------------- vectors

@pytest.fixture(scope="module")
def vec(vectors):
    items = [json.loads(line) for line in (vectors / "messages.jsonl").read_text().splitlines()]
    assert len(items) == 42
    return items


def ordered_properties(v):
    "The properties in the order of the Java string, empty values kept (as the encoder saw them)."
    return dict(piece.split("\x01", 1) for piece in v["propertiesString"].split("\x02") if piece)


def stored_from_json(v):
    return StoredMessage(
        queue_id=v["queueId"], flag=v["flag"], queue_offset=v["queueOffset"],
        commit_log_offset=v["commitLogOffset"], sys_flag=v["sysFlag"], born_timestamp=v["bornTimestamp"],
        born_host=(v["bornHostIp"], v["bornHostPort"]), store_timestamp=v["storeTimestamp"],
        store_host=(v["storeHostIp"], v["storeHostPort"]), reconsume_times=v["reconsumeTimes"],
        prepared_transaction_offset=v["preparedTransactionOffset"], body=bytes.fromhex(v["body"]),
        topic=v["topic"], properties=ordered_properties(v))


def assert_matches_json(s, v):
    assert s.total_size == v["storeSize"]
    assert s.magic_code == v["magicCode"]
    assert s.version == (2 if v["version"] == "MESSAGE_VERSION_V2" else 1)
    assert s.body_crc == v["bodyCRC"] == body_crc(s.body)
    assert s.topic == v["topic"] and len(s.topic.encode()) == v["topicBytes"]
    assert (s.queue_id, s.flag, s.queue_offset, s.commit_log_offset, s.sys_flag) == (
        v["queueId"], v["flag"], v["queueOffset"], v["commitLogOffset"], v["sysFlag"])
    assert (s.born_timestamp, s.store_timestamp, s.reconsume_times, s.prepared_transaction_offset) == (
        v["bornTimestamp"], v["storeTimestamp"], v["reconsumeTimes"], v["preparedTransactionOffset"])
    assert ipaddress.ip_address(s.born_host[0]) == ipaddress.ip_address(v["bornHostIp"])
    assert ipaddress.ip_address(s.store_host[0]) == ipaddress.ip_address(v["storeHostIp"])
    assert ipaddress.ip_address(s.born_host[0]).packed.hex() == v["bornHostIpHex"]
    assert (s.born_host[1], s.store_host[1]) == (v["bornHostPort"], v["storeHostPort"])
    assert s.body == bytes.fromhex(v["body"]) and len(s.body) == v["bodyLen"]
    # the decoder drops empty values (record 017), as string2messageProperties does
    assert s.properties == {k: x for k, x in v["properties"].items() if x}
    assert s.tags_code == v["tagsCode"]
    cq = v["consumeQueueEntry"]     # None for prepared and rollback records: no consume-queue entry
    assert (cq is None) == (s.transaction_type in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE))
    if cq is not None:
        assert (cq["commitLogOffset"], cq["size"], cq["tagsCode"]) == (s.commit_log_offset, s.total_size, s.tags_code)
    assert s.transaction_type == v["sysFlag"] & 0xC


@pytest.mark.parametrize("i", range(42))
def test_vector_decodes_to_every_field(vectors, vec, i):
    v = vec[i]
    raw = (vectors / v["file"]).read_bytes()
    assert len(raw) == v["storeSize"]
    assert_matches_json(decode_record(raw), v)
    r = check_record(raw, 0)
    assert r.status is RecordStatus.OK and r.size == v["storeSize"] and r.message.body is None


@pytest.mark.parametrize("i", range(42))
def test_vector_encodes_byte_for_byte(vectors, vec, i):
    v = vec[i]
    raw = (vectors / v["file"]).read_bytes()
    version = 2 if v["version"] == "MESSAGE_VERSION_V2" else 1
    assert encode_record(stored_from_json(v), version=version) == raw
    if i != 34:                     # 034 is v2 forced on a short topic; every other one is the automatic choice
        assert encode_record(stored_from_json(v)) == raw
        assert choose_version(v["topic"]) == version


def test_vector_index_keys_and_hashes(vec):
    for v in vec:
        if not v["indexKeys"]:
            continue
        s = stored_from_json(v)
        keys = ([s.uniq_key] if s.uniq_key else []) + s.keys
        assert [k["key"] for k in v["indexKeys"]] == [f"{v['topic']}#{k}" for k in keys]
        for k in v["indexKeys"]:
            h = java_string_hash(k["key"])
            assert k["hash"] == (0 if h == -2**31 else abs(h))


def test_compressed_vectors(vec):
    for v in vec:
        if v["sysFlag"] & COMPRESSED_FLAG:
            assert compression_type(v["sysFlag"]) in ("zlib", "lz4", "zstd")
            if compression_type(v["sysFlag"]) == "zlib":
                assert zlib.decompress(bytes.fromhex(v["body"])).hex() == v["bodyUncompressedHex"]
    assert compression_type(0) is None and compression_type(1) == "zlib"


def test_commitlog_decodes_to_42_records(vectors, vec):
    log = (vectors / "commitlog.bin").read_bytes()
    pos, got = 0, []
    while True:
        r = check_record(log, pos, check_crc=True, read_body=True)
        if r.status is not RecordStatus.OK:
            break
        got.append(r.message)
        pos += r.size
    assert r.status is RecordStatus.END and pos == len(log) and len(got) == 42
    for s, v in zip(got, vec):
        assert_matches_json(s, v)
    headers, end, why = scan_segment(log, check_crc=True)
    assert (len(headers), end, why) == (42, len(log), RecordStatus.END)
    assert headers["offset"].tolist() == [v["commitLogOffset"] for v in vec]
    assert headers["commit_log_offset"].tolist() == [v["commitLogOffset"] for v in vec]
    assert headers["total_size"].tolist() == [v["storeSize"] for v in vec]
    assert headers["crc_ok"].all()
    assert scan_tags_codes(log, headers).tolist() == [v["tagsCode"] for v in vec]
    assert scan_topics(log, headers) == [v["topic"] for v in vec]
    assert scan_properties(log, headers) == [s.properties for s in got]
    assert [header_ip(h, "born") for h in headers] == [s.born_host[0] for s in got]
    assert_scan_agrees(log, headers)


def test_edge_zero_padding(vectors):
    buf = (vectors / "edge" / "commitlog_zero_padded.bin").read_bytes()
    log_len = len((vectors / "commitlog.bin").read_bytes())
    h, end, why = scan_segment(buf)
    assert (len(h), end, why) == (42, log_len, RecordStatus.END)
    r = check_record(buf, log_len)
    assert r.status is RecordStatus.END and r.size == 0 and r.message is None
    with pytest.raises(NotARecordStartError):
        decode_record(buf, log_len)


def test_edge_blank(vectors):
    buf = (vectors / "edge" / "commitlog_blank_eof.bin").read_bytes()
    log_len = len((vectors / "commitlog.bin").read_bytes())
    h, end, why = scan_segment(buf)
    assert (len(h), end, why) == (42, log_len, RecordStatus.BLANK)
    r = check_record(buf, log_len)
    assert r.status is RecordStatus.BLANK and r.size == len(buf) - log_len
    assert buf[log_len:log_len + 8] == encode_blank(len(buf) - log_len)
    assert struct.unpack(">ii", encode_blank(8)) == (END_FILE_MIN_BLANK_LENGTH, BLANK_MAGIC_CODE)
    with pytest.raises(NotARecordStartError):
        decode_record(buf, log_len)


def test_edge_truncated_last_record(vectors, vec):
    buf = (vectors / "edge" / "truncated_last_record.bin").read_bytes()
    last = vec[41]["commitLogOffset"]
    h, end, why = scan_segment(buf)
    assert (len(h), end, why) == (41, last, RecordStatus.TORN)
    r = check_record(buf, last)
    assert r.status is RecordStatus.TORN and r.message is None and r.size == vec[41]["storeSize"]
    with pytest.raises(TornRecordError) as e:
        decode_record(buf, last)
    assert e.value.offset == last


def test_v1_topic_200_fails_like_java(vectors):
    assert "BufferOverflowException" in (vectors / "edge" / "v1_topic_200_encode_result.txt").read_text()
    s = StoredMessage(topic="V" * 200, body=b"x", properties={"TAGS": "T"})
    with pytest.raises(InvalidTopicError, match="version 1"):
        encode_record(s, version=1)
    rec = encode_record(s)
    assert struct.unpack_from(">i", rec, 4)[0] == MESSAGE_MAGIC_CODE_V2
    assert decode_record(rec).topic == "V" * 200


def test_version_choice_counts_chars_and_bytes():
    assert choose_version("T" * 127) == 1 and choose_version("T" * 128) == 2
    assert choose_version("主" * 50) == 2           # 50 chars but 150 bytes: v1 cannot hold it
    assert choose_version("🚀" * 64) == 2           # 128 UTF-16 units
    with pytest.raises(InvalidTopicError):
        encode_record(StoredMessage(topic="主" * 50), version=1)


# ---------------------------------------------------------------- small pieces

def test_constants():
    assert (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE) == (-626843481, -626843477, -875286124)
    assert MAX_MESSAGE_SIZE == 4 * 1024 * 1024 and END_FILE_MIN_BLANK_LENGTH == 8
    assert (COMPRESSED_FLAG, MULTI_TAGS_FLAG, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG) == (1, 2, 0x10, 0x20)
    assert (TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE,
            TRANSACTION_ROLLBACK_TYPE) == (0, 4, 8, 0xC)
    assert [transaction_type(f) for f in (0, 4, 8, 12, 0x3F)] == [0, 4, 8, 12, 12]
    assert (PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY, PROPERTY_PRODUCER_GROUP,
            PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TRANSACTION_PREPARED) == (
        "KEYS", "TAGS", "UNIQ_KEY", "DELAY", "PGROUP", "REAL_TOPIC", "REAL_QID", "TRAN_MSG")


def test_java_string_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -2**31
    assert java_string_hash("标签🚀") == 825518202     # surrogate pair counted as two units
    assert tags_code(None) == tags_code("") == 0 and tags_code("TagA") == 2598919


def test_body_crc():
    assert body_crc(b"") == 0 and body_crc(None) == 0
    assert body_crc(b"A") == 1406770827
    assert body_crc(b"123456789") == 0xCBF43926 & 0x7FFFFFFF


def test_delay_tags_code():
    props = {"DELAY": "3", "TAGS": "TagD"}
    assert cq_tags_code("SCHEDULE_TOPIC_XXXX", props, 1000) == 1000 + 10_000
    assert cq_tags_code("SCHEDULE_TOPIC_XXXX", {"DELAY": "99"}, 0) == 2 * 3_600_000     # clamped to the max level
    assert cq_tags_code("SCHEDULE_TOPIC_XXXX", {"DELAY": "0", "TAGS": "TagA"}, 5) == 2598919
    assert cq_tags_code("TopicTest", props, 1000) == tags_code("TagD")
    assert cq_tags_code("SCHEDULE_TOPIC_XXXX", {"DELAY": "x", "TAGS": "TagA"}, 5) == 2598919


def test_properties_codec():
    assert encode_properties({}) == b"" and encode_properties(None) == b""
    assert encode_properties({"a": "b", "skip": None}) == b"a\x01b\x02"
    assert encode_properties({"TAGS": ""}) == b"TAGS\x01\x02"
    assert decode_properties(b"TAGS\x01\x02KEYS\x01ek\x02") == {"KEYS": "ek"}
    assert decode_properties(b"a\x01b\x01c\x02\x01x\x02y\x01z") == {"a": "b\x01c", "y": "z"}
    assert decode_properties(b"") == {} and decode_properties("k\x01v\x02") == {"k": "v"}
    assert decode_properties(b"k\x01\xff\x02") == {"k": "\ufffd"}


@pytest.mark.parametrize("props", [{"n": 1}, {1: "v"}, {"n": b"v"}, {"a\x01": "v"}, {"a": "v\x02"},
                                   {"": "v"}, {"a": "\ud800"}])
def test_bad_properties(props):
    with pytest.raises(InvalidPropertyError):
        encode_properties(props)
    with pytest.raises(InvalidPropertyError):
        encode_record(StoredMessage(topic="T", properties=props))


def test_properties_length_limit():
    ok = {"k": "x" * (32767 - 3)}
    assert len(encode_properties(ok)) == 32767
    with pytest.raises(PropertiesTooLongError):
        encode_properties({"k": "x" * (32767 - 2)})
    with pytest.raises(PropertiesTooLongError):
        encode_record(StoredMessage(topic="T", properties={"k": "é" * 20000}))
    assert decode_record(encode_record(StoredMessage(topic="T", properties=ok))).properties == ok


def test_message_helpers():
    m = Message("T", b"x")
    m.tags = "TagA"
    m.keys = ["k1", "k2"]
    m.uniq_key = "U"
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U"}
    m.keys = " a  b "
    assert m.keys == ["a", "b"]
    m.tags = None
    assert "TAGS" not in m.properties and m.tags is None
    s = m.to_stored(queue_offset=3, commit_log_offset=77, store_timestamp=9, store_host=("10.0.0.2", 10911))
    assert (s.keys, s.uniq_key, s.queue_offset, s.tags_code) == (["a", "b"], "U", 3, 0)
    assert s.to_message() == m


def test_message_ids():
    s = StoredMessage(store_host=("10.0.0.2", 10911), commit_log_offset=4629)
    assert s.msg_id == "0A00000200002A9F0000000000001215"
    assert decode_message_id(s.msg_id) == ("10.0.0.2", 10911, 4629)
    mid = create_message_id(("2001:db8::2", 10911), 2**40)
    assert len(mid) == 56 and decode_message_id(mid) == ("2001:db8::2", 10911, 2**40)
    for bad in ("", "0A", "Z" * 32, "0" * 33):
        with pytest.raises(QueryError):
            decode_message_id(bad)


def test_encode_message_and_patch(vectors, vec):
    v = vec[4]
    raw = (vectors / v["file"]).read_bytes()
    s = stored_from_json(v)
    pre = encode_message(s.to_message(), store_host=s.store_host)
    assert struct.unpack_from(">qq", pre, 20) == (0, 0)
    patch_record(pre, queue_offset=v["queueOffset"], commit_log_offset=v["commitLogOffset"],
                 store_timestamp=v["storeTimestamp"])
    assert bytes(pre) == raw
    # in place inside a bigger buffer, and with an IPv6 born host (store timestamp at 68)
    s6 = replace(s, born_host=("::1", 7))
    pre6 = encode_message(s6.to_message(), store_host=s6.store_host)
    buf = bytearray(10) + pre6
    patch_record(buf, 10, queue_offset=1, commit_log_offset=2, store_timestamp=3)
    d = decode_record(buf, 10)
    assert (d.queue_offset, d.commit_log_offset, d.store_timestamp, d.born_host) == (1, 2, 3, ("::1", 7))


def test_record_fields_and_layout(vectors):
    raw = (vectors / "035.bin").read_bytes()
    fields = record_fields(raw)
    assert fields[-1][1] + fields[-1][2] == len(raw)
    assert dict((n, s) for n, _, s in fields)["BORNHOST"] == 20
    assert dict((n, s) for n, _, s in fields)["TOPICLENGTH"] == 2
    lay = record_layout(0, 0, 0, 0)
    assert lay[-1][1] + lay[-1][2] == MIN_RECORD_SIZE


# ---------------------------------------------------------------- bad input

def test_bad_topics():
    for topic in ("", None, 42):
        with pytest.raises(InvalidTopicError):
            encode_record(StoredMessage(topic=topic))
    with pytest.raises(InvalidTopicError):
        encode_record(StoredMessage(topic="t" * 32768))
    with pytest.raises(InvalidTopicError):
        encode_record(StoredMessage(topic="a\ud800b"))
    assert decode_record(encode_record(StoredMessage(topic="t" * 32767))).topic == "t" * 32767


def test_body_over_max():
    with pytest.raises(MessageTooLargeError):
        encode_record(StoredMessage(topic="T", body=bytes(MAX_MESSAGE_SIZE + 1)))
    with pytest.raises(MessageTooLargeError):
        encode_record(StoredMessage(topic="T", body=b"x" * 11), max_body_size=10)
    assert len(encode_record(StoredMessage(topic="T", body=b"x" * 10), max_body_size=10)) == 92 + 10


@pytest.mark.parametrize("field,value", [("queue_id", 2**31), ("queue_offset", 2**63), ("flag", "1"),
                                          ("born_host", ("not an ip", 1)), ("store_host", ("1.2.3.4",)),
                                          ("store_host", ("1.2.3.4", 2**31))])
def test_bad_fields(field, value):
    with pytest.raises(MessageError):
        encode_record(replace(StoredMessage(topic="T"), **{field: value}))


def test_bad_version_and_blank():
    with pytest.raises(MessageError):
        encode_record(StoredMessage(topic="T"), version=3)
    headless = decode_record(encode_record(StoredMessage(topic="T", body=b"b")), read_body=False)
    assert headless.body is None
    with pytest.raises(MessageError, match="read_body"):
        encode_record(headless)
    with pytest.raises(MessageError):
        encode_blank(7)


def test_decode_at_non_record_offsets(vectors, vec):
    log = (vectors / "commitlog.bin").read_bytes()
    for pos in (1, 4, 7, 50, vec[2]["commitLogOffset"] + 100):
        with pytest.raises(CorruptRecordError) as e:
            decode_record(log, pos)
        assert e.value.offset == pos and check_record(log, pos).status in (RecordStatus.CORRUPT, RecordStatus.TORN)
    with pytest.raises(NotARecordStartError):
        decode_record(log, len(log))
    with pytest.raises(NotARecordStartError):
        decode_record(log + bytes(3), len(log))
    assert check_record(log + b"\x00\x01", len(log)).status is RecordStatus.TORN
    for call in (lambda: decode_record(log, -1), lambda: check_record(log, -100), lambda: scan_segment(log, -4)):
        with pytest.raises(OffsetOutOfRangeError):
            call()


def test_crc_and_structure_damage(vectors, vec):
    log = bytearray((vectors / "commitlog.bin").read_bytes())
    at = vec[3]["commitLogOffset"]
    body_at = at + 88
    log[body_at] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_record(log, at)
    assert decode_record(log, at, check_crc=False).body != bytes.fromhex(vec[3]["body"])
    h, end, why = scan_segment(log, check_crc=True, stop_on_bad_crc=False)
    assert len(h) == 42 and np.flatnonzero(~h["crc_ok"]).tolist() == [3]
    assert scan_segment(log, check_crc=True)[1:] == (at, RecordStatus.CORRUPT)
    assert scan_segment(log)[1:] == (len(log), RecordStatus.END)
    # a size field that disagrees with the lengths is a torn ("half") record
    log2 = bytearray((vectors / "commitlog.bin").read_bytes())
    struct.pack_into(">i", log2, at, vec[3]["storeSize"] - 1)
    assert check_record(log2, at).status is RecordStatus.TORN
    with pytest.raises(TornRecordError):
        decode_record(log2, at)
    # a negative body length is impossible
    log3 = bytearray((vectors / "commitlog.bin").read_bytes())
    struct.pack_into(">i", log3, at + 84, -5)
    assert check_record(log3, at).status is RecordStatus.CORRUPT


def test_buffer_types(vectors, vec, tmp_path):
    log = (vectors / "commitlog.bin").read_bytes()
    path = tmp_path / "seg"
    path.write_bytes(log + bytes(1000))
    want = decode_record(log, vec[9]["commitLogOffset"])
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)

        def check(buf):
            assert decode_record(buf, vec[9]["commitLogOffset"]) == want
            assert check_record(buf, vec[9]["commitLogOffset"]).ok
            h, end, why = scan_segment(buf, check_crc=True)
            assert len(h) == 42 and end == len(log) and why is RecordStatus.END

        for buf in (bytearray(log), memoryview(log), mm):
            check(buf)
        del buf
        with memoryview(mm) as mv:
            check(mv)
            check(mv[:len(log)])
        mm.close()      # nothing the decoders returned may still hold a view of the map


# ---------------------------------------------------------------- hypothesis

def _text(min_size=0, max_size=30):
    return st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                   min_size=min_size, max_size=max_size)

int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
hosts = st.tuples(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str), int32)


@st.composite
def stored_messages(draw, long_topics=True):
    topic = draw(st.one_of(_text(1, 40), _text(100, 200) if long_topics else _text(1, 5),
                           st.text("abc", min_size=120, max_size=140)))
    return StoredMessage(
        queue_id=draw(int32), flag=draw(int32), queue_offset=draw(int64), commit_log_offset=draw(int64),
        sys_flag=draw(int32), born_timestamp=draw(int64), born_host=draw(hosts),
        store_timestamp=draw(int64), store_host=draw(hosts), reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64), body=draw(st.binary(max_size=300)), topic=topic,
        properties=draw(st.dictionaries(_text(1, 12), _text(1, 20), max_size=6)))


def expected_after_round_trip(s, rec):
    born, store = ipaddress.ip_address(s.born_host[0]), ipaddress.ip_address(s.store_host[0])
    sys_flag = (s.sys_flag & ~0x30) | (0x10 if born.version == 6 else 0) | (0x20 if store.version == 6 else 0)
    version = choose_version(s.topic)
    return replace(s, total_size=len(rec), body_crc=body_crc(s.body), sys_flag=sys_flag,
                   magic_code=MESSAGE_MAGIC_CODE_V2 if version == 2 else MESSAGE_MAGIC_CODE,
                   born_host=(str(born), s.born_host[1]), store_host=(str(store), s.store_host[1]))


@settings(max_examples=200, deadline=None)
@given(stored_messages())
def test_round_trip(s):
    rec = encode_record(s)
    assert decode_record(rec) == expected_after_round_trip(s, rec)
    assert encode_record(decode_record(rec)) == rec
    r = check_record(rec, 0)
    assert r.ok and r.size == len(rec) and r.message.body is None


@settings(max_examples=100, deadline=None)
@given(stored_messages(long_topics=False), st.data())
def test_every_cut_is_torn_or_end(s, data):
    rec = encode_record(s)
    k = data.draw(st.integers(0, len(rec) - 1))
    r = check_record(rec[:k], 0)
    assert r.status in (RecordStatus.TORN, RecordStatus.END)
    assert r.status is RecordStatus.TORN or not any(rec[:k])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 210))
def test_garbage_never_raises_unexpectedly(junk, pos):
    r = check_record(junk, pos)
    assert r.status in RecordStatus
    h, end, why = scan_segment(junk, start=min(pos, len(junk)))
    assert why is not RecordStatus.OK and end <= max(len(junk), pos)


def assert_scan_agrees(buf, headers, check_crc=False):
    assert headers.dtype == SCAN_DTYPE
    for row in headers:
        pos = int(row["offset"])
        s = decode_record(buf, pos, check_crc=check_crc)
        assert (row["total_size"], row["magic"], row["body_crc"], row["queue_id"], row["flag"],
                row["queue_offset"], row["commit_log_offset"], row["sys_flag"], row["born_timestamp"],
                row["store_timestamp"], row["reconsume_times"], row["prepared_transaction_offset"]) == (
            s.total_size, s.magic_code, s.body_crc, s.queue_id, s.flag, s.queue_offset, s.commit_log_offset,
            s.sys_flag, s.born_timestamp, s.store_timestamp, s.reconsume_times, s.prepared_transaction_offset)
        assert (header_ip(row, "born"), int(row["born_port"])) == s.born_host
        assert (header_ip(row, "store"), int(row["store_port"])) == s.store_host
        assert bytes(buf[row["body_pos"]:row["body_pos"] + row["body_len"]]) == s.body
        assert bytes(buf[row["topic_pos"]:row["topic_pos"] + row["topic_len"]]).decode() == s.topic
        assert decode_properties(bytes(buf[row["props_pos"]:row["props_pos"] + row["props_len"]])) == s.properties
        assert row["props_pos"] + row["props_len"] == pos + s.total_size


tails = st.one_of(st.just(b""), st.binary(min_size=1, max_size=40).map(lambda b: bytes(len(b))),
                  st.integers(8, 5000).map(encode_blank), st.binary(min_size=1, max_size=60))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_messages(long_topics=False), max_size=12), tails, st.booleans(), st.data())
def test_scan_segment_agrees_with_decode_record(msgs, tail, cut_last, data):
    recs = [encode_record(s) for s in msgs]
    if cut_last and recs:
        recs[-1] = recs[-1][:data.draw(st.integers(1, len(recs[-1]) - 1))]
        tail = b""
    buf = b"".join(recs) + tail
    start = data.draw(st.sampled_from([0, 0, 3]))
    buf = bytes(start) + buf if start else buf
    headers, end, why = scan_segment(buf, start=start)
    # the walk with check_record stops at the same place for the same reason
    pos, n = start, 0
    while (r := check_record(buf, pos, check_crc=False)).ok:
        pos += r.size; n += 1
    assert (end, why, len(headers)) == (pos, r.status, n)
    whole = len(msgs) - (1 if cut_last and msgs else 0)
    assert n >= whole
    assert headers["offset"][:whole].tolist() == [start + sum(map(len, recs[:i])) for i in range(whole)]
    if cut_last and msgs:
        assert why in (RecordStatus.TORN, RecordStatus.END)
    assert_scan_agrees(buf, headers)


# ---------------------------------------------------------------- fast paths (chapter 11)

def _scan_equal(a, b):
    (ha, ea, wa), (hb, eb, wb) = a, b
    assert (ea, wa, len(ha)) == (eb, wb, len(hb))
    assert ha.tobytes() == hb.tobytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(stored_messages(long_topics=False), max_size=10), tails, st.data())
def test_fast_scan_equals_reference_walk(msgs, tail, data):
    "scan_segment's size hop + numpy checks give the reference walk's rows, stop and reason, even on damage."
    buf = bytearray(b"".join(encode_record(s) for s in msgs) + tail)
    for _ in range(data.draw(st.integers(0, 3))):          # flip bytes anywhere: sizes, lengths, bodies
        if buf:
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()) and buf:
        buf = buf[:data.draw(st.integers(0, len(buf)))]
    buf = bytes(buf)
    for check_crc in (False, True):
        for stop in (False, True):
            _scan_equal(scan_segment(buf, check_crc=check_crc, stop_on_bad_crc=stop),
                        scan_segment(buf, check_crc=check_crc, stop_on_bad_crc=stop, fast=False))


def test_fast_scan_on_vectors(vectors):
    for name in ("commitlog.bin", "edge/commitlog_zero_padded.bin", "edge/commitlog_blank_eof.bin",
                 "edge/truncated_last_record.bin"):
        buf = (vectors / name).read_bytes()
        for start in (0, 1, 7):
            _scan_equal(scan_segment(buf, start, check_crc=True), scan_segment(buf, start, check_crc=True, fast=False))


@settings(max_examples=200, deadline=None)
@given(stored_messages())
def test_encode_message_fast_path_equals_careful_path(s):
    "encode_record/encode_message try pack_record first; the careful encoder (explicit version) agrees."
    version = choose_version(s.topic)
    assert encode_record(s) == encode_record(s, version=version)
    m = s.to_message()
    assert encode_message(m, s.store_host) == encode_message(m, s.store_host, version=version)


def test_fast_path_refusals_match_careful_path():
    bad = [dict(properties={"A": None, "B": "b"}), dict(properties={"": "x"}), dict(properties={"a\x01": "x"}),
           dict(properties={"a": "x\x02y"}), dict(properties={1: "x"}), dict(queue_id=2**31), dict(flag=1.5),
           dict(body=bytearray(b"abc")), dict(body=memoryview(b"abc")), dict(topic=""), dict(born_host=("::1", 7)),
           dict(born_host=("nope", 1)), dict(properties={"K": "\ud800"})]
    for change in bad:
        m = replace(Message("T", b"x", properties={"A": "a"}), **change)
        try:
            want = encode_message(m, version=choose_version(m.topic) if isinstance(m.topic, str) and m.topic else 1)
        except MessageError as e:
            with pytest.raises(type(e)):
                encode_message(m)
        else:
            assert encode_message(m) == want
