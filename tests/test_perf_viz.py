"mqstore.viz.perf: the goals picture and the results file it reads (no timing: synthetic rows)."
import csv

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

from mqstore.viz.perf import draw_goals, goal_rows

HEADER = ["time", "bench", "figure", "value", "baseline", "baseline_value", "ratio", "unit", "machine"]


def write_results(path, rows):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        out.writerows(rows)


def test_goal_rows_keeps_the_latest_row_of_each_goal_and_its_spread(tmp_path):
    path = tmp_path / "latest.csv"
    write_results(path, [
        ["2026-01-01T00:00:00", "bench_x", "GOAL a (GB/s)", "0.100", "crc", "1.000", "0.1000",
         "GB/s; target >= 0.5x; runs 1.000/2.000/4.000 s", "m"],
        ["2026-01-01T00:00:01", "bench_x", "figure without goal", "1", "b", "1", "1.0", "x", "m"],
        ["2026-01-02T00:00:00", "bench_y", "GOAL b (msg/s)", "50.000", "100k", "100.000", "0.5000",
         "msg/s; target >= 1x; runs 2.000/2.000/2.000 s", "m"],
        ["2026-01-03T00:00:00", "bench_x", "GOAL a (GB/s)", "0.300", "crc", "1.000", "0.3000",
         "GB/s; target >= 0.5x; runs 1.000/1.500/3.000 s", "m"],
    ])
    rows = goal_rows(path)
    assert [r["name"] for r in rows] == ["b (msg/s)", "a (GB/s)"]
    b, a = rows
    assert b["ratios"] == [0.5, 0.5, 0.5] and b["target"] == 1.0
    # a rate is work / time: the slowest run (3 s) has ratio 0.3 * 1.5 / 3, the fastest 0.3 * 1.5 / 1
    assert a["ratios"] == [0.3 * 1.5 / 3.0, 0.3, 0.3 * 1.5 / 1.0] and a["target"] == 0.5


def test_draw_goals_marks_met_and_missed_goals():
    goals = [{"name": "met", "ratios": [0.6, 0.7, 0.8], "target": 0.5},
             {"name": "missed", "ratios": [0.01, 0.02], "target": 0.25}]
    ax = draw_goals(goals, title="t")
    bars = ax.patches[:2]
    assert [round(b.get_width(), 3) for b in bars] == [0.7, 0.015]
    assert bars[0].get_hatch() in (None, "") and bars[1].get_hatch() == "//"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["met", "missed"]
    assert ax.figure.legends and len(ax.figure.legends[0].get_texts()) == 5
    dots = [l for l in ax.lines if l.get_marker() == "o"]          # one per repetition: filled if it reached the target
    assert [d.get_markerfacecolor() == "#000000" for d in dots] == [True] * 3 + [False] * 2
    plt.close("all")
