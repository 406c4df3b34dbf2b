"Dispatch: the request, the reput loop, the vectors end to end, bulk == per record."
import filecmp, json, struct
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st
from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, encode_record, StoredMessage, TRANSACTION_ROLLBACK_TYPE, transaction_type
from mqstore.fast.records import scan_segment
from mqstore.consume_queue import ConsumeQueueStore, get_messages, GetMessageStatus
from mqstore.index import IndexService, index_keys_of
from mqstore.dispatch import read_dispatch_request, dispatch_range, ReputService
from mqstore.fast.dispatch import scan_property, decode_segment_batch, build_consume_queues_bulk
from mqstore.fast.index import build_index_bulk

SEG = 65536


def vector_store(tmp_path, data: bytes):
    (tmp_path / "commitlog").mkdir(parents=True)
    (tmp_path / "commitlog" / ("0" * 20)).write_bytes(data + bytes(SEG - len(data)))
    return CommitLog(tmp_path, StoreConfig.small()).load()


def vectors_list(vectors):
    return [json.loads(line) for line in open(vectors / "messages.jsonl")]


def test_every_vector_record_gives_its_unit_and_keys(vectors):
    for v in vectors_list(vectors):
        req = read_dispatch_request((vectors / v["file"]).read_bytes(), 0)
        assert req.success and req.msg_size == v["storeSize"]
        assert (req.topic, req.queue_id, req.queue_offset, req.sys_flag) == \
            (v["topic"], v["queueId"], v["queueOffset"], v["sysFlag"])
        unit = {"commitLogOffset": req.commit_log_offset, "size": req.msg_size, "tagsCode": req.tags_code}
        has_unit = transaction_type(req.sys_flag) in (0, 8)
        assert (unit if has_unit else None) == v["consumeQueueEntry"], v["name"]
        keys = [] if transaction_type(req.sys_flag) == TRANSACTION_ROLLBACK_TYPE else \
            index_keys_of(req.topic, req.keys, req.uniq_key)
        assert keys == [k["key"] for k in v["indexKeys"]], v["name"]
        assert req.producer_group == v["properties"].get("PGROUP")


def test_vector_log_dispatches_to_rocketmq_units_and_index(vectors, tmp_path):
    vs = vectors_list(vectors)
    log = vector_store(tmp_path, (vectors / "commitlog.bin").read_bytes())
    cqs = ConsumeQueueStore(tmp_path, 64)
    idx = IndexService(tmp_path / "index", 64, 256, clock=lambda: 1_700_000_000_000)
    events = []
    end = ReputService(log, [cqs, idx], observer=events.append).dispatch_until()
    assert end == 13574 and events[-1].kind == "stopped" and sum(e.kind == "dispatched" for e in events) == 42
    for v in vs:
        q = cqs.get_queue(v["topic"], v["queueId"])
        if v["consumeQueueEntry"]:
            assert q.unit(v["queueOffset"]) == tuple(v["consumeQueueEntry"].values())
    assert sum(q.max_offset_in_queue for _, q in cqs) == 40
    for v in vs:
        for k in v["indexKeys"]:
            topic, key = k["key"].split("#", 1)
            r = idx.query(topic, key, 0, 2**62, lookup=log.get)
            assert v["commitLogOffset"] in r.offsets and r.rejected == 0
    assert idx.files[0].index_count == 39        # the 38 keys of index.bin
    cqs.close(); idx.close(); log.shutdown()


def test_edge_logs(vectors, tmp_path):
    edge = vectors / "edge"
    torn = vector_store(tmp_path / "torn", (edge / "truncated_last_record.bin").read_bytes())
    ev = []
    # in a zero-padded segment the missing byte reads as 0; up to the written end the record is torn
    assert dispatch_range(torn, 0, [], to_offset=13573, observer=ev.append) == 13455
    assert ev[-1].kind == "stopped" and "past the end" in ev[-1].reason
    blank = vector_store(tmp_path / "blank", (edge / "commitlog_blank_eof.bin").read_bytes())
    ev = []
    assert dispatch_range(blank, 0, [], observer=ev.append) == SEG and ev[-1].kind == "blank"
    torn.shutdown(); blank.shutdown()


