"""CommitLog.put_batch, compiled (columns + write_records) and per-message (MQSTORE_ACCEL=0), against
N single puts: the same bytes in every segment, the same PutResults, the same queue table; and bad
input raises the error a single put raises, before anything is written (chapter 4's excursions)."""
import os
import numpy as np
import pytest
from mqstore.accel import _forced as _switch     # the stack fast_paths() pushes: True fast, False reference
from hypothesis import HealthCheck, given, settings, strategies as st

from mqstore.commit_log import CommitLog
from mqstore.fast.put import batch_columns, _write_columns
from mqstore.config import StoreConfig
from mqstore.errors import MessageError, MessageTooLargeError
from mqstore.message import Message, encode_message, stamp_record, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from mqstore.fast.records import compiled_kernels

_switch.append(True)                            # whether they exist, whatever MQSTORE_ACCEL says
_KERNELS = compiled_kernels()
_switch.pop()
pytestmark = pytest.mark.skipif(_KERNELS is None, reason="needs the compiled kernels")
TS = 1_700_000_000_123
PATHS = ("single", "compiled", "python")


def new_log(path, **cfg):
    return CommitLog(path, StoreConfig.small(**cfg), clock=lambda: TS).load()


def files_bytes(log):
    return [(mf.name, bytes(mf._mm[:mf.wrote_position])) for mf in log.mfq.files]


def put_all(root, msgs, sizes, **cfg):
    "The three logs: single puts, put_batch compiled, put_batch with MQSTORE_ACCEL=0 (results, log)."
    out = {}
    for path in PATHS:
        log = new_log(root / path, **cfg)
        results = []
        if path == "single":
            results = [log.put(m) for m in msgs]
        else:
            _switch.append(path == "compiled")
            try:
                i = 0
                for k in sizes:
                    results.extend(log.put_batch(msgs[i:i + k]))
                    i += k
            finally:
                _switch.pop()
        out[path] = (results, log)
    return out


def assert_same(out):
    results, log = out["single"]
    for path in PATHS[1:]:
        r, other = out[path]
        assert r == results, path
        assert files_bytes(other) == files_bytes(log), path
        assert other.topic_queue_table == log.topic_queue_table and other.max_offset == log.max_offset, path
    for _, lg in out.values():
        lg.shutdown()


TOPICS = st.sampled_from(["A", "Topic-B", "é-topic", "T" * 127, "V" * 128, "ü" * 70, "L" * 3000])
HOSTS = st.sampled_from([("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 2), ("fe80::1:2", 40000),
                         ("2001:db8::7", 0)])
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"), max_size=12)
PROPS = st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "région", "x"]), TEXT, max_size=4)


@st.composite
def messages(draw):
    body = draw(st.sampled_from([b"", b"x", None, "big", "max"]))
    body = {None: draw(st.binary(max_size=300)), "big": bytes(range(256)) * 40, "max": b"m" * (16 * 1024)}.get(body, body)
    return Message(draw(TOPICS), body, flag=draw(st.integers(-2**31, 2**31 - 1)), properties=draw(PROPS),
                   queue_id=draw(st.integers(0, 3)), born_host=draw(HOSTS),
                   sys_flag=draw(st.sampled_from([0, 0, 0x1, 0x2, TRANSACTION_COMMIT_TYPE, 0x30])),
                   born_timestamp=draw(st.integers(-2**63, 2**63 - 1)),
                   reconsume_times=draw(st.integers(0, 16)),
                   prepared_transaction_offset=draw(st.integers(0, 2**63 - 1)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), min_size=1, max_size=60), st.data(),
       st.sampled_from([("127.0.0.1", 10911), ("::ffff:10.0.0.1", 7)]))
def test_batch_paths_write_the_bytes_of_single_puts(tmp_path_factory, msgs, data, store_host):
    "Rolls mid-batch (64 KiB segments, bodies up to the 16 KiB limit), v2 topics, IPv6 hosts, empty bodies."
    sizes, left = [], len(msgs)
    while left:
        sizes.append(data.draw(st.integers(1, left)))
        left -= sizes[-1]
    assert_same(put_all(tmp_path_factory.mktemp("b"), msgs, sizes, store_host=store_host))


