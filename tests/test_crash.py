"""Crash tests: real SIGKILLs of writer processes, simulated power cuts, the hand-made faults of
RocketMQ's reported failures, and the invariant checker itself."""
import os, shutil, struct
from pathlib import Path

import pytest

from mqstore.config import StoreConfig, FLUSH_SYNC, FLUSH_ASYNC
from mqstore.crash import (Ack, CrashLab, ShadowDisk, Zygote, check_store, crashed_store, power_cut,
                           prepare_disk, scan_log, summarize, tear_record, workload_message, SCENARIOS,
                           SCENARIO_CONFIG, ManualClock)
from mqstore.mapped_file import MappedFile, FLUSH_LISTENERS
from mqstore.store import MessageStore

pytestmark = pytest.mark.filterwarnings("ignore:.*zero-byte last segment removed:UserWarning")

ROOT = Path(__file__).resolve().parent.parent
SYNC = StoreConfig.small(flush_disk_type=FLUSH_SYNC)
ASYNC = StoreConfig.small(flush_disk_type=FLUSH_ASYNC)


def report_summary(capsys, name, trials):
    "Print a summary line past pytest's capture and keep it in _build/crash_summary.txt."
    s = summarize(trials)
    line = (f"crash-lab {name}: trials={s['trials']} acknowledged={s['acknowledged']} lost={s['lost']} "
            f"torn={s['torn']} problems={s['problems']} not_kept={s['not_kept']}")
    with capsys.disabled():
        print("\n" + line)
    out = ROOT / "_build" / "crash_summary.txt"
    out.parent.mkdir(exist_ok=True)
    lines = [l for l in (out.read_text().splitlines() if out.exists() else [])
             if not l.startswith(f"crash-lab {name}:")]
    out.write_text("\n".join(lines + [line]) + "\n")
    return s, line


@pytest.fixture(scope="module")
def zygote():
    with Zygote() as z:
        yield z


def failures(trials):
    return [t for t in trials if not t.ok or t.not_kept]


# -- the trials --------------------------------------------------------------------------------

@pytest.mark.slow
def test_sigkill_trials_sync_flush(tmp_path, zygote, capsys):
    with CrashLab(tmp_path, SYNC, mode="kill", seed=11, zygote=zygote) as lab:
        trials = lab.run(200)
    s, line = report_summary(capsys, "sigkill-sync", trials)
    assert not failures(trials), (line, failures(trials)[:3])
    assert s["lost"] == s["torn"] == s["problems"] == 0, line
    assert s["acknowledged"] > 1000, line
    phases = {t.phase for t in trials}
    assert {"opening", "writing"} <= phases, phases          # kills landed in recovery and in puts
    assert any(t.recovery == "abnormal" for t in trials) and any(t.recovery == "normal" for t in trials)


@pytest.mark.slow
def test_power_loss_trials_sync_flush(tmp_path, zygote, capsys):
    with CrashLab(tmp_path, SYNC, mode="power", seed=12, zygote=zygote) as lab:
        trials = lab.run(200)
    s, line = report_summary(capsys, "power-sync", trials)
    assert not failures(trials), (line, failures(trials)[:3])
    assert s["lost"] == s["torn"] == s["problems"] == 0, line
    assert s["acknowledged"] > 1000, line


@pytest.mark.slow
def test_sigkill_trials_async_flush(tmp_path, zygote, capsys):
    "Async flush, SIGKILL: nothing served is torn and every record that passed its CRC is kept."
    with CrashLab(tmp_path, ASYNC, mode="kill", seed=13, zygote=zygote) as lab:
        trials = lab.run(40)
    s, line = report_summary(capsys, "sigkill-async", trials)
    assert s["torn"] == 0 and s["not_kept"] == 0 and s["problems"] == 0, (line, failures(trials)[:3])
    assert s["lost"] == 0, line          # the page cache survives a kill: async acks too


