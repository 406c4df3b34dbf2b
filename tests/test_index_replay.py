"""Issue 25, items 1 and 2: the index after replays and lost files. After any number of clean
restarts or crashes it holds exactly the entries one dispatch of the log gives, and a lost index
file (deleted by hand) is rebuilt. Real files, real maps, no mocks."""
import itertools, shutil

import pytest

from mqstore.commit_log import walk_log
from mqstore.config import StoreConfig
from mqstore.dispatch import DispatchRequest
from mqstore.index import IndexService, build_key, index_key_hash, index_keys_of
from mqstore.fast.index import index_key_hashes, put_index_bulk
from mqstore.message import Message, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, transaction_type
from mqstore.recovery import IndexHoleFound
from mqstore import accel
from mqstore.store import MessageStore
from mqstore.verify import check_store
from mqstore.viz.recovery import SCENARIO_CONFIG, _fill

T0 = 1_700_000_000_000


class PerRecordStore(MessageStore):
    "Opened with section 10's switch off: recovery re-dispatches and indexes record by record."

    @classmethod
    def open(cls, *args, **kwargs):
        with accel.fast_paths(False):
            return super().open(*args, **kwargs)


STORES = [pytest.param(MessageStore, id="batches"), pytest.param(PerRecordStore, id="per-record")]


def clock(step=10):
    c = itertools.count()
    return lambda: T0 + step * next(c)


def raw_entries(root, cfg):
    "(key hash, phy offset) of every entry of every index file, in file order, read without `query`."
    idx = IndexService(root / "index", cfg.index_slots, cfg.index_entries).load(read_only=True)
    try:
        return [(int(h), int(phy)) for f in idx.files for h, phy, _, _ in f.entries().tolist()]
    finally:
        idx.close()


def one_dispatch(root, cfg):
    "The entries one dispatch of the whole log gives: every key of every record not rolled back, in order."
    store = MessageStore.open(root, cfg, read_only=True)
    try:
        cl = store.commit_log
        return [(index_key_hash(k), off) for off, m in walk_log(cl.mfq, cl.min_offset, cl.max_offset)
                if transaction_type(m.sys_flag) != TRANSACTION_ROLLBACK_TYPE
                for k in index_keys_of(m.topic, m.keys, m.uniq_key)]
    finally:
        store.close()


# -- item 1: replays do not index a record twice ---------------------------------------------

@pytest.mark.parametrize("store_class", STORES)
def test_clean_restarts_behind_two_prepared_records_add_no_index_entry(tmp_path, store_class):
    cfg, root, ck = StoreConfig.small(commit_log_file_size=8192), tmp_path / "store", clock()
    store = store_class.open(root, cfg, clock=ck)
    for i in range(10):
        store.put(Message("T", f"body-{i};".encode() * 4, properties={"KEYS": f"k{i}"}))
    halves = [store.put(Message("EdgeTopic", b"half", sys_flag=TRANSACTION_PREPARED_TYPE,
                                properties={"KEYS": k})).commit_log_offset for k in ("half-1", "half-2")]
    store.wait_dispatched()
    store.close()
    want = one_dispatch(root, cfg)
    assert raw_entries(root, cfg) == want
    for _ in range(4):                                    # each restart used to add one half-2 entry
        store_class.open(root, cfg, clock=ck).close()
    assert raw_entries(root, cfg) == want
    h2 = index_key_hash(build_key("EdgeTopic", "half-2"))
    assert [phy for h, phy in raw_entries(root, cfg) if h == h2] == [halves[1]]


@pytest.mark.parametrize("store_class", STORES)
def test_crash_recovery_that_keeps_an_index_file_indexes_the_replay_start_once(tmp_path, store_class):
    cfg, root, ck = SCENARIO_CONFIG, tmp_path / "store", clock(1000)
    sent, keys = [], itertools.count()
    with store_class.open(root, cfg, clock=ck) as s:
        _fill(s, sent, 60, "a", keys)
        s.wait_dispatched()
    s = store_class.open(root, cfg, clock=ck)
    _fill(s, sent, 25, "b", keys)
    s.wait_dispatched()
    s.halt()                                               # a crash: the abort file stays
    events = []
    store_class.open(root, cfg, clock=ck, observer=events.append).close()
    assert [e for e in events if type(e).__name__ == "IndexFilesDropped"]   # a file kept, the rest replayed
    assert raw_entries(root, cfg) == one_dispatch(root, cfg)


