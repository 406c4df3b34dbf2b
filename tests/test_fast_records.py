"""Chapter 10.1: every fast version in `mqstore.fast.records` and `mqstore.fast.put` against the reference
it replaces (chapters 3 and 4), on random and on damaged or bad input: the same return values, the same
files (the commit-log folders compared byte for byte), the same exceptions (same class, same text).

The references run with the fast paths off (`accel.fast_paths(False)`), so that a reference calling
another accelerated function (encode_message calls encode_record) runs the reference all the way down."""
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from mqstore import accel
import mqstore.fast.put as fast_put
import mqstore.fast.records as fast_records
from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, StoredMessage, encode_record, encode_message, walk_records, encode_blank

TESTED = {"mqstore.message.encode_record", "mqstore.message.encode_message", "mqstore.message.walk_records",
          "mqstore.commit_log.CommitLog.put", "mqstore.commit_log.CommitLog.put_batch",
          "mqstore.store.MessageStore.put"}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def test_every_replacement_has_a_test_here():
    assert set(fast_records.REPLACES) | set(fast_put.REPLACES) == TESTED
    assert set(accel.replacements()) >= TESTED


def outcome(f, *args, **kw):
    "What a call gives: ('ok', the result) or ('raises', the exception's class, its text)."
    try:
        return ("ok", f(*args, **kw))
    except Exception as e:          # the class and the words must be the same on both sides
        return ("raises", type(e), str(e))


def reference(f, *args, **kw):
    with accel.fast_paths(False):
        return outcome(f.reference, *args, **kw)


# ---------------------------------------------------------------- messages, good and bad

ints = st.one_of(st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1), st.sampled_from([2**31, -2**63 - 1, 2**64]))
anything = st.sampled_from([None, 1.5, "1", b"x", True, [1]])
topics = st.one_of(st.sampled_from(["T", "TopicA", "主题", "%RETRY%" + "g" * 140, "T" * 127, "主" * 50, "", "\ud800"]),
                   st.text(min_size=0, max_size=20), anything)
bodies = st.one_of(st.binary(max_size=300), st.binary(max_size=20).map(bytearray),
                   st.binary(max_size=20).map(memoryview), st.just(b"x" * 70_000), anything)
names = st.one_of(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "", "a\x01b", "a\x02"]), st.text(max_size=6))
values = st.one_of(st.text(max_size=12), st.sampled_from(["", "a\x01b", "a\x02", "v" * 40_000, None, 5]))
properties = st.one_of(st.dictionaries(names, values, max_size=5), st.none(), st.just([("TAGS", "a")]))
hosts = st.one_of(st.sampled_from([("10.0.0.1", 5), ("2001:db8::1", 9), ["10.0.0.2", 7], ("::1", 2**40),
                                   ("300.1.1.1", 1), ("10.0.0.1",), "10.0.0.1:5", ("10.0.0.1", 1.5)]),
                  st.tuples(st.ip_addresses().map(str), st.integers(-2**31, 2**31 - 1)))


def message_strategy(cls, **extra):
    fields = dict(topic=topics, body=bodies, properties=properties, queue_id=st.one_of(ints, anything),
                  flag=ints, sys_flag=st.one_of(st.sampled_from([0, 4, 8, 12, 0x30, 0x301]), ints),
                  born_timestamp=ints, born_host=hosts, reconsume_times=ints,
                  prepared_transaction_offset=ints, **extra)
    return st.builds(cls, **fields)


stored_messages = message_strategy(StoredMessage, queue_offset=ints, commit_log_offset=ints,
                                   store_timestamp=ints, store_host=hosts)
producer_messages = message_strategy(Message)


@SETTINGS
@given(stored_messages, st.sampled_from([None, 1, 2, 3]), st.sampled_from([4 << 20, 100]))
def test_encode_record_same_bytes_or_same_error(msg, version, limit):
    "mqstore.message.encode_record: the fast version (pack_record first) against the careful reference."
    fast = fast_records.REPLACES["mqstore.message.encode_record"]
    assert outcome(fast, msg, version=version, max_body_size=limit) == \
        reference(encode_record, msg, version=version, max_body_size=limit)


@SETTINGS
@given(st.one_of(producer_messages, stored_messages, st.sampled_from([None, "msg", 5])), hosts,
       st.sampled_from([None, 1, 2]))