def test_length_mismatch_is_skipped(vectors, tmp_path):
    data = bytearray((vectors / "commitlog.bin").read_bytes())
    # record 1 (offset 100, 111 bytes): shorten its properties length by one -> lengths disagree
    plen_at = 100 + 111 - 10 - 2
    struct.pack_into(">h", data, plen_at, 9)
    log = vector_store(tmp_path, bytes(data))
    ev, seen = [], []
    dispatch_range(log, 0, [seen.append], observer=ev.append)
    assert [e.kind for e in ev[:3]] == ["dispatched", "skipped", "dispatched"] and ev[1].offset == 100
    assert len(seen) == 41
    log.shutdown()


def test_scan_property_ignores_bodies(tmp_path):
    recs = b""
    for i, body in enumerate([b"KEYS\x01fake\x02", b"\x02KEYS\x01fake\x02", b""]):
        m = StoredMessage(topic="T", body=body, commit_log_offset=len(recs),
                          properties={"TAGS": "t", "KEYS": f"real-{i}"} if i != 1 else {"TAGS": "t"})
        recs += encode_record(m)
    h, _, _ = scan_segment(recs)
    assert scan_property(recs, h, "KEYS") == ["real-0", None, "real-2"]


def _fill_log(tmp_path, specs, cfg):
    clock = iter(range(1_700_000_000_000, 1_900_000_000_000, 137)).__next__
    log = CommitLog(tmp_path / "s", cfg, clock=clock).load()
    for topic, qid, tag, keys, flag, size in specs:
        m = Message(topic, b"b" * size, queue_id=qid, sys_flag=flag)
        m.tags, m.keys = tag, keys
        log.put(m)
    return log


specs_st = st.lists(st.tuples(st.sampled_from(["A", "B", "主题", "SCHEDULE_TOPIC_XXXX"]), st.integers(0, 3),
                              st.sampled_from(["x", "Aa", "BB", None]),
                              st.lists(st.sampled_from(["k1", "k2", "Aa", "BB"]), max_size=2),
                              st.sampled_from([0, 0, 0, 4, 8, 12]), st.integers(0, 3000)),
                    min_size=1, max_size=60)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=specs_st, window=st.tuples(st.integers(0, 9000), st.integers(0, 9000)))
def test_queues_and_keys_after_dispatch(tmp_path_factory, specs, window):
    d = tmp_path_factory.mktemp("store")
    cfg = StoreConfig.small(commit_log_file_size=16 * 1024)
    log = _fill_log(d, specs, cfg)
    cqs = ConsumeQueueStore(d / "s", 8)
    idx = IndexService(d / "s" / "index", 8, 32, clock=iter(range(1_700_000_000_000, 1_900_000_000_000, 1000)).__next__,
                       max_msgs_num_batch=1 << 30)
    ReputService(log, [cqs, idx]).dispatch_until()
    stored = [m for _, m in log.messages(read_body=False)]
    expect = {}
    for m in stored:
        if transaction_type(m.sys_flag) in (0, 8):
            expect.setdefault((m.topic, m.queue_id), []).append(m.commit_log_offset)
    for (topic, qid), offs in expect.items():
        r = get_messages(log, cqs, topic, qid, 0, 10_000)
        assert [m.commit_log_offset for m in r.messages] == offs
        assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == len(offs)
    assert cqs.topic_queue_table() == dict(sorted(log.topic_queue_table.items()))
    t0 = stored[0].store_timestamp
    begin, end = t0 + min(window), t0 + max(window)
    for topic in ("A", "主题"):
        for key in ("k1", "Aa", "BB"):
            got = idx.query(topic, key, begin, end, max_num=1 << 30, lookup=log.get)
            want = {m.commit_log_offset for m in stored if m.topic == topic and key in m.keys
                    and transaction_type(m.sys_flag) != TRANSACTION_ROLLBACK_TYPE
                    and begin <= m.store_timestamp <= end}
            assert set(got.offsets) == want and len(got.offsets) == len(want)
    # bulk, segment by segment, writes the same bytes
    cqb = ConsumeQueueStore(d / "b", 8)
    idb = IndexService(d / "b" / "index", 8, 32, clock=iter(range(1_700_000_000_000, 1_900_000_000_000, 1000)).__next__)
    for mf in log.mfq.files:
        with mf.view(0, mf.read_position) as buf:
            h, _, _ = scan_segment(buf)
            batch = decode_segment_batch(buf, h)
            build_consume_queues_bulk(cqb, batch)
            build_index_bulk(idb, batch)
            del batch, h
    for s in (cqs, cqb):
        s.flush()
    idx.flush(); idb.flush()
    for sub in ("consumequeue", "index"):
        a = sorted(p.relative_to(d / "s") for p in (d / "s" / sub).rglob("*") if p.is_file()) \
            if (d / "s" / sub).exists() else []
        b = sorted(p.relative_to(d / "b") for p in (d / "b" / sub).rglob("*") if p.is_file()) \
            if (d / "b" / sub).exists() else []
        assert a == b
        assert all(filecmp.cmp(d / "s" / p, d / "b" / p, shallow=False) for p in a)
    for x in (cqs, cqb, idx, idb):
        x.close()
    log.shutdown()


