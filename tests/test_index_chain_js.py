"""Chapter 6's index chain follower (book/_static/explorers/index_chain.js), run under Node without a
browser: for many keys (ASCII, CJK, surrogate pairs, Integer.MIN_VALUE) the page's hash, slot, walk and
found offsets are the engine's (`java_string_hash`, `index_key_hash`, `chain_of`, `select_phy_offsets`)
on the real RocketMQ index file. Skipped where there is no `node`."""
import json, random, shutil, subprocess
from pathlib import Path
import pytest

from mqstore.index import IndexFile, build_key, index_key_hash
from mqstore.message import java_string_hash
from mqstore.vectors import rocketmq_vectors
from mqstore.viz.index import chain_of

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node") or shutil.which("nodejs")
RUN = """
global.window = {};
require(process.argv[1]);
const X = window.mqstoreExplorers;
X.b64bytes = s => new Uint8Array(Buffer.from(s, "base64"));
const inp = JSON.parse(require("fs").readFileSync(0, "utf8"));
const f = X.indexFile(inp.data);
console.log(JSON.stringify(inp.keys.map(k => {
  const w = f.walk(X.indexKeyHash(k));
  return [X.javaStringHash(k), X.indexKeyHash(k), w.slot, w.steps.map(e => e.n), w.offsets.map(Number)];
})));
"""


@pytest.mark.skipif(NODE is None, reason="no node")
def test_the_follower_walks_as_the_engine_does(tmp_path):
    f = IndexFile(rocketmq_vectors() / "index.bin", 64, 256, read_only=True)
    raw = (rocketmq_vectors() / "index.bin").read_bytes()
    import base64
    data = dict(b64=base64.b64encode(raw.rstrip(b"\0")).decode(), file_size=len(raw), slot_num=64,
                index_num=256, topic="TopicTest", key="seq-2")
    rng = random.Random(6)
    keys = [build_key("TopicTest", k) for k in ("seq-2", "tx-1", "nope", "missing", "k4096", "user-42")]
    keys += [build_key("主题测试", "键1"), "TopicTest#🚀key", "polygenelubricants"]
    keys += [build_key("TopicTest", "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x4E00, 0x9FFF),
                                                         0x1F680])) for _ in range(rng.randrange(1, 9))))
             for _ in range(300)]
    out = subprocess.run([NODE, "-e", RUN, str(ROOT / "book/_static/explorers/index_chain.js")],
                         input=json.dumps({"data": data, "keys": keys}), capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    for k, (jh, kh, slot, steps, offsets) in zip(keys, got):
        h = index_key_hash(k)
        assert (jh, kh, slot) == (java_string_hash(k), h, h % 64), k
        assert steps == chain_of(f, h) and offsets == f.select_phy_offsets(h, 0, 2**62), k
    assert sum(bool(o) for *_, o in got) >= 6          # keys of the file are found, not only misses
    f.close()