def test_encode_message_same_bytes_or_same_error(msg, store_host, version):
    "mqstore.message.encode_message: same bytearray, or the same error, for messages good and bad."
    fast = fast_records.REPLACES["mqstore.message.encode_message"]
    got, want = outcome(fast, msg, store_host, version=version), reference(encode_message, msg, store_host, version=version)
    assert got == want
    if got[0] == "ok":
        assert type(got[1]) is bytearray


# ---------------------------------------------------------------- segments, whole and damaged

def good_record(i, rng_body, v6, long_topic, props):
    return encode_record(StoredMessage(
        topic=("%RETRY%" + "g" * 140) if long_topic else f"T{i % 3}", body=rng_body, properties=props,
        queue_id=i % 4, queue_offset=i, commit_log_offset=1000 + i, born_timestamp=1_700_000_000_000 + i,
        born_host=("2001:db8::7", 9) if v6 else ("10.0.0.7", 9), store_host=("10.0.0.2", 10911)))


records = st.lists(st.tuples(st.binary(max_size=200), st.booleans(), st.booleans(),
                             st.dictionaries(st.sampled_from(["TAGS", "KEYS", "X"]), st.text("abc xyz主", max_size=8), max_size=3)),
                   max_size=25)
DAMAGE = ("none", "truncate", "flip", "zeros", "size", "magic", "blank", "zero tail", "topic length", "garbage")


def damaged_segment(recs, damage, at, value):
    buf = bytearray(b"".join(good_record(i, *r) for i, r in enumerate(recs)))
    starts = [0]
    for i, r in enumerate(recs):
        starts.append(starts[-1] + len(good_record(i, *r)))
    p = starts[at % len(starts)] if starts else 0
    if damage == "truncate" and buf:
        del buf[value % len(buf):]
    elif damage == "flip" and buf:
        buf[value % len(buf)] ^= 1 << (value % 8)
    elif damage == "zeros" and buf:
        k = value % len(buf)
        buf[k:k + 64] = bytes(len(buf[k:k + 64]))
    elif damage == "size" and p + 4 <= len(buf):
        struct.pack_into(">i", buf, p, value % 400 - 100)
    elif damage == "magic" and p + 8 <= len(buf):
        struct.pack_into(">i", buf, p + 4, value)
    elif damage == "blank":
        buf += encode_blank(64) + bytes(56)
    elif damage == "zero tail":
        buf += bytes(value % 40)
    elif damage == "topic length" and p + 100 <= len(buf):
        buf[p + 88 + struct.unpack_from(">i", buf, p + 84)[0]] = 0x80 | value % 128
    elif damage == "garbage":
        buf += bytes([value % 256]) * (value % 30)
    return bytes(buf)


@SETTINGS
@given(records, st.sampled_from(DAMAGE), st.integers(0, 30), st.integers(0, 2**31 - 1),
       st.sampled_from(["bytes", "bytearray", "memoryview"]), st.booleans(), st.booleans(),
       st.one_of(st.none(), st.integers(-3, 5000)), st.one_of(st.none(), st.integers(-10, 6000)))
def test_walk_records_same_walk_on_damaged_segments(recs, damage, at, value, kind, check_crc, stop, start, end):
    "mqstore.message.walk_records: the same spans, stop and status (or the same error) on damaged segments."
    seg = damaged_segment(recs, damage, at, value)
    buf = {"bytes": seg, "bytearray": bytearray(seg), "memoryview": memoryview(seg)}[kind]
    kw = dict(end=end, check_crc=check_crc, stop_on_bad_crc=stop)
    s = 0 if start is None else start
    fast = fast_records.REPLACES["mqstore.message.walk_records"]
    assert outcome(fast, buf, s, **kw) == reference(walk_records, buf, s, **kw)


def test_walk_records_on_the_reference_vectors(vectors):
    "mqstore.message.walk_records on RocketMQ's own files: the log, the blank, the zero tail, the torn record."
    fast = fast_records.REPLACES["mqstore.message.walk_records"]
    for name in ("commitlog.bin", "edge/commitlog_blank_eof.bin", "edge/commitlog_zero_padded.bin",
                 "edge/truncated_last_record.bin"):
        buf = (vectors / name).read_bytes()
        for check_crc in (False, True):
            assert outcome(fast, buf, check_crc=check_crc) == reference(walk_records, buf, check_crc=check_crc)


