"mqstore.pipeline, step by step and without Spark: the host-column excursion, and the rebuild's task and driver halves."
import itertools
from pathlib import Path

import pyarrow as pa

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.message import Message, TRANSACTION_COMMIT_TYPE, TRANSACTION_PREPARED_TYPE, header_ip, scan_segment
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
