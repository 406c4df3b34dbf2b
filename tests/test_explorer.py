"The live recovery explorer, without a browser: the function the widget calls, for every fault."
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from mqstore.recovery import (IndexFilesDropped, RecordChecked, Redispatched, SegmentChecked, SegmentChosen,
                              Truncated, WalkStopped)
from mqstore.viz.recovery import (FAULTS, explore_recovery, keys_lost_by_rocketmq, recovery_frames,
                                  filmstrip_steps, run_scenario)


def _chosen(sc):
    return [e for e in sc.events if isinstance(e, SegmentChosen)]


def _cut(sc):
    return next(e.offset for e in sc.events if isinstance(e, Truncated) and e.what == "commitlog")


@pytest.fixture(scope="module")
def scenarios():
    return {f: explore_recovery(f) for f in FAULTS}


def test_every_fault_draws_every_frame(scenarios):
    for f, sc in scenarios.items():
        frames = recovery_frames(sc.events)
        assert frames[0] == 0 and frames[-1] == len(sc.events) and frames == sorted(set(frames))
        fig, ax = plt.subplots()
        for step in frames[:3] + frames[-2:]:
            assert explore_recovery(f, step, ax=ax) is sc          # the same scenario, redrawn
        assert len(filmstrip_steps(sc.events)) == 6
        plt.close("all")


def test_checkpoint_skips_the_segments_before_it(scenarios):
    sc = scenarios["crash"]
    checked = [e for e in sc.events if isinstance(e, SegmentChecked)]
    assert [e.accepted for e in checked][-1] and not any(e.accepted for e in checked[:-1])
    start = _chosen(sc)[-1]
    assert start.index >= 1                                  # segment 0 at least is skipped
    walked = [e.offset for e in sc.events if isinstance(e, RecordChecked)]
    assert min(walked) == int(start.name)
    skipped = [off for off, _, _ in sc.before["records"] if off < int(start.name)]
    assert skipped and not set(skipped) & set(walked)


def test_stale_checkpoint_replays_everything(scenarios):
    sc = scenarios["stale_checkpoint"]
    assert [e.index for e in _chosen(sc)] == [0]
    assert not any(e.accepted for e in sc.events if isinstance(e, SegmentChecked))
    assert next(e for e in sc.events if isinstance(e, Redispatched)).count == len(sc.after["records"])


@pytest.mark.parametrize("fault", ["crash", "torn", "dropped_index"])
def test_keys_rocketmq_would_lose_are_kept(scenarios, fault):
    sc = scenarios[fault]
    rocketmq, mqstore = _chosen(sc)[0], _chosen(sc)[-1]
    drop = next(e for e in sc.events if isinstance(e, IndexFilesDropped))
    assert drop.replay_from < int(rocketmq.name) and int(mqstore.name) <= drop.replay_from
    lost = keys_lost_by_rocketmq(sc.events, sc.sent)
    assert lost and sorted(sc.found) == sorted(k for _, k in lost)
    assert all(sc.found.values())                            # every one found by query after recovery


def test_torn_record_sets_the_truncation_offset(scenarios):
    sc = scenarios["torn"]
    last = sc.sent[-1][3]
    stop = next(e for e in sc.events if isinstance(e, WalkStopped))
    assert (stop.status, stop.offset, _cut(sc)) == ("TORN", last.commit_log_offset, last.commit_log_offset)
    assert max(o + s for o, s, k in sc.after["records"]) == last.commit_log_offset
    assert any(k == "bad" for _, _, k in sc.before["records"])


def test_crash_without_damage_cuts_after_the_last_record(scenarios):
    sc = scenarios["crash"]
    last = sc.sent[-1][3]
    assert _cut(sc) == last.commit_log_offset + last.size
    added = sum(len(set(sc.after["queues"][q]) - set(sc.before["queues"].get(q, []))) for q in sc.after["queues"])
    assert added == 5                                        # the lagging records, re-dispatched


def test_torn_byte_zero_is_the_end_of_the_log():
    sc = run_scenario("torn", torn_byte=0, before_crash=30, crash_at=10)
    stop = next(e for e in sc.events if isinstance(e, WalkStopped))
    assert stop.status == "END" and _cut(sc) == sc.sent[-1][3].commit_log_offset


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError):
        run_scenario("meteor")


def test_the_widget_builds_and_steps_without_a_browser():
    pytest.importorskip("ipywidgets")
    from mqstore.viz.recovery import recovery_explorer
    box = recovery_explorer()
    fault, step = box.children[0].children
    assert fault.value == "torn" and step.max >= 5
    step.value = step.max                                    # redraws through explore_recovery
    fault.value = "stale_checkpoint"
    plt.close("all")
