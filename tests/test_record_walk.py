"""The walk that chapter 3 draws (mqstore.viz.message.walk_log, one check_record after another)
stops where scan_segment stops, in both of scan_segment's walks, on the reference log and on
damaged copies of it; and the picture draws."""
import struct

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt

from mqstore.message import RecordStatus, check_record
from mqstore.fast.records import scan_segment


def logs(vectors):
    log = (vectors / "commitlog.bin").read_bytes()
    starts = [0]
    while (r := check_record(log, starts[-1])).ok:
        starts.append(starts[-1] + r.size)
    out = {name: (vectors / name).read_bytes() for name in
           ("commitlog.bin", "edge/commitlog_zero_padded.bin", "edge/commitlog_blank_eof.bin",
            "edge/truncated_last_record.bin")}
    flipped = bytearray(log); flipped[starts[3] + 95] ^= 1
    zeroed = bytearray(log); zeroed[starts[20]:starts[20] + 4096] = bytes(4096)
    big = bytearray(log); struct.pack_into(">i", big, starts[30], 100_000)
    bad_magic = bytearray(log); bad_magic[starts[12] + 5] ^= 0xFF
    out.update(flipped=bytes(flipped), zeroed=bytes(zeroed), big=bytes(big), bad_magic=bytes(bad_magic))
    return out


@pytest.mark.parametrize("fast", [True, False])
def test_walk_log_stops_where_scan_segment_stops(vectors, fast):
    from mqstore.viz.message import walk_log
    for name, buf in logs(vectors).items():
        walk = walk_log(buf)
        headers, end, why = scan_segment(buf, check_crc=True, fast=fast)
        assert [w[0] for w in walk[:-1]] == headers["offset"].tolist(), name
        assert all(w[2] == "OK" for w in walk[:-1]), name
        assert (walk[-1][0], walk[-1][2]) == (end, why.name), name
        assert why is not RecordStatus.OK


def test_check_walk_picture_has_a_legend_for_every_status(vectors):
    from mqstore.viz.message import draw_check_walk
    ax = draw_check_walk(logs(vectors))
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"BLANK", "END", "TORN", "CORRUPT", "never read"} <= labels
    assert all(t.get_fontsize() >= 8 for t in ax.get_legend().get_texts())
    plt.close(ax.figure)