# ---------------------------------------------------------------- puts: the same files

def folder_bytes(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def two_logs(tmp_path, tag, **cfg):
    config = StoreConfig.small(commit_log_file_size=4096, **cfg)
    return [CommitLog(tmp_path / f"{tag}-{side}", config, clock=lambda: 1_700_000_000_000,
                      queue_offset_hook=lambda m, tx: 77).load() for side in ("reference", "fast")]


plain_messages = st.builds(Message, topic=st.sampled_from(["A", "B", "主题"]), body=st.binary(max_size=900),
                           properties=st.dictionaries(st.sampled_from(["TAGS", "KEYS"]), st.text("abc xyz主", max_size=5), max_size=2),
                           queue_id=st.integers(0, 3), sys_flag=st.sampled_from([0, 0, 0, 4, 8, 12]),
                           born_host=st.sampled_from([("10.0.0.1", 5), ("2001:db8::1", 9)]))
some_messages = st.one_of(plain_messages, plain_messages, producer_messages, st.just(Message("A", bytes(5000))))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(some_messages, max_size=30))
def test_put_same_results_and_same_files(tmp_path_factory, msgs):
    "mqstore.commit_log.CommitLog.put: one message at a time, good and bad, into two logs: same answers, same files."
    tmp = tmp_path_factory.mktemp("put")
    ref, fast = two_logs(tmp, "put")
    fast_f = fast_put.REPLACES["mqstore.commit_log.CommitLog.put"]
    for m in msgs:
        assert outcome(fast_f, fast, m) == reference(CommitLog.put, ref, m)
    assert ref.topic_queue_table == fast.topic_queue_table and ref.max_offset == fast.max_offset
    ref.shutdown(); fast.shutdown()
    assert folder_bytes(tmp / "put-reference") == folder_bytes(tmp / "put-fast")


def as_list(r):
    "A BatchPutResult as plain values (its PutResults and status), or the outcome's error."
    return r if r[0] == "raises" else ("ok", r[1].status, list(r[1]), r[1].store_timestamp, r[1].next_offset)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.lists(some_messages, max_size=40), max_size=6), st.booleans())
def test_put_batch_same_results_and_same_files(tmp_path_factory, batches, sync):
    "mqstore.commit_log.CommitLog.put_batch: batches (some with a bad message) into two logs: same answers, same files."
    tmp = tmp_path_factory.mktemp("batch")
    ref, fast = two_logs(tmp, "batch", flush_disk_type="SYNC_FLUSH" if sync else "ASYNC_FLUSH")
    if sync:
        ref.start(); fast.start()
    fast_f = fast_put.REPLACES["mqstore.commit_log.CommitLog.put_batch"]
    for batch in batches:
        assert as_list(outcome(fast_f, fast, batch)) == as_list(reference(CommitLog.put_batch, ref, batch))
    for bad in (None, 5, [None]):
        assert outcome(fast_f, fast, bad) == reference(CommitLog.put_batch, ref, bad)
    assert ref.topic_queue_table == fast.topic_queue_table and ref.max_offset == fast.max_offset
    ref.shutdown(); fast.shutdown()
    assert folder_bytes(tmp / "batch-reference") == folder_bytes(tmp / "batch-fast")


def test_put_batch_of_plain_messages_takes_the_columns(tmp_path):
    "The case the compiled writer handles: a large plain batch, several segments, same files as the reference."
    msgs = [Message(f"T{i % 5}", bytes([i % 256]) * (i % 700), queue_id=i % 3, properties={"KEYS": f"k{i}"},
                    born_host=("::1", 9) if i % 7 == 0 else ("10.0.0.1", 5)) for i in range(2000)]
    assert fast_put.batch_columns(msgs, ("127.0.0.1", 10911), 1 << 20) is not None
    ref, fast = two_logs(tmp_path, "plain")
    fast_f = fast_put.REPLACES["mqstore.commit_log.CommitLog.put_batch"]
    for a in range(0, 2000, 500):
        assert as_list(outcome(fast_f, fast, msgs[a:a + 500])) == as_list(reference(CommitLog.put_batch, ref, msgs[a:a + 500]))
    ref.shutdown(); fast.shutdown()
    assert len(list((tmp_path / "plain-fast" / "commitlog").iterdir())) > 100
    assert folder_bytes(tmp_path / "plain-reference") == folder_bytes(tmp_path / "plain-fast")


