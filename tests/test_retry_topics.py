"""Issue 25, item 11: retry and dead-letter topics (`%RETRY%` + group, `%DLQ%` + group).

RocketMQ's TopicValidator.validateTopic allows them up to RETRY_OR_DLQ_TOPIC_MAX_LENGTH (255)
characters, other topics up to 127; past 127 characters CommitLog writes a version-2 record
(MessageExtEncoder, 2-byte topic length). 255 is also the longest name a consume-queue folder
can have (NAME_MAX), so `%RETRY%` + a 255-character group (262) is refused, before writing.
"""
import json, os

import pytest
from mqstore.accel import _forced as _switch     # the stack fast_paths() pushes: True fast, False reference

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig, FLUSH_SYNC
from mqstore.consume_queue import GetMessageStatus
from mqstore.errors import InvalidTopicError
from mqstore.message import Message, MESSAGE_MAGIC_CODE_V2, patch_record
from mqstore.store import MessageStore, check_topic

V2_CASES = ("v2_topic_128", "v2_topic_200", "v2_ipv6_unicode")
RETRY = "%RETRY%" + "g" * 248                   # 255 characters: the longest RocketMQ allows
DLQ = "%DLQ%" + "g" * 250


@pytest.fixture(scope="module")
def vec(vectors):
    return {v["name"]: v for v in map(json.loads, (vectors / "messages.jsonl").read_text().splitlines())}


def message_of(v, topic=None):
    props = dict(p.split("\x01", 1) for p in v["propertiesString"].split("\x02") if p)
    return Message(topic or v["topic"], bytes.fromhex(v["body"]), flag=v["flag"], properties=props,
                   queue_id=v["queueId"], sys_flag=v["sysFlag"], born_timestamp=v["bornTimestamp"],
                   born_host=(v["bornHostIp"], v["bornHostPort"]), reconsume_times=v["reconsumeTimes"],
                   prepared_transaction_offset=v["preparedTransactionOffset"])


def config_of(v):
    return StoreConfig.small(store_host=(v["storeHostIp"], v["storeHostPort"]))


def expected(vectors, v, topic=None):
    "The vector's bytes; with `topic` (same length), the same record for that topic."
    raw = bytearray((vectors / v["file"]).read_bytes())
    if topic is not None:
        old = v["topic"].encode()
        at = raw.index(len(old).to_bytes(2, "big") + old) + 2
        raw[at:at + len(old)] = topic.encode()
    return bytes(raw)


def written(log, result, v):
    "The record a put wrote, with the vector's queue and physical offsets."
    mf = log.mfq.find_by_offset(result.commit_log_offset)
    pos = result.commit_log_offset - mf.file_from_offset
    rec = bytearray(mf._mm[pos:pos + result.size])
    patch_record(rec, queue_offset=v["queueOffset"], commit_log_offset=v["commitLogOffset"])
    return bytes(rec)


def put_each_way(log_or_store, msg):
    "PutResults of a single put, a compiled put_batch and a per-message put_batch."
    out = [log_or_store.put(msg)]
    for accel in ("1", "0"):
        _switch.append(accel == "1")
        try:
            out.append(log_or_store.put_batch([msg])[0])
        finally:
            _switch.pop()
    return out


@pytest.mark.parametrize("name", V2_CASES)
def test_commit_log_writes_rocketmqs_v2_records_byte_for_byte(tmp_path, vectors, vec, name):
    v = vec[name]
    log = CommitLog(tmp_path, config_of(v), clock=lambda: v["storeTimestamp"]).load()
    for r in put_each_way(log, message_of(v)):
        assert written(log, r, v) == expected(vectors, v)
    log.shutdown()


@pytest.mark.parametrize("name", V2_CASES)
def test_store_puts_retry_topics_as_rocketmqs_v2_records(tmp_path, vectors, vec, name):
    "The vector with its topic bytes swapped for a %RETRY% / %DLQ% topic of the same length."
    v = vec[name]
    n = len(v["topic"])
    for topic in ("%RETRY%" + "G" * (n - 7), "%DLQ%" + "G" * (n - 5)):
        with MessageStore.open(tmp_path / topic[:3], config_of(v), clock=lambda: v["storeTimestamp"]) as s:
            for r in put_each_way(s, message_of(v, topic)):
                assert written(s.commit_log, r, v) == expected(vectors, v, topic)


@pytest.mark.parametrize("topic", [RETRY, DLQ, "%RETRY%g", "%DLQ%" + "x" * 123])
def test_retry_and_dlq_topics_are_accepted_up_to_255_characters(topic):
    check_topic(topic)


@pytest.mark.parametrize("topic", ["%RETRY%" + "g" * 255, "%DLQ%" + "g" * 251, "%RETRY%" + "g" * 249,
                                   "T" * 128, "%RETR" + "g" * 200, "x%RETRY%" + "g" * 200, "%RETRY%g/h"])
def test_longer_or_other_topics_are_refused_before_writing(tmp_path, topic):
    with MessageStore.open(tmp_path, StoreConfig.small()) as s:
        with pytest.raises(InvalidTopicError, match="127|255|characters"):
            s.put(Message(topic, b"x"))
        with pytest.raises(InvalidTopicError):
            s.put_batch([Message("T", b"ok"), Message(topic, b"x")])
        assert s.commit_log.max_offset == 0


def put_retry_messages(store, n, tag):
    return [store.put(Message(topic, f"{tag}{i}".encode(), queue_id=i % 2, reconsume_times=1,
                              properties={"KEYS": f"k{tag}{i}", "TAGS": tag, "RETRY_TOPIC": "T"}))
            for i in range(n) for topic in (RETRY, DLQ)]


def assert_served(store, results, n_rounds):
    assert store.wait_dispatched()
    for topic in (RETRY, DLQ):
        for q in (0, 1):
            got = store.get(topic, q, 0, 100)
            assert got.status is GetMessageStatus.FOUND
            assert all(m.topic == topic and m.version == 2 for m in got.messages)
            assert len(got.messages) == n_rounds
    for r in results:
        m = store.look(r.commit_log_offset)
        assert m.magic_code == MESSAGE_MAGIC_CODE_V2
        assert [x.commit_log_offset for x in store.query(m.topic, m.keys[0])] == [r.commit_log_offset]


def test_retry_topics_round_trip_through_close_reopen_and_crash(tmp_path):
    cfg = StoreConfig.small(commit_log_file_size=4096, flush_disk_type=FLUSH_SYNC)
    with MessageStore.open(tmp_path, cfg) as s:
        first = put_retry_messages(s, 20, "a")        # several segments
        assert_served(s, first, 10)
    with MessageStore.open(tmp_path, cfg) as s:       # clean reopen
        assert_served(s, first, 10)
        second = put_retry_messages(s, 20, "b")
        s.wait_dispatched()
        s.halt()                                      # a crash: abort file left behind
    assert (tmp_path / "abort").exists()
    with MessageStore.open(tmp_path, cfg) as s:       # abnormal recovery
        assert_served(s, first + second, 20)
    assert sorted(p.name for p in (tmp_path / "consumequeue").iterdir()) == sorted([RETRY, DLQ])