def test_a_few_trials_of_each_kind(tmp_path, zygote):
    "A quick version of the trials for `make test-fast`."
    for mode, seed in (("kill", 1), ("power", 2)):
        with CrashLab(tmp_path / mode, SYNC, mode=mode, seed=seed, zygote=zygote) as lab:
            trials = lab.run(6)
        assert not failures(trials), failures(trials)


# -- the writer ----------------------------------------------------------------------------------

def test_writer_not_killed_acks_everything_and_closes(tmp_path, zygote):
    cfg = SYNC
    spec = {"root": str(tmp_path / "s"), "config": __import__("mqstore.crash").crash.config_to_dict(cfg),
            "seed": 5, "first_seq": 0, "count": 25}
    run = zygote.run(spec, None)
    assert not run.killed and run.phase == "closed" and len(run.acks) == 25
    acks = [Ack.of(workload_message(5, seq), type("R", (), dict(commit_log_offset=o, size=s, queue_offset=q))())
            for seq, o, s, q, _ in run.acks]
    assert not (tmp_path / "s" / "abort").exists()
    report = check_store(tmp_path / "s", cfg, acks)
    assert report.ok and report.mode == "normal" and report.acked == 25, report.summary()


def test_workload_is_deterministic():
    a, b = workload_message(3, 17), workload_message(3, 17)
    assert a == b and a.keys == ["k3-17"] and workload_message(3, 18).body != a.body


# -- the power-loss model ------------------------------------------------------------------------

def test_shadow_disk_keeps_only_flushed_bytes(shadow_disk):
    live, disk = shadow_disk
    mf = MappedFile.create(live / "commitlog", 0, 8192)
    mf.append(b"A" * 100)
    mf.flush()                                    # durable: the first page
    mf.append(b"B" * 5000)                        # in the page cache only
    other = MappedFile.create(live / "commitlog", 8192, 8192)
    other.append(b"C" * 10)                       # never flushed
    (live / "abort").touch()
    doomed = MappedFile.create(live / "x", 0, 4096)
    doomed.flush()                                # created and flushed: exists on disk
    doomed.destroy()                              # deleted, then another flush commits that
    mf.force()
    tail = MappedFile.create(live / "y", 0, 4096)   # created after the last flush: not on disk
    mf.close(); other.close(); tail.close()
    power_cut(live, disk)
    data = (live / "commitlog" / f"{0:020d}").read_bytes()
    assert data[:100] == b"A" * 100 and data[100:5100] == b"B" * 5000          # forced at the end
    assert (live / "commitlog" / f"{8192:020d}").read_bytes() == bytes(8192)    # exists, never flushed
    assert not (live / "x").exists() or not any((live / "x").iterdir())
    assert not (live / "y").exists() or not any((live / "y").iterdir())
    assert (live / "abort").exists()                                            # fsynced at once


def test_power_cut_drops_unflushed_bytes_of_an_async_store(tmp_path):
    "Async flush under a power cut: acknowledged but unflushed messages really are lost in the model."
    live, disk = tmp_path / "live", tmp_path / "disk"
    cfg = StoreConfig.small(flush_interval_ms=10_000, flush_thorough_interval_ms=10_000,
                            flush_cq_interval_ms=10_000)
    prepare_disk(live, disk)
    shadow = ShadowDisk(live, disk)
    FLUSH_LISTENERS.append(shadow)
    try:
        store = MessageStore.open(live, cfg, clock=ManualClock())
        for i in range(30):
            store.put(workload_message(1, i))
    finally:
        FLUSH_LISTENERS.remove(shadow)       # the power goes out here (halt would flush the log)
    store.halt()
    power_cut(live, disk)
    assert scan_log(live, cfg)[0] == []                  # nothing was flushed
    assert (live / "abort").exists()


# -- the checker finds what it should ------------------------------------------------------------

@pytest.fixture
def clean_store(tmp_path):
    root = tmp_path / "s"
    clock, acks = ManualClock(), []
    with MessageStore.open(root, SCENARIO_CONFIG, clock=clock) as store:
        for seq in range(60):
            clock.tick()
            m = workload_message(4, seq)
            acks.append(Ack.of(m, store.put(m)))
        store.wait_dispatched()
    return root, acks, clock


