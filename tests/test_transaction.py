import itertools, json, os, shutil, signal, subprocess, sys, textwrap, time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from mqstore.config import StoreConfig
from mqstore.errors import (TransactionError, UnknownTransactionError, TransactionGroupMismatchError,
                            TransactionStateError)
from mqstore.message import (Message, java_string_hash, TRANSACTION_PREPARED_TYPE, TRANSACTION_COMMIT_TYPE,
                             TRANSACTION_ROLLBACK_TYPE)
from mqstore.store import MessageStore
from mqstore.transaction import (
    TransactionService, TransactionConfig, TransactionStateTable, StateUnit, LocalTransactionState,
    StateTableRecovered, HalfTopicTransactions, open_redo_log, scan_redo_log, rebuild_state_table,
    update_state, legacy_update_state, prepared_age_ms, legacy_age_ms, legacy_redo_scan, legacy_rebuild,
    PREPARED_TAGS_CODE, REDO_LOG_TOPIC, HALF_TOPIC)

CFG = StoreConfig.small(commit_log_file_size=8192)
TXC = TransactionConfig.small(state_table_units=8, redo_log_units=8)
GROUP = "shop"
ROOT = Path(__file__).resolve().parent.parent


def clock(start=1_700_000_000_000, step=50):
    c = itertools.count()
    return lambda: start + step * next(c)


def open_store(root, ck=None, txc=TXC, observer=None, cfg=CFG):
    tx = TransactionService(txc)
    store = MessageStore.open(root, cfg, clock=ck or clock(), plugins=[tx], observer=observer)
    return tx, store


def prepare(tx, i, group=GROUP, topic="Orders"):
    return tx.prepare(Message(topic, f"order {i}".encode(), properties={"KEYS": f"o{i}"}), group=group)


def bodies(store, topic="Orders"):
    store.wait_dispatched()
    return [m.body for m in store.get(topic, 0, 0, 1000).messages]


def table_bytes(tx):
    return tx.table.array().tobytes()


# -- format

def test_state_unit_is_24_big_endian_bytes():
    u = StateUnit(4096, 312, 1_700_000_000, java_string_hash("shop"), TRANSACTION_PREPARED_TYPE)
    raw = u.encode()
    assert len(raw) == 24
    assert raw[:8] == (4096).to_bytes(8, "big") and raw[8:12] == (312).to_bytes(4, "big")
    assert raw[20:] == (4).to_bytes(4, "big") and StateUnit.decode(raw) == u


def test_files_and_layout(tmp_path):
    tx, store = open_store(tmp_path)
    r = prepare(tx, 0)
    tx.commit(r.commit_log_offset, r.queue_offset, GROUP)
    store.close()
    names = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "transaction").rglob("*") if p.is_file())
    assert names == ["transaction/redolog/TRANSACTION_REDOLOG_TOPIC_XXXX/0/00000000000000000000",
                     "transaction/statetable/00000000000000000000"]
    assert (tmp_path / names[1]).stat().st_size == 8 * 24


# -- the live path

def test_prepared_records_take_slots_and_no_queue_unit(tmp_path):
    tx, store = open_store(tmp_path)
    rs = [prepare(tx, i) for i in range(5)]
    assert [r.queue_offset for r in rs] == [0, 1, 2, 3, 4]
    store.wait_dispatched()
    assert bodies(store) == [] and store.cq_store.get_queue("Orders", 0) is None
    assert tx.prepared_slots() == [0, 1, 2, 3, 4]
    assert [(o, t) for o, _, t in scan_redo_log(tx.redo)] == [(r.commit_log_offset, -1) for r in rs]
    assert all(store.look(r.commit_log_offset).queue_offset == r.queue_offset for r in rs)
    store.close()


