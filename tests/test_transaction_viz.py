"""Chapter 9's pictures (mqstore.viz.transaction), drawn from live objects: every text at least
8 pt, a legend where colour carries meaning, no "1 units", bytes and counts on separate linear
axes with a zero drawn as no bar, and the rounds picture and the animation (the excursion) show
the same asked slots."""
import itertools

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.text import Text

from mqstore.config import StoreConfig
from mqstore.message import Message
from mqstore.store import MessageStore
from mqstore.transaction import TransactionService, TransactionConfig, LocalTransactionState, CheckReport
from mqstore.viz.transaction import (draw_state_machine, draw_table_and_redo, draw_check_rounds,
                                     draw_check_frame, animate_check_back, draw_design_costs)

TXC = TransactionConfig.small(state_table_units=4, redo_log_units=8)


def clock(start=1_700_000_000_000, step=4_000):
    c = itertools.count()
    return lambda: start + step * next(c)


def small_texts(fig):
    return [t.get_text() for t in fig.findobj(Text) if t.get_text().strip() and t.get_fontsize() < 8]


@pytest.fixture
def rounds(tmp_path):
    "Six halves, a producer that answers UNKNOW once for odd ones; one frame per pass."
    tx = TransactionService(TXC)
    store = MessageStore.open(tmp_path, StoreConfig.small(), clock=clock(), plugins=[tx])
    rs = [tx.prepare(Message("Orders", f"o {i}".encode()), group="shop") for i in range(6)]
    store.wait_dispatched()
    asked = {}

    def listener(msg):
        i = int(msg.body.split()[1])
        asked[i] = asked.get(i, 0) + 1
        if i % 2 and asked[i] == 1:
            return LocalTransactionState.UNKNOW
        return LocalTransactionState.COMMIT_MESSAGE if i % 3 else LocalTransactionState.ROLLBACK_MESSAGE

    tx.register_check_listener("shop", listener)
    t0 = rs[0].store_timestamp
    frames = [(tx.table.array().copy(), CheckReport(t0))]
    for sec in (70, 130, 190):
        rep = tx.check_once(now=t0 + sec * 1000)
        store.wait_dispatched()
        frames.append((tx.table.array().copy(), rep))
    yield tx, store, frames
    store.close()


def test_rounds_picture_and_animation_show_the_same_asked_slots(rounds):
    tx, _, frames = rounds
    assert tx.prepared_slots() == []
    ax = draw_check_rounds(frames, TXC.state_table_units)
    thick = [p for p in ax.patches if p.get_linewidth() > 2]
    assert len(thick) == sum(len(rep.checked) for _, rep in frames)
    assert ax.get_legend() is not None and not small_texts(ax.figure)
    plt.close(ax.figure)
    fig, ax = plt.subplots()
    for units, rep in frames:
        draw_check_frame(ax, units, rep, TXC.state_table_units)
        assert len([p for p in ax.patches if p.get_linewidth() > 2]) == len(rep.checked)
        assert not small_texts(fig)
    plt.close(fig)
    html = animate_check_back(frames, TXC.state_table_units).to_jshtml()
    assert html.count("data:image/png") == len(frames)


def test_state_machine_says_one_unit_not_one_units(rounds):
    tx, _, frames = rounds
    ax = draw_state_machine(frames[-1][0][:1], [c for _, rep in frames for c in rep.checked])
    texts = " ".join(t.get_text() for t in ax.figure.findobj(Text))
    assert "1 units" not in texts and "1 slots" not in texts and "1 slot)" in texts
    assert not small_texts(ax.figure)
    plt.close(ax.figure)


def test_table_and_redo_has_a_legend_and_legible_text(rounds):
    tx, _, _ = rounds
    from mqstore.transaction import scan_redo_log
    fig = draw_table_and_redo([("after", tx.table.array(), list(scan_redo_log(tx.redo)))])
    assert fig.legends and not small_texts(fig)
    plt.close(fig)


def test_costs_put_bytes_and_counts_apart_and_draw_no_bar_for_zero():
    costs = {"a": {"extra record bytes": 1000, "special unit bytes in use": 0, "recovery reads": 0},
             "b": {"extra record bytes": 3000, "special unit bytes in use": 20, "recovery reads": 7}}
    left, right = draw_design_costs(costs)
    assert left.get_yscale() == right.get_yscale() == "linear"
    assert "bytes" in left.get_ylabel() and "bytes" not in right.get_ylabel()
    assert sorted(p.get_height() for p in right.patches) == [0, 7]
    assert not small_texts(left.figure)
    plt.close(left.figure)
