"The explorers' Python side, without a browser: what they embed, and a clear error without their front-end."
import base64, json, re
import pytest
import mqstore
from mqstore.index import IndexFile
from mqstore.message import RecordStatus, check_record, decode_record, encode_blank
from mqstore.vectors import rocketmq_vectors
from mqstore.viz.index import chain_follower, chain_follower_data
from mqstore.viz.message import explorer_assets, inspector_lookup, inspector_records, record_inspector


@pytest.fixture
def segment(tmp_path):
    log = (rocketmq_vectors() / "commitlog.bin").read_bytes()
    cut = 4428 + 201 + 210                      # records 0-4 of the reference log
    path = tmp_path / "seg"
    path.write_bytes(log[:cut] + encode_blank(6000 - cut) + bytes(6000 - cut - 8))
    return path


def test_the_walk_covers_every_byte_once(segment):
    buf = segment.read_bytes()
    recs = inspector_records(buf)
    assert [r["status"] for r in recs] == ["OK"] * 5 + ["BLANK"]
    covered = [r["start"] + f[1] + k for r in recs for f in r["fields"] for k in range(f[2])]
    assert covered == list(range(len(buf)))
    for i in (0, 20, 4428 + 48, 5000):
        k, status, name, off, size, value = inspector_lookup(recs, i)
        if status == "OK":
            assert decode_record(buf, recs[k]["start"]).commit_log_offset == recs[k]["start"]


def test_torn_and_zero_tails_are_named(segment):
    buf = segment.read_bytes()[:4428 + 100]           # inside record 3
    recs = inspector_records(buf)
    assert recs[-1]["status"] == "TORN" and recs[-1]["start"] + recs[-1]["size"] == len(buf)
    assert check_record(buf, recs[-1]["start"]).status is RecordStatus.TORN
    zeros = segment.read_bytes()[:211] + bytes(300)
    recs = inspector_records(zeros)
    assert recs[-1]["status"] == "END" and inspector_lookup(recs, 400)[1] == "END"


def test_outputs_fetch_nothing_and_carry_their_data(segment, tmp_path):
    keys = [json.loads(line) for line in open(rocketmq_vectors() / "index_keys.jsonl")]
    f = IndexFile.create(tmp_path / "index", 64, 256)
    for k in keys:
        f.put_key(k["key"], k["phyOffset"], k["storeTimestamp"])
    try:
        for out in (record_inspector({"seg": segment}), chain_follower(f)):
            html = out.data
            assert not re.search(r"(src|href)\s*=|https?://|@import|fetch\(|XMLHttpRequest", html), "a network reference"
            assert "</script" not in html[html.index("<script>") + 8:html.rindex("</script>")]
        d = chain_follower_data(f)
        raw = base64.b64decode(d["b64"])
        assert raw + bytes(d["file_size"] - len(raw)) == (rocketmq_vectors() / "index.bin").read_bytes()
    finally:
        f.close()


def test_without_the_front_end_the_error_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(mqstore, "__file__", str(tmp_path / "mqstore" / "__init__.py"))
    with pytest.raises(FileNotFoundError, match="explorers need explorers.css"):
        explorer_assets("explorers.css", "record_inspector.js")