def test_check_store_clean(clean_store):
    root, acks, clock = clean_store
    r = check_store(root, SCENARIO_CONFIG, acks, clock=clock)
    assert r.ok and r.records == 60 and r.units == 60 and r.index_entries == 120 and r.acked == 60


def test_check_store_reports_a_bad_queue_unit(clean_store):
    root, acks, clock = clean_store
    a = acks[10]
    qfile = root / "consumequeue" / a.topic / str(a.queue_id) / f"{0:020d}"
    data = bytearray(qfile.read_bytes())
    struct.pack_into(">q", data, a.queue_offset * 20 + 12, 12345)      # a wrong tagsCode
    qfile.write_bytes(bytes(data))
    r = check_store(root, SCENARIO_CONFIG, acks, clock=clock)
    assert any("disagrees" in p for p in r.problems), r.problems


def test_check_store_reports_a_bad_index_entry(clean_store):
    root, acks, clock = clean_store
    f = sorted((root / "index").iterdir())[0]
    data = bytearray(f.read_bytes())
    at = 40 + SCENARIO_CONFIG.index_slots * 4 + 20 * 3 + 4            # entry 3's phyOffset
    struct.pack_into(">q", data, at, acks[5].offset + 1)
    f.write_bytes(bytes(data))
    r = check_store(root, SCENARIO_CONFIG, acks, clock=clock)
    assert any("where the CRC walk validated no record" in p for p in r.problems), r.problems
    assert any("is not indexed" in p for p in r.problems), r.problems


def test_check_store_reports_lost_and_torn(clean_store):
    root, acks, clock = clean_store
    fake = Ack(acks[0].topic, acks[0].queue_id, acks[0].key, acks[0].offset, acks[0].size,
               acks[0].queue_offset, b"not what was sent")
    missing = Ack("Orders", 0, "nope", 10**7, 100, 999, b"x")
    r = check_store(root, SCENARIO_CONFIG, [fake, missing], clock=clock)
    assert [a for a, _ in r.torn] == [fake] and [a for a, _ in r.lost] == [missing]


def test_check_store_reports_a_corrupt_record_below_the_end(clean_store):
    root, acks, clock = clean_store
    a = acks[20]                     # a clean stop: normal recovery re-checks only the last 3 segments
    seg = root / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    data[a.offset + 95] ^= 0x10
    seg.write_bytes(bytes(data))
    r = check_store(root, SCENARIO_CONFIG, acks, clock=clock)
    assert not r.ok and a in [x for x, _ in r.lost] and not r.torn      # never served corrupt


# -- RocketMQ's reported failures ----------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(tmp_path, name):
    r = SCENARIOS[name](tmp_path)
    assert r.ok, (name, r, r.report.summary() if r.report else None,
                  r.report and (r.report.problems[:3], r.report.lost[:3]))


def test_torn_record_467_details(tmp_path):
    r = SCENARIOS["torn record"](tmp_path)
    assert r.facts["status"] == "TORN" and r.facts["size_field"] > 0     # what RocketMQ < PR #501 took as valid
    assert r.facts["unit_before"] and not r.facts["unit_after"]      # its queue unit cut too


def test_stale_checkpoint_1153_replays_everything(tmp_path):
    r = SCENARIOS["stale checkpoint"](tmp_path)
    assert r.facts["start"] == 0 and r.facts["replayed"] == r.facts["records"]
    assert r.facts["replayed_with_checkpoint"] < r.facts["records"] / 2


def test_index_after_crash_8007_would_lose_entries(tmp_path):
    r = SCENARIOS["index after crash"](tmp_path)
    assert r.facts["would_lose"] > 0 and r.facts["replay_from"] < r.facts["checkpoint_start"]


def test_async_kill_keeps_every_record_that_passed_crc(tmp_path, zygote):
    with CrashLab(tmp_path, ASYNC, mode="kill", seed=21, zygote=zygote) as lab:
        trials = lab.run(5)
    assert all(t.not_kept == 0 and t.torn == 0 and t.problems == 0 for t in trials), trials