def test_commit_visible_once_rollback_never(tmp_path):
    tx, store = open_store(tmp_path)
    rs = [prepare(tx, i) for i in range(4)]
    c = tx.commit(rs[0].commit_log_offset, rs[0].queue_offset, GROUP)
    rb = tx.rollback(rs[1].commit_log_offset, rs[1].queue_offset, GROUP)
    tx.commit(rs[3].commit_log_offset, rs[3].queue_offset, GROUP)
    store.wait_dispatched()
    got = store.get("Orders", 0, 0, 100)
    assert [m.body for m in got.messages] == [b"order 0", b"order 3"]
    assert all(m.transaction_type == TRANSACTION_COMMIT_TYPE for m in got.messages)
    assert got.messages[0].prepared_transaction_offset == rs[0].commit_log_offset
    assert c.queue_offset == 0                                 # a real queue offset
    rec = store.look(rb.commit_log_offset)
    assert rec.body == b"" and rec.queue_offset == rs[1].queue_offset
    assert rec.prepared_transaction_offset == rs[1].commit_log_offset
    states = [tx.state(i).state for i in range(4)]
    assert states == [TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_PREPARED_TYPE,
                      TRANSACTION_COMMIT_TYPE]
    redo = list(scan_redo_log(tx.redo))
    assert redo[4:] == [(c.commit_log_offset, c.size, rs[0].commit_log_offset),
                        (rb.commit_log_offset, rb.size, rs[1].commit_log_offset),
                        (redo[6][0], redo[6][1], rs[3].commit_log_offset)]
    store.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["P", "C", "R"]), min_size=1, max_size=25))
def test_consumers_see_each_committed_body_exactly_once(tmp_path_factory, ops):
    tx, store = open_store(tmp_path_factory.mktemp("t"))
    prepared, committed, n = [], [], 0
    for op in ops:
        if op == "P" or not prepared:
            prepared.append((n, prepare(tx, n)))
            n += 1
        else:
            i, r = prepared.pop(0)
            (tx.commit if op == "C" else tx.rollback)(r.commit_log_offset, r.queue_offset, GROUP)
            if op == "C":
                committed.append(f"order {i}".encode())
    assert bodies(store) == committed
    store.close()


def test_bad_requests_raise_and_change_nothing(tmp_path):
    tx, store = open_store(tmp_path)
    rs = [prepare(tx, i, group=GROUP) for i in range(3)]
    tx.commit(rs[0].commit_log_offset, rs[0].queue_offset, GROUP)
    tx.rollback(rs[1].commit_log_offset, rs[1].queue_offset, GROUP)
    plain = store.put(Message("Orders", b"plain"))
    store.wait_dispatched()
    before, queue, log_end = table_bytes(tx), bodies(store), store.commit_log.max_offset
    p0, p1, p2 = rs
    cases = [
        (UnknownTransactionError, lambda: tx.commit(p2.commit_log_offset + 3, p2.queue_offset, GROUP)),
        (UnknownTransactionError, lambda: tx.commit(10**9, p2.queue_offset, GROUP)),
        (UnknownTransactionError, lambda: tx.commit(plain.commit_log_offset, 0, GROUP)),
        (UnknownTransactionError, lambda: tx.commit(p2.commit_log_offset, p2.queue_offset + 1, GROUP)),
        (TransactionGroupMismatchError, lambda: tx.commit(p2.commit_log_offset, p2.queue_offset, "bank")),
        (TransactionStateError, lambda: tx.commit(p0.commit_log_offset, p0.queue_offset, GROUP)),
        (TransactionStateError, lambda: tx.rollback(p0.commit_log_offset, p0.queue_offset, GROUP)),
        (TransactionStateError, lambda: tx.commit(p1.commit_log_offset, p1.queue_offset, GROUP)),
        (TransactionError, lambda: tx.end_transaction(p2.commit_log_offset, p2.queue_offset, GROUP, 4)),
    ]
    for error, call in cases:
        with pytest.raises(error) as info:
            call()
        assert type(info.value) is error
    store.wait_dispatched()
    assert table_bytes(tx) == before and bodies(store) == queue and store.commit_log.max_offset == log_end
    store.close()


