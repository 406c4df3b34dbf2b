"""A clone of the repository alone builds the book and passes the tests.

Nothing may point outside the repository: the RocketMQ reference files ship in
book/data/rocketmq, and the book cites RocketMQ's sources, never a private
design document. The slow test copies the tracked files into an empty folder
and runs the chapters and tests that read the reference files there."""
import json, os, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
# spelled in pieces so that this file does not match itself
FORBIDDEN = re.compile("|".join([r"\.\./" + "shared", "shared" + "/vectors",
                                 *(name + r"\.md" for name in ("FORMATS", "DESIGN", "TOOLCHAIN"))]))
TOP_DOCS = ("README.md", "CONTRIBUTING.md", "Makefile", "_config.yml", "_toc.yml", "pyproject.toml",
            "requirements.txt", "pytest.ini")
CHAPTERS = ("03_record_format", "05_dispatch", "06_index", "13_real_stores")


def repo_files():
    "Tracked files, plus new ones not ignored (so a check before the commit sees them too)."
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=ROOT, check=True, capture_output=True).stdout.decode()
    return [p for p in out.split("\0") if p and (ROOT / p).is_file()]


def test_nothing_points_outside_the_repository():
    checked, bad = 0, []
    for rel in repo_files():
        if not (rel.split("/")[0] in ("book", "tests", "mqstore", "tools", ".ci") or rel in TOP_DOCS):
            continue
        data = (ROOT / rel).read_bytes()
        if b"\0" in data[:8192]:
            continue                                  # binary (the reference records)
        checked += 1
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if FORBIDDEN.search(line):
                bad.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert checked > 50
    assert not bad, "\n".join(bad)


def test_reference_files_are_in_the_repository():
    from mqstore.vectors import rocketmq_vectors
    folder = rocketmq_vectors()
    assert folder == ROOT / "book" / "data" / "rocketmq"
    tracked = {p for p in repo_files() if p.startswith("book/data/rocketmq/")}
    names = {f"book/data/rocketmq/{i:03d}.bin" for i in range(42)} | {
        f"book/data/rocketmq/{n}" for n in ("commitlog.bin", "messages.jsonl", "index.bin",
                                            "index_keys.jsonl", "README.md",
                                            "edge/commitlog_zero_padded.bin",
                                            "edge/commitlog_blank_eof.bin",
                                            "edge/truncated_last_record.bin",
                                            "edge/v1_topic_200_encode_result.txt")}
    assert names <= tracked, sorted(names - tracked)
    assert len((folder / "messages.jsonl").read_text().splitlines()) == 42


def test_missing_reference_files_are_named(tmp_path, monkeypatch):
    from mqstore.vectors import rocketmq_vectors
    monkeypatch.setenv("MQSTORE_VECTORS", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        rocketmq_vectors()


@pytest.mark.slow
@pytest.mark.once
def test_a_clone_alone_runs_the_chapters_and_tests(tmp_path):
    clone = tmp_path / "clone"
    for rel in repo_files():
        dest = clone / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((ROOT / rel).read_bytes())
    for up in clone.parents:
        assert not (up / "shared").exists(), f"{up}/shared would make this test meaningless"
    env = {k: v for k, v in os.environ.items() if k != "MQSTORE_VECTORS"}
    env["PYTHONPATH"] = str(clone)                    # import the copy's package, not the install's
    where = subprocess.run([sys.executable, "-c", "import mqstore.vectors as v; print(v.rocketmq_vectors())"],
                           cwd=clone, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where == str(clone / "book" / "data" / "rocketmq")

    # as `make book` and `make test` do (`make kernels`): the copy's kernels compile into its own cache
    # once, before a chapter waits for a dispatch that compiles them (minutes on a loaded machine)
    subprocess.run([sys.executable, "-c", "from mqstore import accel; accel.warm()"], cwd=clone, env=env,
                   check=True, capture_output=True, timeout=1800)
    jupyter = Path(sys.executable).with_name("jupyter")
    for name in CHAPTERS:
        nb = clone / "book" / f"{name}.ipynb"
        r = subprocess.run([str(jupyter), "execute", "--inplace", "--timeout=600", nb.name],
                           cwd=nb.parent, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"{name}:\n{r.stderr[-3000:]}"
        cells = json.loads(nb.read_text())["cells"]
        errors = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        assert not errors, f"{name}: {errors[0]['ename']}: {errors[0]['evalue']}"

    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                        "tests/test_message.py", "tests/test_index.py"],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    summary = r.stdout.strip().splitlines()[-1]
    assert r.returncode == 0, r.stdout[-3000:]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
