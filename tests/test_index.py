"Index files: RocketMQ's bytes, the service, exact queries, bulk == per record."
import json, random, shutil
from types import SimpleNamespace as NS
import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st
from mqstore.errors import QueryError, CorruptFileError
from mqstore.message import java_string_hash, TRANSACTION_ROLLBACK_TYPE
from mqstore.fast.index import index_key_hashes, java_string_hashes, put_index_bulk
from mqstore.index import (IndexFile, IndexService, index_key_hash,
                           index_keys_of, index_file_size, time_diff_seconds, build_key, INDEX_HEADER_SIZE)


def vector_keys(vectors):
    return [json.loads(line) for line in open(vectors / "index_keys.jsonl")]


def test_vector_index_file_is_byte_identical(vectors, tmp_path):
    f = IndexFile.create(tmp_path / "x", 64, 256)
    for k in (k for k in vector_keys(vectors) if k["put"]):
        assert f.put_key(k["key"], k["phyOffset"], k["storeTimestamp"])
    f.flush()
    assert (tmp_path / "x").read_bytes() == (vectors / "index.bin").read_bytes()
    f.close()


def test_vector_header_begin_is_first_key(vectors):
    keys = vector_keys(vectors)
    raw = (vectors / "index.bin").read_bytes()
    begin, end, bphy, ephy, slots, count = np.frombuffer(raw[:40], ">i8", 4).tolist() + \
        np.frombuffer(raw[32:40], ">i4").tolist()
    assert begin == keys[0]["storeTimestamp"] and end == keys[-1]["storeTimestamp"]
    assert (bphy, ephy, count) == (keys[0]["phyOffset"], keys[-1]["phyOffset"], len(keys) + 1)
    assert time_diff_seconds(keys[0]["storeTimestamp"], 0) == 0


def test_vector_hashes_scalar_and_vectorised(vectors):
    keys = vector_keys(vectors)
    names = [k["key"] for k in keys]
    assert [index_key_hash(k) for k in names] == [k["indexKeyHash"] for k in keys]
    assert java_string_hashes(names).tolist() == [k["javaHashCode"] for k in keys]
    assert index_key_hashes(names).tolist() == [k["indexKeyHash"] for k in keys]


def test_vector_queries_find_every_offset(vectors, tmp_path):
    folder = tmp_path / "index"
    folder.mkdir()
    shutil.copy(vectors / "index.bin", folder / "20231114221320000")
    svc = IndexService(folder, 64, 256).load()
    for k in vector_keys(vectors):
        topic, key = k["key"].split("#", 1)
        assert k["phyOffset"] in svc.query(topic, key, 0, 2**62).offsets, k["key"]
        f = svc.files[0]
        assert k["phyOffset"] in f.select_phy_offsets(k["indexKeyHash"], k["storeTimestamp"] - 999, 2**62)
    svc.close()


def _msgs(specs):
    "specs: (topic, keys, uniq, ts) -> messages at increasing offsets and a lookup."
    out, off = [], 0
    for topic, keys, uniq, ts, flag in specs:
        out.append(NS(topic=topic, keys=keys, uniq_key=uniq, store_timestamp=ts, sys_flag=flag,
                      commit_log_offset=off))
        off += 100
    by = {m.commit_log_offset: NS(topic=m.topic, keys=[k for k in m.keys.split(" ") if k],
                                  uniq_key=m.uniq_key, store_timestamp=m.store_timestamp) for m in out}
    return out, by.__getitem__