def test_second_decision_before_dispatch_is_refused(tmp_path):
    tx, store = open_store(tmp_path)
    r = prepare(tx, 0)
    store.wait_dispatched()
    store.reput.stop()                      # the first decision will not reach dispatch yet
    tx.commit(r.commit_log_offset, r.queue_offset, GROUP)
    assert tx.state(r.queue_offset).state == TRANSACTION_PREPARED_TYPE
    for decide in (tx.commit, tx.rollback):
        with pytest.raises(TransactionStateError, match="already being ended"):
            decide(r.commit_log_offset, r.queue_offset, GROUP)
    store.reput.start()
    assert bodies(store) == [b"order 0"]
    assert tx.state(r.queue_offset).state == TRANSACTION_COMMIT_TYPE and not tx.pending
    store.close()


# -- check-back

def test_check_back_asks_only_old_prepared_and_applies_answers(tmp_path):
    ck = clock(step=10_000)                 # one put every 10 s
    tx, store = open_store(tmp_path, ck)
    rs = [prepare(tx, i) for i in range(6)]
    rs.append(prepare(tx, 6, group="other"))
    tx.commit(rs[5].commit_log_offset, rs[5].queue_offset, GROUP)
    answers = {0: "COMMIT_MESSAGE", 1: "ROLLBACK_MESSAGE", 2: "UNKNOW", 3: "COMMIT_MESSAGE", 4: "COMMIT_MESSAGE"}
    seen = []

    def listener(msg):
        i = int(msg.body.split()[1])
        seen.append(i)
        return LocalTransactionState(answers[i])
    tx.register_check_listener(GROUP, listener)
    store.wait_dispatched()
    t0 = rs[0].store_timestamp
    rep = tx.check_once(now=t0 + 59_999)
    assert rep.checked == [] and rep.too_young == 1 and seen == []
    rep = tx.check_once(now=t0 + 60_000 + 20_000)            # orders 0, 1, 2 are 60 s old or more
    assert [(c.slot, c.outcome) for c in rep.checked] == [(0, "COMMIT"), (1, "ROLLBACK"), (2, "UNKNOWN")]
    assert rep.too_young == 1
    store.wait_dispatched()
    rep = tx.check_once(now=t0 + 10**6)
    assert [(c.slot, c.outcome) for c in rep.checked] == [(2, "UNKNOWN"), (3, "COMMIT"), (4, "COMMIT")]
    assert rep.no_listener == 1                               # order 6's group has no listener
    assert bodies(store) == [b"order 5", b"order 0", b"order 3", b"order 4"]
    assert tx.prepared_slots() == [2, 6]
    store.close()


def test_check_thread_runs_check_back(tmp_path):
    txc = TransactionConfig.small(check_thread=True, check_interval_ms=20, check_at_least_interval_ms=0)
    tx, store = open_store(tmp_path, txc=txc)
    tx.register_check_listener(GROUP, lambda m: LocalTransactionState.COMMIT_MESSAGE)
    prepare(tx, 0)
    deadline = time.monotonic() + 10
    while not bodies(store) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bodies(store) == [b"order 0"] and tx.prepared_slots() == []
    store.close()


# -- the defects, each against the 3.x behaviour

def test_age_check_does_not_overflow():
    now = 1_700_000_030_000
    ts = (now - 5_000) // 1000
    assert prepared_age_ms(ts, now) == 5_000                  # too young to check
    assert legacy_age_ms(ts, now) > 60_000                    # 3.x: int overflow says "check it"
    for years in range(0, 60, 7):                             # any date up to 2038
        s = years * 365 * 86_400
        assert prepared_age_ms(s, s * 1000 + 123) == 123


