"The recovery explorer, without a browser: the scenarios for every fault, and the data the page is fed."
import json, re
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from mqstore.recovery import (IndexFilesDropped, RecordChecked, Redispatched, SegmentChecked, SegmentChosen,
                              Truncated, WalkStopped)
from mqstore.viz.recovery import (CRASH_POINTS, FAULTS, RULES, check_scenario, draw_recovery_step,
                                  keys_lost_by_rocketmq, recovery_case, recovery_explorer_data, recovery_frames,
                                  filmstrip_steps, rocketmq_events, run_scenario, verdict)


def _chosen(sc):
    return [e for e in sc.events if isinstance(e, SegmentChosen)]


def _cut(sc):
    return next(e.offset for e in sc.events if isinstance(e, Truncated) and e.what == "commitlog")


@pytest.fixture(scope="module")
def scenarios():
    return {f: run_scenario(f, check=check_scenario) for f in FAULTS}


def test_every_fault_draws_every_frame(scenarios):
    for f, sc in scenarios.items():
        frames = recovery_frames(sc.events)
        assert frames[0] == 0 and frames[-1] == len(sc.events) and frames == sorted(set(frames))
        fig, ax = plt.subplots()
        for step in frames[:3] + frames[-2:]:
            draw_recovery_step(ax, sc, step)
            assert ax.get_title()
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
    kept = len(sc.sent) - verdict(sc.verdict)["lost"]        # the store serves every key of a kept message
    assert sc.unfound == [k for _, _, k, _ in sc.sent[kept:]]


def test_unfound_is_measured_in_the_recovered_store(scenarios):
    "The engine's keys come from its recovered store: a key of a cut message is not served there."
    sc = scenarios["power_cut"]
    assert sc.unfound == [k for _, _, k, _ in sc.sent[-3:]]
    v = verdict(sc.verdict, unfound=sc.unfound)
    assert v["lost"] == 3 and v["keys"] == 0              # counted as lost, not twice
    assert verdict(sc.verdict, unfound=["a-1"])["keys"] == 1


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


def test_every_put_is_acknowledged_and_checked(scenarios):
    lost = {"crash": 0, "power_cut": 3, "torn": 1, "dropped_index": 0, "stale_checkpoint": 0, "dispatch_lag": 0}
    for f, sc in scenarios.items():
        v = verdict(sc.verdict)
        assert v["acked"] == len(sc.sent) == len(sc.bodies)
        assert v["units"] == 0 and sc.verdict.summary().endswith(": " + v["summary"])
        if f in lost:
            assert v["lost"] == lost[f], f
    mid = 60 + 25 // 2                                       # the flipped record: it and all after it are cut
    assert verdict(scenarios["flipped_bit"].verdict)["lost"] == len(scenarios["flipped_bit"].sent) - mid
    stop = next(e for e in scenarios["flipped_bit"].events if isinstance(e, WalkStopped))
    assert stop.offset == scenarios["flipped_bit"].sent[mid][3].commit_log_offset and stop.status != "TORN"


def test_dispatch_lag_re_dispatches_twenty(scenarios):
    sc = scenarios["dispatch_lag"]
    added = sum(len(set(sc.after["queues"][q]) - set(sc.before["queues"].get(q, []))) for q in sc.after["queues"])
    assert added == 20


def test_rocketmq_events_keep_the_checkpoints_start(scenarios):
    sc = scenarios["crash"]
    events = rocketmq_events(sc.events)
    chosen = [e for e in events if isinstance(e, SegmentChosen)]
    assert len(chosen) == 1 and chosen[0] == _chosen(sc)[0]
    walked = [e.offset for e in events if isinstance(e, RecordChecked)]
    assert min(walked) == int(chosen[0].name)
    red = next(e for e in events if isinstance(e, Redispatched))
    assert red.count == sum(e.status == "OK" for e in events if isinstance(e, RecordChecked))
    assert rocketmq_events(scenarios["stale_checkpoint"].events) == scenarios["stale_checkpoint"].events


def test_the_explorer_data_holds_every_combination():
    kinds = []
    case = recovery_case("dropped_index", 15, kinds)
    assert "RecoveryStarted" in [k[0] for k in kinds]
    assert len(case["rules"]) == len(RULES) == 3
    v = [r["verdict"] for r in case["rules"]]
    assert [x["keys"] for x in v] == [28, 3, 0] and all(x["lost"] == 0 for x in v)
    engine = case["rules"][2]
    assert len(engine["after"]["index"]) == case["puts"]              # every key indexed again
    assert len(case["rules"][0]["after"]["index"]) == case["puts"] - 28
    for r in case["rules"]:
        for row in r["events"]:
            assert len(row) == 1 + len(kinds[row[0]][1])
    data = recovery_explorer_data(faults=("crash", "torn"), crash_points=(5, 45))
    assert len(data["cases"]) == 2 and all(len(c) == 2 for c in data["cases"])
    assert data["faults"][1][0] == "torn" and data["crash_points"] == [5, 45] and set(CRASH_POINTS) >= {5, 45}
    json.dumps(data)                                         # plain JSON all through


def test_the_explorer_output_fetches_nothing():
    from mqstore.viz.recovery import recovery_explorer
    data = recovery_explorer_data(faults=("torn",), crash_points=(5,))
    html = recovery_explorer(data).data.replace('"http://www.w3.org/2000/svg"', "SVG_NS")   # a name, never fetched
    assert "recoveryExplorer" in html and "mqx-recovery" in html
    assert not re.search(r"(src|href)\s*=|https?://|@import|fetch\(|XMLHttpRequest", html), "a network reference"
