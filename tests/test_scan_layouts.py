"""The vectorised header decode of scan_segment (one gather per host layout: born x store host,
IPv4 or IPv6) against the reference walk (`fast=False`, each header decoded field by field) and
against decode_record, on random logs with mixed IPv4/IPv6 hosts and on damaged logs."""
import ipaddress

from hypothesis import HealthCheck, given, settings, strategies as st

from mqstore.message import RecordStatus, StoredMessage, decode_record, encode_record
from mqstore.fast.records import header_ip, scan_segment

v4 = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 65535)).map(
    lambda t: (str(ipaddress.IPv4Address(t[0])), t[1]))
v6 = st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 65535)).map(
    lambda t: (str(ipaddress.IPv6Address(t[0])), t[1]))
hosts = st.one_of(v4, v6)


@st.composite
def mixed_messages(draw):
    return StoredMessage(
        topic=draw(st.sampled_from(["T", "orders", "a" * 130])), queue_id=draw(st.integers(0, 7)),
        body=draw(st.binary(max_size=300)), queue_offset=draw(st.integers(0, 2**40)),
        commit_log_offset=draw(st.integers(0, 2**40)), born_timestamp=draw(st.integers(0, 2**42)),
        store_timestamp=draw(st.integers(0, 2**42)), born_host=draw(hosts), store_host=draw(hosts),
        reconsume_times=draw(st.integers(0, 16)), prepared_transaction_offset=draw(st.integers(0, 2**40)),
        flag=draw(st.integers(-2**31, 2**31 - 1)),
        properties=draw(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "x"]),
                                        st.text("abc 12", min_size=1, max_size=12), max_size=3)))


def _same(buf, **kw):
    (a, ea, wa), (b, eb, wb) = scan_segment(buf, **kw), scan_segment(buf, fast=False, **kw)
    assert (ea, wa, len(a)) == (eb, wb, len(b))
    assert a.tobytes() == b.tobytes()
    return a, ea, wa


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mixed_messages(), max_size=30))
def test_every_host_layout_decodes_like_decode_record(msgs):
    buf = b"".join(encode_record(m) for m in msgs)
    rows, end, why = _same(buf, check_crc=True)
    assert (len(rows), end, why) == (len(msgs), len(buf), RecordStatus.END)
    for row in rows:
        m = decode_record(buf, int(row["offset"]))
        assert (header_ip(row, "born"), int(row["born_port"])) == m.born_host
        assert (header_ip(row, "store"), int(row["store_port"])) == m.store_host
        assert (int(row["store_timestamp"]), int(row["reconsume_times"]),
                int(row["prepared_transaction_offset"]), int(row["queue_offset"]), int(row["flag"])) == \
            (m.store_timestamp, m.reconsume_times, m.prepared_transaction_offset, m.queue_offset, m.flag)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mixed_messages(), min_size=1, max_size=20), st.data())
def test_damaged_mixed_logs_scan_like_the_reference(msgs, data):
    buf = bytearray(b"".join(encode_record(m) for m in msgs))
    for _ in range(data.draw(st.integers(0, 4))):       # flip bytes: sizes, sysflags, lengths, bodies
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[:data.draw(st.integers(0, len(buf)))]
    start = data.draw(st.sampled_from([0, 0, 1]))
    for check_crc in (False, True):
        for stop in (False, True):
            _same(bytes(buf), start=start, check_crc=check_crc, stop_on_bad_crc=stop)


def test_a_long_log_of_one_layout_and_of_all_four():
    "The whole-array path (every row one layout) and the grouped path, with more rows than a chunk would hold."
    a4, a6 = ("10.0.0.1", 1), ("2001:db8::1", 2)
    for layouts in ([(a6, a6)], [(a4, a4), (a6, a4), (a4, a6), (a6, a6)]):
        msgs = [StoredMessage(topic="T", body=bytes([i % 256]) * (i % 50), queue_offset=i,
                              born_host=layouts[i % len(layouts)][0], store_host=layouts[i % len(layouts)][1])
                for i in range(2000)]
        rows, _, _ = _same(b"".join(encode_record(m) for m in msgs), check_crc=True)
        assert rows["queue_offset"].tolist() == list(range(2000))
        assert {header_ip(r, "born") for r in rows[:8]} == {h[0] for h, _ in layouts}