def test_update_reports_success(tmp_path):
    for update, expected in ((update_state, True), (legacy_update_state, False)):
        table = TransactionStateTable(tmp_path / update.__name__, 8)
        table.append(StateUnit(100, 50, 1, 7, TRANSACTION_PREPARED_TYPE))
        assert update(table, 0, 100, 7, TRANSACTION_COMMIT_TYPE) is expected
        assert table.read(0).state == TRANSACTION_COMMIT_TYPE   # both wrote it
        assert update_state(table, 0, 100, 7, TRANSACTION_ROLLBACK_TYPE) is False
        assert update_state(table, 0, 101, 7, TRANSACTION_ROLLBACK_TYPE) is False
        table.destroy()


def _two_redo_files(tmp_path):
    "A transaction prepared in the first redo file and committed in the second."
    tx, store = open_store(tmp_path)
    first = prepare(tx, 0)
    for i in range(1, 8):
        prepare(tx, i)
    tx.commit(first.commit_log_offset, first.queue_offset, GROUP)     # redo unit 8: file 2
    store.wait_dispatched()
    assert len(tx.redo.mfq.files) == 2
    return tx, store, first


def test_redo_scan_advances_by_units(tmp_path):
    tx, store, first = _two_redo_files(tmp_path)
    assert len(list(scan_redo_log(tx.redo))) == 9
    assert len(list(legacy_redo_scan(tx.redo))) == 8          # 3.x skips the second file
    legacy = TransactionStateTable(tmp_path / "legacy", 8)
    legacy_rebuild(legacy, tx.redo, tx._lookup)
    assert first.commit_log_offset in legacy.array()["offset"].tolist()    # comes back as PREPARED
    fixed = TransactionStateTable(tmp_path / "fixed", 8)
    rebuild_state_table(fixed, tx.redo, tx._lookup)
    assert fixed.read(first.queue_offset).state == TRANSACTION_COMMIT_TYPE
    assert fixed.array().tobytes() == table_bytes(tx)
    legacy.destroy(); fixed.destroy()
    store.close()


def test_rebuild_keeps_slots_so_later_commits_work(tmp_path):
    tx, store = open_store(tmp_path)
    rs = [prepare(tx, i) for i in range(3)]
    tx.commit(rs[0].commit_log_offset, rs[0].queue_offset, GROUP)
    store.wait_dispatched()
    store.halt()
    tx, store = open_store(tmp_path)
    assert tx.recovery.mode == "abnormal"
    legacy = TransactionStateTable(tmp_path / "legacy", 8)
    counter = legacy_rebuild(legacy, tx.redo, tx._lookup)
    r1 = rs[1]
    assert counter == 2 and legacy.read(r1.queue_offset).offset != r1.commit_log_offset   # renumbered
    legacy_update_state(legacy, r1.queue_offset, r1.commit_log_offset, java_string_hash(GROUP),
                        TRANSACTION_COMMIT_TYPE)
    assert TRANSACTION_COMMIT_TYPE not in legacy.array()["state"].tolist()          # 3.x: stuck
    tx.commit(r1.commit_log_offset, r1.queue_offset, GROUP)
    new = prepare(tx, 3)
    assert new.queue_offset == 3                              # no slot reused
    assert bodies(store) == [b"order 0", b"order 1"]
    assert tx.state(1).state == TRANSACTION_COMMIT_TYPE and tx.prepared_slots() == [2, 3]
    legacy.destroy()
    store.close()


def test_rebuild_runs_after_the_replay(tmp_path):
    root = tmp_path / "store"                 # the copies below stay outside the store root
    tx, store = open_store(root)
    prepare(tx, 0)
    store.wait_dispatched()
    store.reput.stop()                      # these reach the commit log only
    late = [prepare(tx, i) for i in (1, 2)]
    store.halt()
    shutil.copytree(root / "transaction", tmp_path / "at-crash" / "transaction")
    tx, store = open_store(root)
    early = TransactionStateTable(tmp_path / "early", 8)
    redo_at_crash = open_redo_log(tmp_path / "at-crash", 8)
    rebuild_state_table(early, redo_at_crash, tx._lookup)     # what a rebuild racing the replay sees
    assert early.units == 1
    assert tx.prepared_slots() == [0, 1, 2]
    assert [tx.state(r.queue_offset).offset for r in late] == [r.commit_log_offset for r in late]
    redo_at_crash.close(); early.destroy()
    store.close()


