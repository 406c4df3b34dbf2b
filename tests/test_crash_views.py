"""Chapter 8's views of the lab: `written_extents` (page cache against the shadow disk) and
`trial_table` (one line per trial)."""
from mqstore.crash import Trial, power_cut, trial_table, written_extents
from mqstore.mapped_file import MappedFile


def test_written_extents_show_what_was_flushed(shadow_disk):
    live, disk = shadow_disk
    a = MappedFile.create(live / "commitlog", 0, 8192)
    a.append(b"A" * 100)
    a.flush()
    a.append(b"B" * 50)                             # page cache only
    b = MappedFile.create(live / "q", 0, 4096)
    b.append(b"C" * 10)                             # never flushed, created before a flush
    a.force()
    rows = written_extents(live, disk)
    a.close(); b.close()
    assert rows == [(f"commitlog/{0:020d}", 150, 150), (f"q/{0:020d}", 10, 0)]
    power_cut(live, disk)
    assert written_extents(live, live) == [(f"commitlog/{0:020d}", 150, 150), (f"q/{0:020d}", 0, 0)]


def test_trial_table_has_a_line_per_trial_and_names_a_failure():
    ok = Trial("kill", 0, 0, "writing", 0.1, 5, 5, 0, 0, 0, 0, "END", 0, "abnormal", 5, 500, 0.01)
    bad = Trial("power", 1, 0, "opening", 0.2, 0, 5, 1, 0, 0, 0, "END", 0, "abnormal", 5, 500, 0.01,
                "lost: k1")
    lines = trial_table([ok, bad]).splitlines()
    assert len(lines) == 3 and lines[1].endswith("ok") and lines[2].endswith("FAILED: lost: k1")


def test_written_extents_tell_a_missing_file_from_a_zeroed_one(shadow_disk):
    "None: no such file on that side; 0: the file is there, all zeros (chapter 8's picture labels both)."
    live, disk = shadow_disk
    a = MappedFile.create(live / "commitlog", 0, 8192)
    a.append(b"A" * 100)
    q = MappedFile.create(live / "q", 0, 4096)
    q.append(b"Q" * 10)                             # created before a flush: on disk, all zeros
    a.flush()
    t = MappedFile.create(live / "t", 0, 4096)
    t.append(b"T" * 10)                             # created after the last flush: no file on disk
    rows = {name: (c, d) for name, c, d in written_extents(live, disk)}
    a.close(); q.close(); t.close()
    assert rows[f"q/{0:020d}"] == (10, 0) and rows[f"t/{0:020d}"] == (10, None)


def test_lab_scenarios_show_the_fault_and_what_the_old_rule_loses(tmp_path):
    "Chapter 8's table: each lab scenario's facts show its fault happened and what the rule before the fix lost."
    from mqstore.crash import (scenario_empty_cq_file, scenario_empty_index_file, scenario_unflushed_index,
                               scenario_crash_during_rebuild, scenario_zero_cq_tail)
    r = scenario_empty_index_file(tmp_path)
    assert r.ok and r.facts == {"opened_as_is": "SegmentSizeError", "dropped": True}
    r = scenario_unflushed_index(tmp_path)
    assert r.ok and r.facts["rule_keeps"] and r.facts["dropped"] and r.facts["would_lose"] > 0
    r = scenario_crash_during_rebuild(tmp_path)
    assert r.ok and r.facts["deleted"] > 0 and r.facts["would_lose"] > 0
    r = scenario_empty_cq_file(tmp_path)
    assert r.ok and not r.facts["empty_file_left"] and r.facts["torn_unit_cut"]
    r = scenario_zero_cq_tail(tmp_path)
    assert r.ok and r.facts["zeroed"] == 5 and r.facts["served"] > 5