def test_reput_thread_follows_puts(tmp_path):
    log = _fill_log(tmp_path, [("A", 0, "x", ["k"], 0, 10)] * 5, StoreConfig.small())
    cqs = ConsumeQueueStore(tmp_path / "s", 64)
    reput = ReputService(log, [cqs]).start()
    for i in range(50):
        log.put(Message("A", b"x", queue_id=i % 2))
        reput.notify()
    assert reput.wait_caught_up(10)
    reput.shutdown()
    assert reput.error is None and cqs.topic_queue_table() == {"A-0": 30, "A-1": 25}
    cqs.close(); log.shutdown()


def test_dispatch_from_a_later_offset_is_idempotent(tmp_path):
    log = _fill_log(tmp_path, [("A", i % 2, "x", [], 0, 10) for i in range(30)], StoreConfig.small())
    cqs = ConsumeQueueStore(tmp_path / "s", 8)
    ReputService(log, [cqs]).dispatch_until()
    before = cqs.topic_queue_table()
    ReputService(log, [cqs], from_offset=0).dispatch_until()          # a replay from the start
    assert cqs.topic_queue_table() == before
    cqs.close(); log.shutdown()


# ---------------------------------------------------------------- the numpy property path (chapter 11)

from mqstore.message import decode_properties, tags_code
from mqstore.index import index_key_hash
from mqstore.fast.dispatch import property_spans, span_java_hashes

_PIECES = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"\x01", b"\x02", b" ", b"a", b"Zz", "\u00e9".encode(), "\u4e3b".encode(),
           b"\xff", b"TAGS\x01", b"KEYS\x01", b"\x02TAGS\x01"]


def _raw_record(topic, body, raw_props):
    rec = bytearray(encode_record(StoredMessage(topic=topic, body=body)))
    rec[-2:] = struct.pack(">h", len(raw_props))
    rec += raw_props
    struct.pack_into(">i", rec, 0, len(rec))
    return bytes(rec)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["A", "\u4e3b\u9898", "Topic-B"]),
                          st.lists(st.sampled_from(_PIECES), max_size=12).map(b"".join),
                          st.lists(st.sampled_from(_PIECES), max_size=12).map(b"".join)), max_size=8))
def test_property_spans_and_index_keys_equal_per_record(records):
    buf = b"".join(_raw_record(t, body, props) for t, body, props in records)
    h, end, _ = scan_segment(buf)
    assert len(h) == len(records) and end == len(buf)
    props = [decode_properties(p) for _, _, p in records]
    for name in ("TAGS", "KEYS", "UNIQ_KEY"):
        assert scan_property(buf, h, name) == [p.get(name) for p in props]
    batch = decode_segment_batch(buf, h)
    assert batch.tags_codes.tolist() == [tags_code(p.get("TAGS")) for p in props]
    want = [(r, index_key_hash(k)) for r, ((t, _, _), p) in enumerate(zip(records, props))
            for k in index_keys_of(t, p.get("KEYS", ""), p.get("UNIQ_KEY"))]
    assert list(zip(batch.index_rows.tolist(), batch.index_hashes.tolist())) == want
    assert [batch.topics[i] for i in batch.topic_ids] == [t for t, _, _ in records]
    lean = decode_segment_batch(buf, h, strings=False)
    assert lean.keys is None and lean.index_hashes.tolist() == batch.index_hashes.tolist()


def test_span_java_hashes_agree_with_java_string_hash():
    from mqstore.message import java_string_hash
    words = ["", "a", "Aa", "BB", "order-123456789", "x" * 70, "\u00e9t\u00e9", "\U0001F600", "polygenelubricants"]
    buf = b"".join(w.encode() for w in words)
    starts, pos = [], 0
    for w in words:
        starts.append(pos); pos += len(w.encode())
    lengths = [len(w.encode()) for w in words]
    got = span_java_hashes(buf, starts, lengths).tolist()
    assert got == [java_string_hash(w) if w else 0 for w in words]