def test_redo_log_is_caught_up_from_its_own_end(tmp_path):
    "A redo log that lost its tail (not covered by the checkpoint) is refilled before the rebuild."
    NO_INDEX = CFG.with_(message_index_enable=False)      # dropped index files would move the replay back
    tx, store = open_store(tmp_path, clock(step=1000), cfg=NO_INDEX)
    rs = [prepare(tx, i) for i in range(3)]
    tx.commit(rs[0].commit_log_offset, rs[0].queue_offset, GROUP)
    for i in range(40):                                       # several segments of plain messages
        store.put(Message("Plain", bytes(600)))
    store.close()
    tx, store = open_store(tmp_path, cfg=NO_INDEX)
    assert len(store.commit_log.mfq.files) >= 3
    store.halt()                                              # the replay will start in the last segment
    redo = open_redo_log(tmp_path, 8)
    redo.truncate_dirty_logic_files(rs[1].commit_log_offset)  # lose the last 3 redo units
    redo.close()
    tx, store = open_store(tmp_path, cfg=NO_INDEX)
    assert tx.recovery.mode == "abnormal" and tx.recovery.redo_caught_up == 3
    assert tx.prepared_slots() == [1, 2] and tx.state(0).state == TRANSACTION_COMMIT_TYPE
    store.close()


def test_redo_log_is_cut_with_the_commit_log(tmp_path):
    tx, store = open_store(tmp_path)
    rs = [prepare(tx, i) for i in range(3)]
    c = tx.commit(rs[0].commit_log_offset, rs[0].queue_offset, GROUP)
    store.wait_dispatched()
    store.halt()
    seg = tmp_path / "commitlog" / f"{0:020d}"
    with open(seg, "r+b") as f:                               # tear the commit record
        f.seek(c.commit_log_offset + c.size // 2)
        f.write(bytes(c.size - c.size // 2))
    tx, store = open_store(tmp_path)
    assert tx.recovery.redo_truncated
    assert [o for o, _, _ in scan_redo_log(tx.redo)] == [r.commit_log_offset for r in rs]
    assert tx.prepared_slots() == [0, 1, 2] and bodies(store) == []
    tx.commit(rs[0].commit_log_offset, rs[0].queue_offset, GROUP)          # decided again, once
    assert bodies(store) == [b"order 0"]
    store.close()


# -- recovery

def _workload(tx, store, ops):
    prepared = []
    for k, op in enumerate(ops):
        if op == "P" or not prepared:
            prepared.append(prepare(tx, k))
        else:
            r = prepared.pop(k % len(prepared))
            (tx.commit if op == "C" else tx.rollback)(r.commit_log_offset, r.queue_offset, GROUP)
    store.wait_dispatched()


def _tail(tx, store, tail, start, crash):
    "Prepare / commit pairs; with `crash`, each commit is written but never dispatched."
    if crash:
        store.reput.stop()
    for k, op in enumerate(tail, start=start):
        if op == "P":
            r = prepare(tx, k)
        else:
            if crash:
                store.reput.dispatch_until()    # let the prepared unit in, not the commit
            tx.commit(r.commit_log_offset, r.queue_offset, GROUP)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["P", "P", "C", "R"]), min_size=1, max_size=30),
       crash_before_dispatch=st.integers(0, 3))
def test_abnormal_recovery_rebuilds_the_clean_table(tmp_path_factory, ops, crash_before_dispatch):
    clean, crashed = tmp_path_factory.mktemp("clean"), tmp_path_factory.mktemp("crash")
    tail = ["P", "C"] * crash_before_dispatch
    tx, store = open_store(clean)
    _workload(tx, store, ops)
    _tail(tx, store, tail, len(ops), crash=False)
    store.close()
    tx, store = open_store(clean)
    assert tx.recovery.mode == "normal"
    want = table_bytes(tx)
    store.close()
    tx, store = open_store(crashed)
    _workload(tx, store, ops)
    _tail(tx, store, tail, len(ops), crash=True)
    store.halt()
    tx, store = open_store(crashed)
    assert tx.recovery.mode == "abnormal"
    assert table_bytes(tx) == want
    store.close()