def request(offset, keys, ts):
    return DispatchRequest(topic="T", commit_log_offset=offset, msg_size=100, store_timestamp=ts, keys=keys)


@pytest.mark.parametrize("builder", ["build_index", "put_bulk"])
def test_a_record_whose_keys_span_two_files_gets_only_its_missing_keys_again(tmp_path, builder):
    "Files of 3 entries: the second record's keys c, d straddle files 0 and 1; file 1 is lost."
    ck = clock(1000)
    svc = IndexService(tmp_path / "index", 8, 4, clock=ck)
    reqs = [request(0, "a b", T0), request(100, "c d", T0 + 1000)]
    for r in reqs:
        svc.build_index(r)
    once = [(int(h), int(p)) for f in svc.files for h, p, _, _ in f.entries().tolist()]
    assert [len(f.entries()) for f in svc.files] == [3, 1]
    svc.files.pop().destroy()                             # the file holding key d is gone
    if builder == "build_index":
        put = [svc.build_index(r) for r in reqs]
    else:
        keys = [build_key("T", k) for r in reqs for k in r.keys.split()]
        put = [put_index_bulk(svc, index_key_hashes(keys), [0, 0, 100, 100], [T0, T0, T0 + 1000, T0 + 1000])]
    assert sum(put) == 1                                  # d only: a, b, c are held
    assert [(int(h), int(p)) for f in svc.files for h, p, _, _ in f.entries().tolist()] == once
    svc.close()


# -- item 2: a lost index file is rebuilt ----------------------------------------------------

def crashed_scenario(root, cfg, ck):
    "chapter 7's scenario: 60 messages and a clean close, 25 more, 5 past dispatch, a crash."
    sent, keys = [], itertools.count()
    with MessageStore.open(root, cfg, clock=ck) as s:
        _fill(s, sent, 60, "a", keys)
        s.wait_dispatched()
    s = MessageStore.open(root, cfg, clock=ck)
    _fill(s, sent, 25, "b", keys)
    s.wait_dispatched()
    s.reput.stop()
    _fill(s, sent, 5, "c", keys, via_log=True)
    s.halt()
    return sent


@pytest.mark.parametrize("index_file", [0, 1])
def test_a_lost_index_file_is_rebuilt_by_crash_recovery(tmp_path, index_file):
    cfg, root, ck = SCENARIO_CONFIG, tmp_path / "store", clock(1000)
    sent = crashed_scenario(root, cfg, ck)
    sorted((root / "index").iterdir())[index_file].unlink()
    with MessageStore.open(root, cfg, clock=ck) as s:
        s.wait_dispatched()
        missing = [k for t, _, k, _ in sent if not s.query(t, k)]
    assert missing == []
    report = check_store(root, cfg, clock=ck)
    assert report.problems == [] and report.index_entries == report.records == len(sent)
    assert raw_entries(root, cfg) == one_dispatch(root, cfg)


def test_a_lost_index_file_is_filled_in_place_and_a_broken_log_stops_the_filling(tmp_path):
    "The files after the hole are kept; a log that breaks inside the hole only ends the filling there."
    cfg, root, ck = SCENARIO_CONFIG, tmp_path / "store", clock(1000)
    sent, keys = [], itertools.count()
    with MessageStore.open(root, cfg, clock=ck) as s:
        _fill(s, sent, 85, "a", keys)
        s.wait_dispatched()
    files = sorted((root / "index").iterdir())
    later = {p.name: p.read_bytes() for p in files[2:]}
    files[1].unlink()
    cut = next(r for _, _, k, r in sent if k == "a-30")    # a record inside the lost file's range
    seg = root / "commitlog" / f"{cut.commit_log_offset - cut.commit_log_offset % cfg.commit_log_file_size:020d}"
    with open(seg, "r+b") as f:
        f.seek(cut.commit_log_offset % cfg.commit_log_file_size)
        f.write(bytes(8))                                  # its size and magic code: the walk stops there
    events = []
    with MessageStore.open(root, cfg, clock=ck, observer=events.append) as s:
        found = {k for t, _, k, _ in sent if s.query(t, k)}
    holes = [e for e in events if isinstance(e, IndexHoleFound)]
    assert holes and holes[0].start < cut.commit_log_offset < holes[0].end
    assert {f"a-{i}" for i in range(30)} <= found            # filled up to the break
    assert {p.name: p.read_bytes() for p in sorted((root / "index").iterdir()) if p.name in later} == later


