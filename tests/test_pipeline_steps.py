"mqstore.pipeline, step by step and without Spark: the host-column excursion, and the rebuild's task and driver halves."
import itertools
from pathlib import Path

import pyarrow as pa

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE
from mqstore.fast.records import header_ip, scan_segment
from mqstore import pipeline

CONFIG = StoreConfig.small()
START = 1_700_000_000_000
HOSTS = [("10.0.0.1", 40000), ("10.0.0.2", 40001), ("fe80::1", 40002), ("2001:db8::7", 9876)]


def write_store(root, n=400):
    counter = itertools.count()
    log = CommitLog(root, CONFIG, clock=lambda: START + 7 * next(counter)).load()
    for i in range(n):
        msg = Message(f"T{i % 3}", bytes(i % 250), queue_id=i % 4, born_host=HOSTS[i % len(HOSTS)],
                      properties={"UNIQ_KEY": f"U{i:08d}", **({"KEYS": f"k{i % 17}"} if i % 2 else {})})
        if i % 37 == 5:
            msg.sys_flag = TRANSACTION_PREPARED_TYPE
            prep = log.put(msg)
            msg.sys_flag, msg.prepared_transaction_offset = TRANSACTION_COMMIT_TYPE, prep.commit_log_offset
        log.put(msg)
    log.shutdown()


def simple_hosts(h, which):
    "One header_ip call per record: the simple version of the excursion."
    out = []
    for row in h:
        ip, port = header_ip(row, which), int(row[which + "_port"])
        out.append(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}")
    return out


def test_host_column_equals_the_simple_way(tmp_path):
    write_store(tmp_path / "s")
    seen = set()
    for s in pipeline.store_segments(tmp_path / "s"):
        with pipeline.mapped_segment(s.path) as buf:
            h, _, _ = scan_segment(buf, 0)
            for which in ("born", "store"):
                fast = pipeline._host_column(h, which).to_pylist()
                assert fast == simple_hosts(h, which)
                seen.update(fast)
    assert "[fe80::1]:40002" in seen and "10.0.0.2:40001" in seen
    assert pipeline._host_column(h[:0], "born").to_pylist() == []


def test_task_and_driver_halves_equal_the_local_rebuild(tmp_path):
    "segment_parts per segment (the task), then _write_parts (the driver): the local engine's tree."
    write_store(tmp_path / "s")
    segments = pipeline.store_segments(tmp_path / "s")
    parts = pa.concat_tables([pipeline.segment_parts(s.path, s.offset) for s in reversed(segments)])
    got = pipeline._write_parts(parts, tmp_path / "halves", CONFIG, None)
    want = pipeline._rebuild_local(segments, tmp_path / "local", CONFIG, None)
    assert got == want
    assert pipeline.tree_digests(tmp_path / "halves") == pipeline.tree_digests(tmp_path / "local")


def test_index_clock_names_files_by_their_first_entry():
    import numpy as np
    now = pipeline._index_clock(np.array([100, 110, 120, 130, 140]), 2)
    assert [now() for _ in range(4)] == [100, 120, 140, 140]
    assert pipeline._index_clock(np.array([], np.int64), 2)() == 0


def _damaged_copies(root, tmp_path):
    "The store of `root`, then copies with a record's size torn mid-segment and a segment cut short."
    import shutil
    out = [root]
    segs = pipeline.store_segments(root)
    with pipeline.mapped_segment(segs[0].path) as buf:
        h, _, _ = scan_segment(buf, 0)
        torn_at, cut_at = int(h["offset"][len(h) // 2]), int(h["offset"][len(h) // 3]) + 7
    for name, at, data in (("torn", torn_at, b"\x00\x00\x00\x05"), ("cut", cut_at, None)):
        dst = tmp_path / name
        shutil.copytree(root, dst)
        seg = dst / "commitlog" / Path(segs[0].path).name
        raw = bytearray(seg.read_bytes())
        if data is None:
            raw[at:] = bytes(len(raw) - at)
        else:
            raw[at:at + len(data)] = data
        seg.write_bytes(bytes(raw))
        out.append(dst)
    return out


import pytest


@pytest.mark.parametrize("accel", ["1", "0"])
def test_fast_parts_equal_the_simple_parts(tmp_path, monkeypatch, accel):
    """The fast task (scan_decode_segment, the decode's key columns) = the simple one, damaged input too,
    with the compiled kernels and with the numpy fallback (MQSTORE_ACCEL=0)."""
    monkeypatch.setenv("MQSTORE_ACCEL", accel)
    from mqstore.message import TRANSACTION_ROLLBACK_TYPE
    counter = itertools.count()
    log = CommitLog(tmp_path / "s", CONFIG, clock=lambda: START + 3 * next(counter)).load()
    for i in range(300):
        keys = " ".join(f"k{i % 13}-{j}" for j in range(i % 4)) + ("  é" if i % 29 == 3 else "")
        msg = Message(f"T{i % 4}", bytes(i % 97), queue_id=i % 3,
                      properties={"UNIQ_KEY": f"U{i:08d}", **({"KEYS": keys} if keys else {})})
        if i % 11 == 4:
            msg.sys_flag = TRANSACTION_ROLLBACK_TYPE
        log.put(msg)
    log.shutdown()
    for root in _damaged_copies(tmp_path / "s", tmp_path):
        segments = pipeline.store_segments(root)
        for s in segments:
            for with_index in (True, False):
                fast = pipeline.segment_parts(s.path, s.offset, with_index, fast=True)
                slow = pipeline.segment_parts(s.path, s.offset, with_index, fast=False)
                assert fast.equals(slow), (root.name, s.offset, with_index)
        a = pipeline._rebuild_local(segments, tmp_path / f"{root.name}-fast", CONFIG, None, fast=True)
        b = pipeline._rebuild_local(segments, tmp_path / f"{root.name}-slow", CONFIG, None, fast=False)
        assert a == b and a[2] > 0
        assert pipeline.tree_digests(tmp_path / f"{root.name}-fast") == pipeline.tree_digests(tmp_path / f"{root.name}-slow")