def test_closed_and_read_only_logs_refuse_the_same_way(tmp_path):
    ref, fast = two_logs(tmp_path, "closed")
    ref.shutdown(); fast.shutdown()
    for name in ("mqstore.commit_log.CommitLog.put", "mqstore.commit_log.CommitLog.put_batch"):
        f = fast_put.REPLACES[name]
        arg = Message("A", b"x") if name.endswith(".put") else [Message("A", b"x")]
        assert outcome(f, fast, arg) == reference(getattr(CommitLog, name.rsplit(".", 1)[1]), ref, arg)
        assert outcome(f, fast, arg)[1].__name__ == "StoreClosedError"


# --- the C address parser of _packed_host answers as ipaddress does (issue 30: put's host cost) ---------------

_IP_SEEDS = ["1.2.3.4", "0.0.0.0", "255.255.255.255", "10.0.0.1", "::", "::1", "1::", "2001:db8::1",
             "::ffff:1.2.3.4", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3:4:5:6:1.2.3.4", "fe80::1%eth0"]
_IP_NOISE = "0123456789abcdefABCDEF:.% x-+\x00\u0663\u00e9"


@st.composite
def _ip_like(draw):
    s = list(draw(st.sampled_from(_IP_SEEDS)))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(s)))
        op = draw(st.sampled_from("insert delete replace".split()))
        ch = draw(st.sampled_from(_IP_NOISE))
        if op == "insert" or not s:
            s.insert(at, ch)
        elif op == "delete":
            del s[min(at, len(s) - 1)]
        else:
            s[min(at, len(s) - 1)] = ch
    return "".join(s)


@settings(max_examples=3000, deadline=None)
@given(_ip_like(), st.integers(0, 65535))
def test_packed_host_parses_addresses_exactly_as_ipaddress(ip, port):
    import ipaddress
    try:
        addr = ipaddress.ip_address(ip)
        expected = (addr.packed + struct.pack(">i", port), addr.version == 6)
    except ValueError:
        expected = ValueError
    try:
        got = fast_records._packed_host.__wrapped__(ip, port)
    except ValueError:
        got = ValueError
    assert got == expected, ip
    from mqstore.errors import InvalidMessageError
    from mqstore.store import check_host              # chapter 7's put check takes the same addresses
    try:
        check_host((ip, port), "born_host")
        checked = True
    except InvalidMessageError:
        checked = False
    assert checked == (expected is not ValueError), ip


def test_packed_host_takes_ipaddress_objects_and_scoped_v6():
    import ipaddress
    v4, v6 = ipaddress.ip_address("10.1.2.3"), ipaddress.ip_address("fe80::1%eth0")
    assert fast_records._packed_host.__wrapped__(v4, 7) == (v4.packed + struct.pack(">i", 7), False)
    assert fast_records._packed_host.__wrapped__("fe80::1%eth0", 7) == (v6.packed + struct.pack(">i", 7), True)


# ---------------------------------------------------------------- the store's put: the same stores

import sys
import threading

from mqstore.errors import MQStoreError
from mqstore.store import MessageStore

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from mixes import MIXES                                       # noqa: E402

odd_messages = st.sampled_from([
    Message("A", b"x", born_host=("fe80::1%eth0", 1)), Message("bad topic", b"x"), Message("%RETRY%g", b"r"),
    Message("A", b"x", born_host=("10.0.0.1", 70000)), Message("A", bytearray(b"y")), Message("A", b"x", queue_id=-1),
    Message("A", b"x", properties={"K": 1}), Message("A", b"x", properties={"K": "a\x01b"}), Message("T" * 128, b""),
    Message("A", b"x" * 5000), Message("A", b"p", sys_flag=4), Message("A", b"r", sys_flag=12), "not a message",
    Message("A", b"x", born_host=["10.0.0.1", 5]), Message("A", b"x", born_host=("10.0.0.1", True))])