def test_colliding_keys_return_only_their_own(tmp_path):
    assert java_string_hash("Aa") == java_string_hash("BB")
    msgs, lookup = _msgs([("T", "Aa", None, 1_000_000 + i, 0) if i % 2 else ("T", "BB", None, 1_000_000 + i, 0)
                          for i in range(20)])
    svc = IndexService(tmp_path, 16, 64, clock=lambda: 1_700_000_000_000)
    for m in msgs:
        svc.build_index(m)
    raw = svc.query("T", "Aa", 0, 2**62)
    assert len(raw.offsets) == 20                      # the index alone cannot tell them apart
    aa = svc.query("T", "Aa", 0, 2**62, lookup=lookup)
    bb = svc.query("T", "BB", 0, 2**62, lookup=lookup)
    assert sorted(aa.offsets) == [m.commit_log_offset for m in msgs if m.keys == "Aa"]
    assert sorted(bb.offsets) == [m.commit_log_offset for m in msgs if m.keys == "BB"]
    assert aa.rejected == 10 and bb.rejected == 10
    # AaTopic#BB vs BBTopic#Aa (issue #3613)
    assert index_key_hash("AaTopic#BB") == index_key_hash("BBTopic#Aa")
    svc.close()


def test_bad_queries(tmp_path):
    svc = IndexService(tmp_path, 16, 64)
    with pytest.raises(QueryError):
        svc.query("T", "k", 10, 5)
    with pytest.raises(QueryError):
        svc.query("T", "k", 0, 5, max_num=0)
    assert svc.query("T", "k", 0, 5).offsets == []          # no files at all
    svc.put_key("T#k", 0, 1000)
    assert svc.query("nosuch", "k", 0, 2**62).offsets == []
    svc.close()


def test_rollover_inherits_and_reports(tmp_path):
    full = []
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000)).__next__
    svc = IndexService(tmp_path, 8, 4, clock=clock, on_file_full=full.append)
    for i in range(7):
        svc.put_key(f"T#k{i}", 100 * i, 1_700_000_000_000 + 1500 * i)
    assert [f.index_count for f in svc.files] == [4, 4, 2] and len(full) == 2
    second = svc.files[1]
    assert second.begin_phy_offset == 300 and second.entry(1)[2] == 1   # timed from the previous end (1500 ms later)
    assert full[0] == svc.files[0].end_timestamp
    svc.flush(); svc.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert all(len(n) == 17 and n.isdigit() for n in names)
    # abnormal exit: files newer than the checkpoint's index time go
    kept = IndexService(tmp_path, 8, 4).load(last_exit_ok=False, index_msg_timestamp=full[0])
    assert len(kept.files) == 1
    kept.close()


def test_same_millisecond_names_do_not_clash(tmp_path):
    svc = IndexService(tmp_path, 4, 2, clock=lambda: 1_700_000_000_000)
    for i in range(3):
        svc.put_key("T#a", i, 1_700_000_000_000)
    assert len({f.name for f in svc.files}) == 3
    svc.close()


def test_load_refuses_foreign_files_and_bad_headers(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CorruptFileError):
        IndexService(tmp_path, 4, 8).load()
    (tmp_path / "notes.txt").unlink()
    raw = bytearray(index_file_size(4, 8))
    raw[36:40] = (99).to_bytes(4, "big")
    (tmp_path / "20240101000000000").write_bytes(raw)
    with pytest.raises(CorruptFileError):
        IndexService(tmp_path, 4, 8).load()


@pytest.mark.parametrize("name", ["²" * 17, "٢٠٢٤٠١٠١٠٠٠٠٠٠٠٠٠"])   # digits to str.isdigit, not ASCII
def test_load_refuses_a_name_of_non_ascii_digits(tmp_path, name):
    assert len(name) == 17 and name.isdigit() and not name.isascii()
    (tmp_path / name).write_bytes(bytes(index_file_size(4, 8)))   # a well-formed, empty index file
    with pytest.raises(CorruptFileError):
        IndexService(tmp_path, 4, 8).load()

def test_slot_pointing_past_count_is_empty(tmp_path):
    f = IndexFile.create(tmp_path / "x", 4, 16)
    h = index_key_hash("T#a")
    f._mm[INDEX_HEADER_SIZE + (h % 4) * 4:INDEX_HEADER_SIZE + (h % 4) * 4 + 4] = (9).to_bytes(4, "big")
    assert f.select_phy_offsets(h, 0, 2**62) == []
    f.put_key("T#a", 7, 1000)
    assert f.entry(1)[3] == 0 and f.select_phy_offsets(h, 0, 2**62) == [7]
    f.close()