def test_mix_of_many_segments_and_queues(tmp_path):
    "Hundreds of records over several segments and queues, in batches of 1 to 97."
    rng = np.random.default_rng(5)
    msgs = [Message(f"T{i % 5}", bytes(rng.integers(0, 256, int(rng.integers(0, 3000)), np.uint8)),
                    queue_id=i % 3, properties={"TAGS": f"t{i % 4}", "UNIQ_KEY": f"{i:032X}"} if i % 7 else {},
                    born_host=("::1", 9) if i % 6 == 0 else ("10.0.0.7", i % 50)) for i in range(600)]
    sizes, left = [], 600
    while left:
        sizes.append(min(left, int(rng.integers(1, 98))))
        left -= sizes[-1]
    out = put_all(tmp_path, msgs, sizes)
    assert len(out["single"][1].mfq.files) > 10 and any(r.rolled for r in out["compiled"][0])
    assert_same(out)


def test_transactions_take_the_per_message_queue_offsets(tmp_path):
    "Prepared and rolled-back records take no queue offset (the hook decides): same as single puts."
    msgs = [Message("T", b"p%d" % i, queue_id=i % 2,
                    sys_flag=[0, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE][i % 4])
            for i in range(50)]
    assert_same(put_all(tmp_path, msgs, [7, 20, 23]))


def test_unusual_but_valid_messages_go_the_careful_way(tmp_path):
    "None property values, bytearray bodies, list hosts, bool and numpy fields: the same bytes either way."
    msgs = [Message("T", bytearray(b"ba"), properties={"TAGS": "a", "X": None}),
            Message("T", b"b", born_host=["10.0.0.1", 5]),
            Message("T", b"c", flag=True, queue_id=np.int64(1)),
            Message("T", b"dd", properties=None), Message("T", memoryview(b"mv")),
            Message("T", b"e", born_host=("10.0.0.1", np.int32(6)))]
    assert all(batch_columns([m], ("127.0.0.1", 1), 1 << 20) is None for m in msgs)    # plain types only
    assert_same(put_all(tmp_path, msgs * 3, [6, 12]))


BAD = [Message("", b"x"), Message(5, b"x"), Message("T", None), Message("T", b"x" * (16 * 1024 + 1)),
       Message("T", b"x", properties={"TAGS": "a\x01b"}), Message("T", b"x", properties={"": "v"}),
       Message("T", b"x", properties={"K": "a\x02"}), Message("T", b"x", properties={"K": 5}),
       Message("T", b"x", properties={1: "v"}), Message("T", b"x", properties={"K": "v" * 40_000}),
       Message("T", b"x", properties={"K": "\ud800"}), Message("\ud800", b"x"),
       Message("T", b"x", queue_id=2**31), Message("T", b"x", flag=1.5), Message("T", b"x", sys_flag=-2**31 - 1),
       Message("T", b"x", born_timestamp=2**63), Message("T", b"x", reconsume_times="1"),
       Message("T", b"x", born_host=("300.1.1.1", 1)), Message("T", b"x", born_host=("10.0.0.1", 1.5)),
       Message("T", b"x", born_host=("10.0.0.1", 2**40)), Message("T", b"x", born_host=("10.0.0.1",)),
       Message("T" * 40_000, b"x")]


@pytest.mark.parametrize("bad", range(len(BAD)))
@pytest.mark.parametrize("accel", ["1", "0"])
def test_a_bad_message_raises_before_anything_is_written(tmp_path, bad, accel):
    "The error (class and text) a single put raises, wherever the message sits, and no byte written."
    with pytest.raises(Exception) as single:
        encode_message(BAD[bad], ("127.0.0.1", 10911), max_body_size=16 * 1024)
    log = new_log(tmp_path)
    log.put(Message("T", b"first"))
    end, table = log.max_offset, dict(log.topic_queue_table)
    _switch.append(accel == "1")
    try:
        for at in (0, 3):
            batch = [Message("T", b"ok%d" % i, born_host=("10.0.0.1", 1)) for i in range(4)]
            batch.insert(at, BAD[bad])
            with pytest.raises(type(single.value)) as got:
                log.put_batch(batch)
            assert str(got.value) == str(single.value)
            assert log.max_offset == end and log.topic_queue_table == table
    finally:
        _switch.pop()
    log.shutdown()