def store_puts(root, msgs, on, sync=False, **cfg):
    "Every message through MessageStore.put with the fast paths on or off: (outcomes, files of the closed store)."
    from mqstore.config import FLUSH_SYNC
    config = StoreConfig.small(**{"commit_log_file_size": 8192, **({"flush_disk_type": FLUSH_SYNC} if sync else {}), **cfg})
    with accel.fast_paths(on):
        store = MessageStore.open(root / "store", config, clock=lambda: 1_700_000_000_000)   # one name: error texts
        try:
            out = [outcome(store.put, m) for m in msgs]
            assert store.wait_dispatched(60)
        finally:
            store.close()
        out.append(outcome(store.put, msgs[0] if msgs else Message("A")))      # a closed store refuses it
    return out, folder_bytes(root / "store")


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(some_messages, odd_messages), max_size=40), st.booleans())
def test_mqstore_store_MessageStore_put_same_results_and_same_stores(tmp_path_factory, msgs, sync):
    "mqstore.store.MessageStore.put: good and bad messages one by one, both ways: same answers, same store files."
    tmp = tmp_path_factory.mktemp("storeput")
    assert store_puts(tmp / "fast", msgs, True, sync) == store_puts(tmp / "reference", msgs, False, sync)


BIG = dict(commit_log_file_size=64 << 20, max_message_size=4 << 20)     # the large mix's bodies fit


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_store_put_writes_the_reference_bytes_on_every_mix(tmp_path, mix):
    "Each mix of benchmarks/mixes.py: commit log, consume queues and index the same, and the lean path taken."
    msgs = MIXES[mix](6 if mix == "large" else 300, first=1_000_000)
    taken, saved = [], fast_put._lean_parts
    fast_put._lean_parts = lambda s, m: (lambda p: (taken.append(p is not None), p)[1])(saved(s, m))
    try:
        fast = store_puts(tmp_path / "fast", msgs, True, **BIG)
    finally:
        fast_put._lean_parts = saved
    assert fast == store_puts(tmp_path / "reference", msgs, False, **BIG)
    assert taken == [True] * len(msgs) + [False]              # the last: into the closed store
    assert {k.split("/")[0] for k in fast[1]} >= {"commitlog", "consumequeue", "index"}


def test_store_put_takes_the_reference_when_the_store_cannot_take_it(tmp_path):
    "A dead service, a subclass of CommitLog, a patched put, a read-only store: the reference's answer."
    msg = Message("A", b"x")
    with accel.fast_paths(True):
        store = MessageStore.open(tmp_path / "s", StoreConfig.small())
        try:
            store.reput.error = RuntimeError("boom")
            assert outcome(store.put, msg)[1] is type(outcome(MessageStore.put.reference, store, msg)[1]) \
                or outcome(store.put, msg) == outcome(MessageStore.put.reference, store, msg)
            assert fast_put._lean_parts(store, msg) is None
            store.reput.error = None
            assert fast_put._lean_parts(store, msg) is not None
            store.commit_log.put = lambda m: CommitLog.put(store.commit_log, m)
            assert fast_put._lean_parts(store, msg) is None
            del store.commit_log.put
            store.put(msg)
            assert store.wait_dispatched(10)
        finally:
            store.close()
        assert outcome(store.put, msg)[1] is MQStoreError or outcome(store.put, msg)[0] == "raises"
        ro = MessageStore.open(tmp_path / "s", StoreConfig.small(), read_only=True)
        try:
            assert fast_put._lean_parts(ro, msg) is None
            assert outcome(ro.put, msg) == outcome(MessageStore.put.reference, ro, msg)
        finally:
            ro.close()


def test_store_put_from_many_threads_keeps_the_queue_offsets_dense(tmp_path):
    "Eight threads put through the lean path at once: every queue offset once, every record dispatched."
    with accel.fast_paths(True):
        store = MessageStore.open(tmp_path / "s", StoreConfig.small(commit_log_file_size=1 << 20))
        try:
            results = []
            def producer(k):
                results.extend(store.put(Message("T", bytes([k]) * 50, queue_id=k % 2)) for _ in range(200))
            threads = [threading.Thread(target=producer, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert store.wait_dispatched(30)
            for q in (0, 1):
                got = sorted(r.queue_offset for r in results if store.commit_log.get(r.commit_log_offset).queue_id == q)
                assert got == list(range(800))
        finally:
            store.close()