def test_normal_recovery_truncates_a_torn_table(tmp_path):
    tx, store = open_store(tmp_path)
    rs = [prepare(tx, i) for i in range(5)]
    store.close()
    seg = tmp_path / "transaction" / "statetable" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[3 * 24 + 8: 3 * 24 + 12] = bytes(4)                  # unit 3: size 0, invalid
    seg.write_bytes(bytes(data))
    events = []
    tx, store = open_store(tmp_path, observer=events.append)
    rec = [e for e in events if isinstance(e, StateTableRecovered)][0]
    assert rec.mode == "normal+rebuild" and tx.prepared_slots() == [0, 1, 2, 3, 4]
    assert tx.state(3).offset == rs[3].commit_log_offset
    store.close()


# -- SIGKILL

CHILD = textwrap.dedent("""
    import json, sys, time
    from mqstore.config import StoreConfig
    from mqstore.message import Message
    from mqstore.store import MessageStore
    from mqstore.transaction import TransactionService, TransactionConfig
    root, stage = sys.argv[1], sys.argv[2]
    tx = TransactionService(TransactionConfig.small(state_table_units=8, redo_log_units=8))
    store = MessageStore.open(root, StoreConfig.small(commit_log_file_size=8192), plugins=[tx])
    rs = [tx.prepare(Message("Orders", f"order {i}".encode()), group="shop") for i in range(4)]
    tx.commit(rs[0].commit_log_offset, rs[0].queue_offset, "shop")
    tx.rollback(rs[1].commit_log_offset, rs[1].queue_offset, "shop")
    store.wait_dispatched()
    if stage == "before-dispatch":
        store.reput.stop()
        tx.commit(rs[2].commit_log_offset, rs[2].queue_offset, "shop")
    print(json.dumps([[r.commit_log_offset, r.queue_offset] for r in rs]), flush=True)
    time.sleep(60)
""")


def _killed_writer(root, stage):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), stage], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        line = child.stdout.readline()
        assert line, "the writer died before it was ready"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == -signal.SIGKILL
    return json.loads(line)


@pytest.mark.parametrize("stage, decided, open_slots", [("after-prepare", [b"order 0"], [2, 3]),
                                                        ("before-dispatch", [b"order 0", b"order 2"], [3])])
def test_sigkill_then_recover_and_check_back(tmp_path, stage, decided, open_slots):
    rs = _killed_writer(tmp_path, stage)
    assert [slot for _, slot in rs] == [0, 1, 2, 3]
    assert (tmp_path / "abort").exists()
    tx, store = open_store(tmp_path)
    assert tx.recovery.mode == "abnormal"
    assert tx.prepared_slots() == open_slots                  # exactly the undecided transactions
    assert [tx.state(s).offset for s in open_slots] == [rs[s][0] for s in open_slots]
    assert bodies(store) == decided
    tx.register_check_listener(GROUP, lambda m: LocalTransactionState.COMMIT_MESSAGE)
    rep = tx.check_once(now=int(time.time() * 1000) + 120_000)     # the writer used the real clock
    assert [c.slot for c in rep.checked] == open_slots
    assert sorted(bodies(store)) == [b"order 0", b"order 2", b"order 3"]
    assert tx.prepared_slots() == []
    store.close()


# -- the half-topic design

