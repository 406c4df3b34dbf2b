"""The chapters teach step by step: small code cells, pictures, exercises with folded and checked
solutions, and no export machinery in sight. Reads the committed notebooks (with their stored
outputs), so it cannot pass on a chapter that was not executed.

A chapter joins CHAPTERS when it has been rewritten in this shape; in the end the list holds
the whole book. The conventions (see CONTRIBUTING.md):
- an exercise is a markdown cell starting `### Exercise N`; before the next exercise or section
  it has a folded solution (a code cell tagged `hide-cell`, which folds the output too, or a markdown dropdown
  `:class: dropdown`) and a hidden check (a code cell tagged `remove-cell` with an `assert`);
- the only `#|` lines are `#| default_exp M` (alone in its cell) and `#| export [M]`, which the
  book's build removes (tools/hide_directives.py)."""
import json, re, statistics
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ["01_mapped_file", "02_mapped_file_queue", "03_record_format", "04_commit_log", "05_dispatch", "06_index", "07_recovery", "08_crash_lab", "09_transactions", "10_making_it_fast", "10a_fast_records", "10b_fast_dispatch", "10c_fast_recovery", "11_performance", "12_spark_pipeline", "13_real_stores", "14_modern_stores"]          # chapter file stems, rewritten in the step-by-step shape
MAX_LINES, MAX_MEDIAN, MIN_FIGURES, MIN_EXERCISES = 40, 15, 3, 4
ALLOWED_DIRECTIVE = re.compile(r"^#\| (default_exp [\w.]+|export( [\w.]+)?)\s*$")


def _src(cell):
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def figures(cells):
    n = 0
    for c in cells:
        for o in c.get("outputs", []) if c["cell_type"] == "code" else []:
            data = o.get("data", {})
            html = "".join(data.get("text/html", ""))
            if "image/png" in data or "image/svg+xml" in data or ("<img" in html and "anim" in html):
                n += 1
    return n


def exercises(cells):
    "[(heading, has folded solution, has hidden check)] for each `### Exercise` cell."
    found = []
    for i, c in enumerate(cells):
        if c["cell_type"] != "markdown" or not _src(c).lstrip().startswith("### Exercise"):
            continue
        folded = checked = False
        for d in cells[i + 1:]:
            s = _src(d).lstrip()
            if d["cell_type"] == "markdown" and (s.startswith("### Exercise") or s.startswith("## ")):
                break
            if d["cell_type"] == "code" and "hide-cell" in _tags(d):      # the answer folds with its output
                folded = True
            if d["cell_type"] == "markdown" and ":class: dropdown" in s:
                folded = True
            if d["cell_type"] == "code" and "remove-cell" in _tags(d) and "assert" in s:
                checked = True
        found.append((_src(c).strip().splitlines()[0], folded, checked))
    return found


def shape_problems(nb: dict) -> list:
    "Every way the notebook breaks the chapter shape (empty when it holds)."
    cells = nb["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    problems = []
    lengths = [len(_src(c).splitlines()) for c in code]
    long = [(i, n) for i, n in enumerate(lengths) if n > MAX_LINES]
    if long:
        problems.append(f"code cells over {MAX_LINES} lines (index, lines): {long}")
    if lengths and statistics.median(lengths) > MAX_MEDIAN:
        problems.append(f"median code cell {statistics.median(lengths)} lines > {MAX_MEDIAN}")
    unexecuted = sum(1 for c in code if c.get("execution_count") is None)
    if unexecuted:
        problems.append(f"{unexecuted} code cells have no stored execution")
    if figures(cells) < MIN_FIGURES:
        problems.append(f"{figures(cells)} figures in the stored outputs, at least {MIN_FIGURES}")
    ex = exercises(cells)
    good = [e for e in ex if e[1] and e[2]]
    if len(good) < MIN_EXERCISES:
        problems.append(f"{len(good)} exercises with a folded solution and a hidden check, at least "
                        f"{MIN_EXERCISES}: {ex}")
    for i, c in enumerate(code):
        s = _src(c)
        for line in s.splitlines():
            if line.startswith("#|") and not ALLOWED_DIRECTIVE.match(line):
                problems.append(f"code cell {i}: a directive the build does not hide: {line!r}")
        if s.startswith("#| default_exp") and len(s.strip().splitlines()) > 1:
            problems.append(f"code cell {i}: `#| default_exp` shares its cell with code")
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_shape(chapter):
    nb = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    assert not shape_problems(nb), "\n".join(shape_problems(nb))


def test_the_checker_finds_what_is_wrong():
    "The checker itself: a chapter with a long cell, no figures, a bare exercise and a stray directive."
    md = lambda s: {"cell_type": "markdown", "metadata": {}, "source": s}
    code = lambda s, tags=(), n=1, outputs=(): {"cell_type": "code", "metadata": {"tags": list(tags)},
                                                "source": s, "execution_count": n, "outputs": list(outputs)}
    png = {"output_type": "display_data", "data": {"image/png": "AAAA"}, "metadata": {}}
    good_ex = [x for k in range(4) for x in (md(f"### Exercise {k + 1}\nPredict."), code("1", ["hide-cell"]),
                                              code("assert 1", ["remove-cell"]))]
    good = {"cells": [code("#| default_exp toy"), code("#| export\nx = 1", outputs=[png, png, png]), *good_ex]}
    assert shape_problems(good) == []
    bad = {"cells": [code("#| default_exp toy\nimport os"), code("\n".join(["x = 1"] * 41)),
                     code("#| hide\ny = 2", n=None), md("### Exercise 1\nWhy?"), code("1")]}
    text = "\n".join(shape_problems(bad))
    for expected in ("over 40 lines", "no stored execution", "figures", "exercises", "'#| hide'",
                     "shares its cell"):
        assert expected in text, expected