def test_a_record_too_big_for_the_segment(tmp_path):
    log = new_log(tmp_path, max_message_size=70_000)
    for accel in ("1", "0"):
        _switch.append(accel == "1")
        try:
            with pytest.raises(MessageTooLargeError, match="cannot fit"):
                log.put_batch([Message("T", b"x"), Message("T", bytes(65_500))])
        finally:
            _switch.pop()
    assert log.max_offset == 0
    log.shutdown()


def test_many_distinct_topics_and_hosts_rebuild_the_piece_tables(tmp_path):
    "Past 4,096 distinct values the tables start again; the bytes do not change."
    msgs = [Message(f"topic-{i}", b"b", born_host=(f"10.{i // 250 % 250}.{i % 250}.1", i)) for i in range(5000)]
    assert_same(put_all(tmp_path, msgs, [1000, 3000, 1000], commit_log_file_size=1 << 20))


def test_a_transient_segment_takes_the_scratch_buffer(tmp_path):
    "A segment whose append goes to a write buffer (TransientMappedFile) gets the same bytes, via the scratch copy."
    from mqstore.mapped_file import MappedFile, TransientMappedFile
    msgs = [Message(f"T{i % 3}", bytes([i]) * (i * 7), properties={"TAGS": "x"} if i % 2 else {},
                    born_host=("::1", 3) if i % 4 == 0 else ("10.0.0.1", 3)) for i in range(40)]
    cols = batch_columns(msgs, ("127.0.0.1", 10911), 1 << 20)
    offsets = np.cumsum(cols.sizes) - cols.sizes
    queue_offsets = np.arange(40, dtype=np.int64)
    log = new_log(tmp_path / "log")
    out = []
    for cls in (MappedFile, TransientMappedFile):
        mf = cls.create(tmp_path / cls.__name__, 0, 1 << 16)
        _switch.append(True)                    # the compiled writer, whatever MQSTORE_ACCEL says
        try:
            _write_columns(log, mf, cols, 0, 40, queue_offsets, offsets, TS)
        finally:
            _switch.pop()
        assert mf.wrote_position == int(cols.sizes.sum())
        mf.commit()
        out.append(mf.read(0, mf.wrote_position))
        mf.close()
    want = bytearray()
    for m, q, off in zip(msgs, queue_offsets.tolist(), offsets.tolist()):
        rec = encode_message(m, ("127.0.0.1", 10911))
        stamp_record(rec, 0, q, off, TS)
        want += rec
    assert out[0] == out[1] == bytes(want)
    log.shutdown()


# ---------------------------------------------------------------- MessageStore.put_batch: every message checked first (chapter 7)
from mqstore.consume_queue import MAX_QUEUE_ID
from mqstore.store import MessageStore, check_message


class Str(str):
    pass


class Props(dict):
    pass


class Msg(Message):
    pass


def odd_queue_offset(value):
    m = Message("T", b"q")
    m.queue_offset = value
    return m


STORE_BAD = [Message("a/b", b"x"), Message("with space", b"x"), Message("x" * 128, b"x"), Message(Str("T"), b"x"),
             Message("T", b"x", queue_id=-1), Message("T", b"x", queue_id=MAX_QUEUE_ID + 1),
             Message("T", b"x", flag=True), Message("T", b"x", sys_flag=np.int32(0)), Message("T", b"x", reconsume_times=1.0),
             Message("T", b"x", born_host=("10.0.0.1", 65536)), Message("T", b"x", born_host=("10.0.0.1", True)),
             Message("T", b"x", born_host=("10.0.0.1", -1)), Message("T", b"x", born_host=("10.0.0.x", 1)),
             Message("T", b"x", born_host=["10.0.0.1", 1, 2]), Message("T", b"x", properties={"K": Str("v")}),
             Message("T", b"x", properties={Str("K"): "v"}), Message("T", b"x", properties=Props(K="v")),
             Message("T", b"x", properties={"K": None}), Message("T", "text"), odd_queue_offset("1"),
             odd_queue_offset(2**63), "not a message"] + BAD[:3] + BAD[5:12]


