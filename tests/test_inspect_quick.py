"""`mqstore inspect` reads file names, sizes, headers and tails (chapter 13, "A quick look at a large
store"): its figures equal those of the read-only open on every store it is sure about, it falls back
to that open (and says "walked") where it is not, it imports neither numba nor numpy, and it says that
it did not read every record."""
import itertools, json, shutil, subprocess, sys
from pathlib import Path

import pytest

from mqstore.cli import NotSure, describe_quickly, describe_store, infer_config, open_store, tree_hashes
from mqstore.config import StoreConfig
from mqstore.message import Message, TRANSACTION_PREPARED_TYPE
from mqstore.realstore import assemble_vector_store
from mqstore.store import MessageStore

KEYS = ("root", "clean_shutdown", "held_by", "commitlog", "queues", "index", "checkpoint", "lock_file")


def full_figures(root):
    with open_store(root, config=infer_config(root)) as store:
        return describe_store(store)


def agree(root) -> dict:
    "The quick figures of `root`, checked against the read-only open's."
    quick, full = describe_quickly(root, infer_config(root)), full_figures(root)
    assert {k: quick[k] for k in KEYS} == {k: full[k] for k in KEYS}
    return quick


def write(root, n=60, prepared=0, segment=8192):
    c = itertools.count()
    with MessageStore.open(root, StoreConfig.small(commit_log_file_size=segment),
                           clock=lambda: 1_700_000_000_000 + 10 * next(c)) as store:
        for i in range(n):
            store.put(Message(f"T{i % 3}", f"body-{i}".encode() * 10, queue_id=i % 2,
                              properties={"KEYS": f"k{i}", "TAGS": "even" if i % 2 == 0 else "odd"}))
        for i in range(prepared):            # records no consume queue holds, after the last one that is held
            store.put(Message("T0", b"half", sys_flag=TRANSACTION_PREPARED_TYPE,
                              properties={"TRAN_MSG": "true", "PGROUP": "g"}))
        store.wait_dispatched()
    return root


def test_clean_stores_of_several_segments(tmp_path):
    for n in (1, 20, 60, 200):
        q = agree(write(tmp_path / f"s{n}", n))
        assert q["records_read"]["how"] == "tails" and q["records_read"]["records"] >= 1


def test_records_no_queue_holds_are_walked(tmp_path):
    q = agree(write(tmp_path / "tx", 30, prepared=5))
    assert q["records_read"]["records"] == 6           # the last held record, then the five prepared ones


def test_rocketmqs_own_store(vectors, tmp_path):
    agree(assemble_vector_store(vectors, tmp_path / "real"))


def test_rocketmq5_roots(vectors5, tmp_path):
    sure = 0
    for src in sorted(p for p in vectors5.iterdir() if p.is_dir()):
        root = shutil.copytree(src, tmp_path / src.name)
        try:
            agree(root)
            sure += 1
        except NotSure:                     # batch consume queues, a record not where its unit says...
            pass
    assert sure >= 4, sure


def test_a_crashed_store_is_walked(tmp_path):
    root = write(tmp_path / "crashed", 40)
    (root / "abort").touch()
    with pytest.raises(NotSure):
        describe_quickly(root, infer_config(root))
    r = subprocess.run([sys.executable, "-m", "mqstore", "inspect", str(root), "--json"], capture_output=True, text=True)
    d = json.loads(r.stdout)
    assert d["records_read"]["how"] == "walked" and d["commitlog"] == full_figures(root)["commitlog"]


def test_inspect_loads_no_compiled_kernel_and_says_what_it_did_not_read(tmp_path):
    root = write(tmp_path / "s", 60)
    before = tree_hashes(root)
    script = ("import sys, io, contextlib; from mqstore.cli import main; out = io.StringIO()\n"
              "with contextlib.redirect_stdout(out): assert main(['inspect', sys.argv[1]]) == 0\n"
              "print(sorted(m for m in ('numba', 'numpy', 'mqstore.fast', 'mqstore.store') if m in sys.modules))\n"
              "print(out.getvalue())")
    r = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, check=True)
    assert r.stdout.splitlines()[0] == "[]", r.stdout
    assert "records: not all read" in r.stdout and "`mqstore verify` reads and checks every record up to the first bad one" in r.stdout
    assert "not looked for in the records" in r.stdout and "compressed records" in r.stdout
    assert tree_hashes(root) == before


def test_the_layouts_inspect_spells_again_are_the_engines():
    "Chapter 13 repeats the unit, filler and index-header layouts to stay clear of numpy: they must not drift."
    from mqstore import cli, consume_queue, index
    assert cli.UNIT.format == consume_queue._UNIT.format and cli.UNIT.size == consume_queue.CQ_STORE_UNIT_SIZE
    assert cli.FILLER_SIZE == consume_queue.FILLER_SIZE
    assert cli.INDEX_HEADER.format == index._HEADER.format and cli.INDEX_HEADER.size == index.INDEX_HEADER_SIZE