@pytest.mark.parametrize("store_class", STORES)
@pytest.mark.parametrize("lost", ["first", "middle", "last", "all"])
def test_a_lost_index_file_is_rebuilt_after_a_clean_stop(tmp_path, lost, store_class):
    cfg, root, ck = SCENARIO_CONFIG, tmp_path / "store", clock(1000)
    sent, keys = [], itertools.count()
    with store_class.open(root, cfg, clock=ck) as s:
        _fill(s, sent, 85, "a", keys)
        s.wait_dispatched()
    files = sorted((root / "index").iterdir())
    assert len(files) == 4
    if lost == "all":
        shutil.rmtree(root / "index")
    else:
        files[{"first": 0, "middle": 1, "last": 3}[lost]].unlink()
    events = []
    with store_class.open(root, cfg, clock=ck, observer=events.append) as s:
        assert [k for t, _, k, _ in sent if not s.query(t, k)] == []
    assert len([e for e in events if isinstance(e, IndexHoleFound)]) == 1
    assert raw_entries(root, cfg) == one_dispatch(root, cfg)
    assert sorted(p.name for p in (root / "index").iterdir()) == [f.name for f in files]   # the same files again
    events.clear()                                         # and the next open finds nothing to do
    with store_class.open(root, cfg, clock=ck, observer=events.append):
        pass
    assert not [e for e in events if isinstance(e, IndexHoleFound)]
    assert check_store(root, cfg, clock=ck).problems == []


def test_records_without_keys_are_no_hole(tmp_path):
    "Keyless and rolled-back records before, between and after the index files: nothing is rebuilt."
    cfg, root, ck = SCENARIO_CONFIG, tmp_path / "store", clock(1000)
    with MessageStore.open(root, cfg, clock=ck) as s:
        for i in range(80):
            props = {} if i % 5 == 0 or i < 3 or i > 75 else {"KEYS": f"k{i}"}
            flag = TRANSACTION_ROLLBACK_TYPE if i % 7 == 0 else 0
            s.put(Message("T", f"m{i};".encode() * 6, properties=props, sys_flag=flag))
        s.wait_dispatched()
    assert len(list((root / "index").iterdir())) > 1
    before = raw_entries(root, cfg)
    assert before == one_dispatch(root, cfg)
    for crash in (False, True):
        if crash:
            (root / "abort").touch()                       # the next open recovers abnormally
        events = []
        MessageStore.open(root, cfg, clock=ck, observer=events.append).close()
        assert not [e for e in events if isinstance(e, IndexHoleFound)]
        assert raw_entries(root, cfg) == before


@pytest.mark.parametrize("which", [1, 3])
def test_a_zeroed_index_header_after_a_clean_stop_is_filled_again(tmp_path, which):
    "The file's header (its count too) is zeros: its entries are written again, none twice."
    cfg, root, ck = SCENARIO_CONFIG, tmp_path / "store", clock(1000)
    sent, keys = [], itertools.count()
    with MessageStore.open(root, cfg, clock=ck) as s:
        _fill(s, sent, 85, "a", keys)
        s.wait_dispatched()
    f = sorted((root / "index").iterdir())[which]
    data = bytearray(f.read_bytes())
    data[:40] = bytes(40)
    f.write_bytes(bytes(data))
    MessageStore.open(root, cfg, clock=ck).close()
    assert raw_entries(root, cfg) == one_dispatch(root, cfg)


def test_a_crash_open_keeps_a_stray_file_named_by_non_ascii_digits(tmp_path):
    "'²' is a digit to str.isdigit: an empty file so named is no index file, and crash handling must not delete it."
    from mqstore.checkpoint import create_abort_file
    from mqstore.errors import CorruptFileError
    with MessageStore.open(tmp_path, StoreConfig.small()) as store:
        store.put(Message("T", b"x", properties={"KEYS": "k"}))
        assert store.wait_dispatched()
    odd = tmp_path / "index" / ("2026112700000000" + "\u00b2")
    odd.write_bytes(b"")
    create_abort_file(tmp_path)
    with pytest.raises(CorruptFileError, match="not an index file"):
        MessageStore.open(tmp_path, StoreConfig.small())
    assert odd.exists()