def test_rollback_not_indexed_and_replays_skipped(tmp_path):
    svc = IndexService(tmp_path, 16, 64)
    m = NS(topic="T", keys="a  b ", uniq_key="U1", store_timestamp=1000, sys_flag=0, commit_log_offset=500)
    assert index_keys_of("T", "a  b ", "U1") == ["T#U1", "T#a", "T#b"]
    assert svc.build_index(m) == 3
    assert svc.build_index(NS(**{**vars(m), "commit_log_offset": 400})) == 0      # below endPhyOffset
    assert svc.build_index(NS(**{**vars(m), "commit_log_offset": 600, "sys_flag": TRANSACTION_ROLLBACK_TYPE})) == 0
    svc.close()


key_specs = st.lists(st.tuples(st.sampled_from(["T1", "T2", "主题"]),
                               st.lists(st.sampled_from(["a", "b", "Aa", "BB", "k1", "🚀", ""]), max_size=3),
                               st.booleans(), st.integers(0, 2500), st.sampled_from([0, 0, 4, 8, 12])),
                     min_size=1, max_size=120)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=key_specs, window=st.tuples(st.integers(0, 200_000), st.integers(0, 200_000)))
def test_queries_are_exact_and_bulk_is_identical(tmp_path_factory, specs, window):
    ts, rows = 1_700_000_000_000, []
    for i, (topic, keys, uniq, gap, flag) in enumerate(specs):
        ts += gap
        rows.append((topic, " ".join(keys), f"U{i}" if uniq else None, ts, flag))
    msgs, lookup = _msgs(rows)
    d = tmp_path_factory.mktemp("idx")
    a = IndexService(d / "a", 8, 16, clock=iter(range(1_700_000_000_000, 1_900_000_000_000, 1000)).__next__,
                     max_msgs_num_batch=1 << 30)
    for m in msgs:
        a.build_index(m)
    b = IndexService(d / "b", 8, 16, clock=iter(range(1_700_000_000_000, 1_900_000_000_000, 1000)).__next__)
    ks, ph, tss = [], [], []
    for m in msgs:
        if m.sys_flag != TRANSACTION_ROLLBACK_TYPE:
            for k in index_keys_of(m.topic, m.keys, m.uniq_key):
                ks.append(k); ph.append(m.commit_log_offset); tss.append(m.store_timestamp)
    put_index_bulk(b, index_key_hashes(ks), ph, tss)
    a.flush(); b.flush()
    fa, fb = (sorted(x.iterdir()) if x.exists() else [] for x in (d / "a", d / "b"))
    assert [p.name for p in fa] == [p.name for p in fb]
    assert all(x.read_bytes() == y.read_bytes() for x, y in zip(fa, fb))
    begin = msgs[0].store_timestamp + min(window)
    end = msgs[0].store_timestamp + max(window)
    for topic in ("T1", "主题"):
        for key in ("a", "Aa", "BB", "🚀", "U3"):
            got = a.query(topic, key, begin, end, max_num=1 << 30, lookup=lookup)
            want = {m.commit_log_offset for m in msgs
                    if m.sys_flag != TRANSACTION_ROLLBACK_TYPE and m.topic == topic
                    and begin <= m.store_timestamp <= end
                    and (key == m.uniq_key or key in m.keys.split(" "))}
            assert set(got.offsets) == want and len(got.offsets) == len(want)
    a.close(); b.close()


@given(st.lists(st.text(min_size=0, max_size=40), max_size=60))
@settings(max_examples=60, deadline=None)
def test_vectorised_java_hash(strings):
    strings = [s.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for s in strings]
    assert java_string_hashes(strings).tolist() == [java_string_hash(s) for s in strings]