def test_half_topic_design_and_its_non_atomic_commit(tmp_path):
    store = MessageStore.open(tmp_path, CFG, clock=clock())
    h = HalfTopicTransactions(store)
    rs = [h.prepare(Message("Pay", f"tx {i}".encode()), group="g") for i in range(4)]
    h.end_transaction(rs[0].queue_offset, "g", True)
    h.end_transaction(rs[1].queue_offset, "g", False)
    with pytest.raises(TransactionStateError):
        h.end_transaction(rs[0].queue_offset, "g", False)
    with pytest.raises(TransactionGroupMismatchError):
        h.end_transaction(rs[2].queue_offset, "x", True)
    assert bodies(store, "Pay") == [b"tx 0"]
    h.put_final(h._half(rs[2].queue_offset))               # crash between the real message and its op
    store.halt()
    store = MessageStore.open(tmp_path, CFG, clock=clock(10**13))
    h = HalfTopicTransactions(store)
    assert sorted(h.undecided()) == [b"tx 2", b"tx 3"]
    h.register_check_listener("g", lambda m: LocalTransactionState.COMMIT_MESSAGE)
    asked = h.check_once(now=10**13 + 10**6)
    assert [q for q, _ in asked] == [2, 3] and h.undecided() == []
    assert sorted(bodies(store, "Pay")) == [b"tx 0", b"tx 2", b"tx 2", b"tx 3"]   # tx 2 twice
    store.close()


def test_half_topic_unknown_answers_reappend_then_park(tmp_path):
    store = MessageStore.open(tmp_path, CFG, clock=clock())
    h = HalfTopicTransactions(store, check_max=3)
    h.prepare(Message("Pay", b"slow"), group="g")
    h.register_check_listener("g", lambda m: LocalTransactionState.UNKNOW)
    for k in range(4):
        h.check_once(now=10**13 + k)
    store.wait_dispatched()
    assert h.undecided() == []
    parked = store.get("TRANS_CHECK_MAX_TIME_TOPIC", 0, 0, 10).messages
    assert [m.properties["TRANSACTION_CHECK_TIMES"] for m in parked] == ["3"]
    store.close()


def test_check_report_counts_the_units_the_scan_read(tmp_path):
    "CheckReport.units_read counts the units of every file the scan read; retired files are not read again."
    ck = clock(step=10_000)
    tx, store = open_store(tmp_path, ck)
    rs = [prepare(tx, i) for i in range(11)]                  # 8 units in the first file, 3 in the second
    store.wait_dispatched()
    tx.register_check_listener(GROUP, lambda msg: LocalTransactionState.COMMIT_MESSAGE)
    t0 = rs[0].store_timestamp
    rep = tx.check_once(now=t0 + 1_000)
    assert rep.units_read == 11 and rep.checked == [] and rep.too_young == 2
    rep = tx.check_once(now=t0 + 10**7)
    assert rep.units_read == 11 and len(rep.checked) == 11
    assert rep.files_done == ()              # judged before its answers: never a race with their dispatch
    store.wait_dispatched()
    rep = tx.check_once(now=t0 + 2 * 10**7)
    assert rep.files_done == ("00000000000000000000",)
    rep = tx.check_once(now=t0 + 3 * 10**7)
    assert rep.units_read == 3 and rep.checked == []           # only the second file is scanned
    store.close()


def test_a_dispatch_that_never_catches_up_is_an_error_not_a_missing_half(tmp_path, monkeypatch):
    "The half topic waits for dispatch; when the reput thread stops, a named error says so (not 'no half message')."
    import mqstore.transaction as transaction
    from mqstore.errors import StoreServiceError
    store = MessageStore.open(tmp_path, CFG, clock=clock())
    try:
        h = HalfTopicTransactions(store)
        first = h.prepare(Message("Pay", b"tx 0"), group="g")
        assert h._half(first.queue_offset).body == b"tx 0"
        store.reput.stop()                                   # as a dead thread would: nothing more is dispatched
        late = h.prepare(Message("Pay", b"tx 1"), group="g")
        monkeypatch.setattr(transaction, "DISPATCH_WAIT_S", 0.3)
        with pytest.raises(StoreServiceError, match="did not catch up within 0.3 s"):
            h._half(late.queue_offset)
    finally:
        store.halt()