def raised(call):
    try:
        call()
    except Exception as e:
        return type(e), str(e)
    return None


@pytest.mark.parametrize("bad", range(len(STORE_BAD)))
def test_the_store_batch_raises_what_put_raises_before_writing(tmp_path, bad):
    "Wherever the bad message sits, put_batch raises the error (class and text) that put raises, and writes nothing."
    with MessageStore.open(tmp_path, StoreConfig.small()) as store:
        store.put(Message("T", b"first"))
        want = raised(lambda: store.put(STORE_BAD[bad]))
        assert want is not None
        end = store.commit_log.max_offset
        for at in (0, 5):
            batch = [Message("T", b"ok%d" % i, born_host=("10.0.0.%d" % (i + 1), 7)) for i in range(6)]
            batch.insert(at, STORE_BAD[bad])
            assert raised(lambda: store.put_batch(batch)) == want
            assert store.commit_log.max_offset == end


@st.composite
def store_messages(draw):
    "Mostly valid messages of plain types, some with one of the faults check_message refuses."
    m = Message(draw(st.sampled_from(["T", "Topic_b", "a|b%c", "a/b", "", "é", Str("T")])),
                draw(st.sampled_from([b"", b"body", bytearray(b"ba")])),
                flag=draw(st.sampled_from([0, 7, -2**31, 2**31, True])),
                properties=draw(st.sampled_from([{}, {"TAGS": "a"}, {"K": Str("v")}, {"K": 1}, Props(TAGS="a")])),
                queue_id=draw(st.sampled_from([0, 3, MAX_QUEUE_ID, MAX_QUEUE_ID + 1, -1, np.int64(1)])),
                born_host=draw(st.sampled_from([("10.0.0.1", 1), ("::1", 65535), ("10.0.0.1", 65536),
                                                ("10.0.0.1", False), ("bad", 1), ["10.0.0.1", 2]])),
                born_timestamp=draw(st.sampled_from([0, 2**63 - 1, 2**63])))
    return m if draw(st.booleans()) else draw(st.sampled_from([m, Msg("T"), odd_queue_offset(5), odd_queue_offset(1.5)]))


def test_the_store_batch_writes_what_single_puts_write(tmp_path):
    "MessageStore.put_batch against MessageStore.put: the same log, queues and index, byte for byte."
    import random
    rng = random.Random(3)
    msgs = [Message(rng.choice(["A", "Topic-B", "c%d" % (i % 3)]), rng.randbytes(rng.randrange(0, 3000)),
                    queue_id=rng.randrange(4), flag=rng.choice([0, -5, 2**31 - 1]), sys_flag=rng.choice([0, 1, 2]),
                    properties={"TAGS": f"t{i % 5}", "UNIQ_KEY": f"{i:032X}", **({"KEYS": f"k{i} k{i + 1}"} if i % 3 else {}),
                                **({"région": "é" * (i % 4)} if i % 4 else {})},
                    born_timestamp=1_700_000_000_000 + i, born_host=("::1", i) if i % 6 == 0 else ("10.0.0.%d" % (i % 250), 9))
            for i in range(400)]
    roots = {}
    for how in ("put", "put_batch"):
        root = roots[how] = tmp_path / how
        with MessageStore.open(root, StoreConfig.small(), clock=lambda: TS) as store:
            if how == "put":
                for m in msgs:
                    store.put(m)
            else:
                i = 0
                while i < len(msgs):
                    k = rng.randrange(1, 90)
                    store.put_batch(msgs[i:i + k])
                    i += k
            assert store.wait_dispatched()
    files = {how: {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*"))
                   if p.is_file() and p.name not in ("lock", "abort", "checkpoint")} for how, root in roots.items()}
    assert len(files["put"]) > 10 and files["put"] == files["put_batch"]
