"mqstore.pipeline: the Spark message table, rebuild (byte-identical to dispatch), audit, Parquet, bad input."
import dataclasses, itertools, json, os, random, shutil, socket, struct, subprocess, sys, time, urllib.request
from pathlib import Path

import pytest

from mqstore.commit_log import CommitLog
from mqstore.config import StoreConfig
from mqstore.consume_queue import ConsumeQueueStore
from mqstore.dispatch import dispatch_range
from mqstore.errors import (NotAStoreError, PipelineError, SegmentNameError, SegmentSizeError,
                            StoreFileError)
from mqstore.index import IndexService
from mqstore.message import (BLANK_MAGIC_CODE, Message, PHYSICAL_OFFSET_POSITION, TRANSACTION_COMMIT_TYPE,
                             TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
from mqstore import pipeline
from mqstore.pipeline import (MESSAGE_COLUMNS, audit, read_messages, rebuild, store_segments,
                              tree_digests)

CONFIG = StoreConfig.small()
START = 1_700_000_000_000
TOPICS = ["orders", "payments", "audit-log", "clicks"]
INDEX_NAMES = [START + k * 60_000 for k in range(1000)]
ROOT = Path(__file__).resolve().parent.parent


def fixed_clock(start=START, step=13):
    counter = itertools.count()
    return lambda: start + step * next(counter)


def write_store(root, n=1500, seed=3, unresolved=False):
    "4 topics x 5 queues, keys and unique keys, transactions (all resolved unless asked), 64 KiB segments."
    rng = random.Random(seed)
    log = CommitLog(root, CONFIG, clock=fixed_clock()).load()
    prepared_left = None
    for i in range(n):
        topic = TOPICS[i % 4]
        props = {"TAGS": rng.choice(["A", "B"]), "UNIQ_KEY": f"C0A80001{i:024X}"}
        if i % 2:
            props["KEYS"] = f"key{i % 31} order-{i}"
        msg = Message(topic, rng.randbytes(rng.randint(20, 400)), queue_id=(i // 4) % 5, properties=props,
                      born_timestamp=START + i)
        if i % 40 == 11:
            msg.sys_flag = TRANSACTION_PREPARED_TYPE
            prep = log.put(msg)
            if unresolved and prepared_left is None:
                prepared_left = prep.commit_log_offset
                continue
            msg.sys_flag = TRANSACTION_ROLLBACK_TYPE if i % 80 == 11 else TRANSACTION_COMMIT_TYPE
            msg.prepared_transaction_offset = prep.commit_log_offset
        log.put(msg)
    log.shutdown()
    return prepared_left


def dispatched(root, out):
    "The reference: the commit log dispatched record by record, as a running store does."
    names = iter(INDEX_NAMES)
    log = CommitLog(root, CONFIG).load()
    cq = ConsumeQueueStore(out, CONFIG.consume_queue_units)
    idx = IndexService(Path(out) / "index", CONFIG.index_slots, CONFIG.index_entries, clock=lambda: next(names))
    dispatch_range(log, 0, [cq, idx])
    cq.flush(); idx.flush(); cq.close(); idx.close(); log.shutdown()
    return tree_digests(out)


def names_clock():
    names = iter(INDEX_NAMES)
    return lambda: next(names)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store") / "store"
    write_store(root)
    return root


@pytest.fixture(scope="module")
def reference(store, tmp_path_factory):
    return dispatched(store, tmp_path_factory.mktemp("dispatched"))


@pytest.fixture(scope="module")
def spark():
    session = pipeline.spark_session("local[2]", app_name="mqstore-tests")
    yield session
    session.stop()


def locate(root, offset):
    "(segment path, position) of a commit-log offset."
    seg = max((s for s in store_segments(root) if s.offset <= offset), key=lambda s: s.offset)
    return Path(seg.path), offset - seg.offset


def patch(root, offset, data, xor=False):
    path, pos = locate(root, offset)
    with open(path, "r+b") as f:
        f.seek(pos)
        old = f.read(len(data))
        f.seek(pos)
        f.write(bytes(a ^ b for a, b in zip(old, data)) if xor else data)


# ---------------------------------------------------------------- the store the tests share

def test_store_has_the_required_shape(store, reference):
    segs = store_segments(store)
    assert len(segs) >= 3
    log = CommitLog(store, CONFIG).load()
    msgs = [m for _, m in log.messages(read_body=False)]
    log.shutdown()
    assert len({(m.topic, m.queue_id) for m in msgs}) == 20
    assert any(m.keys for m in msgs) and all(m.uniq_key for m in msgs)
    assert {m.sys_flag & 12 for m in msgs} == {0, 4, 8, 12}
    for s in segs[:-1]:                                # every full segment closed by a blank
        data = Path(s.path).read_bytes()
        ends = [m.commit_log_offset + m.total_size - s.offset for m in msgs
                if s.offset <= m.commit_log_offset < s.offset + s.size]
        assert struct.unpack_from(">ii", data, max(ends))[1] == BLANK_MAGIC_CODE
    assert sum(p.startswith("index/") for p in reference) >= 3     # the index rolls over
    assert sum(p.startswith("consumequeue/") for p in reference) > 20


# ---------------------------------------------------------------- single process (no Spark)

def test_local_rebuild_equals_dispatch(store, reference, tmp_path):
    out = rebuild(store, tmp_path / "out", engine="local", config=CONFIG, clock=names_clock())
    assert tree_digests(tmp_path / "out") == reference
    assert out["segments"] == len(store_segments(store)) and len(out["queues"]) == 20
    json.dumps(out)                                     # plain data


def test_rebuild_without_clock_is_deterministic(store, tmp_path):
    rebuild(store, tmp_path / "a", engine="local", config=CONFIG)
    rebuild(store, tmp_path / "b", engine="local", config=CONFIG)
    a, b = tree_digests(tmp_path / "a"), tree_digests(tmp_path / "b")
    assert a == b and any(p.startswith("index/") for p in a)


def test_rebuild_refuses_a_folder_with_files(store, tmp_path):
    rebuild(store, tmp_path / "out", engine="local", config=CONFIG)
    with pytest.raises(PipelineError, match="already holds files"):
        rebuild(store, tmp_path / "out", engine="local", config=CONFIG)


def test_a_refused_rebuild_leaves_out_as_it_found_it(store, tmp_path):
    "Issue 28: the index refuses a lying PHYSICALOFFSET after the queues were written; they are removed."
    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged)
    s = store_segments(damaged)[1]
    offsets = pipeline.decode_segment(s.path, s.offset, columns=["offset"]).column("offset").to_pylist()
    patch(damaged, offsets[len(offsets) // 2] + PHYSICAL_OFFSET_POSITION, struct.pack(">q", 12345))
    out = tmp_path / "absent"
    with pytest.raises(PipelineError, match="PHYSICALOFFSET"):
        rebuild(damaged, out, engine="local", config=CONFIG)
    assert not out.exists()
    kept = tmp_path / "kept"                            # a folder with other files and empty output folders
    (kept / "consumequeue").mkdir(parents=True)
    (kept / "index").mkdir()
    (kept / "notes.txt").write_text("mine")
    with pytest.raises(PipelineError, match="PHYSICALOFFSET"):
        rebuild(damaged, kept, engine="local", config=CONFIG)
    assert sorted(p.relative_to(kept).as_posix() for p in kept.rglob("*")) == ["consumequeue", "index", "notes.txt"]
    rebuild(store, kept, engine="local", config=CONFIG)     # and the folder can be used again


def test_local_audit_needs_neither_spark_nor_arrow(store):
    code = ("import json, sys\n"
            "sys.modules['pyarrow'] = sys.modules['pyspark'] = sys.modules['pandas'] = None\n"
            "from mqstore.auditing import audit_local\n"
            f"r = audit_local({str(store)!r})\n"
            "print(json.dumps([r['ok'], r['messages']]))\n"
            "assert not any(sys.modules.get(m) for m in ('pyarrow', 'pyspark', 'pandas'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [True, audit(store, engine="local")["messages"]]


def test_decode_segment_matches_the_engine(store):
    log = CommitLog(store, CONFIG).load()
    msgs = {off: m for off, m in log.messages(read_body=True)}
    log.shutdown()
    rows = []
    for s in store_segments(store):
        rows += pipeline.decode_segment(s.path, s.offset, MESSAGE_COLUMNS + ("body",), check_crc=True).to_pylist()
    assert [r["offset"] for r in rows] == sorted(msgs)
    for r in rows:
        m = msgs[r["offset"]]
        for f in ("total_size", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag",
                  "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset",
                  "topic", "tags", "tags_code", "uniq_key", "body"):
            assert r[f] == getattr(m, f), f
        assert r["keys"] == m.properties.get("KEYS") and dict(r["properties"]) == m.properties
        assert r["born_host"] == "%s:%d" % m.born_host and r["store_host"] == "%s:%d" % m.store_host
        assert r["crc_ok"] and r["body_len"] == len(m.body)


def test_local_audit_of_a_clean_store(store):
    report = audit(store, engine="local")
    assert report["ok"] and not any(report["findings"].values())
    assert len(report["queues"]) == 20 and report["messages"] == sum(q["messages"] for q in report["queues"])
    json.dumps(report)


# ---------------------------------------------------------------- bad input: specific errors, before any job

def bad_stores(store, tmp_path):
    "(description, path, error class, text the message must hold)"
    cases = [("missing", tmp_path / "nothing-here", NotAStoreError, "nothing-here"),
             ("a file", store / "commitlog" / "00000000000000000000", NotAStoreError, "a file")]
    (tmp_path / "empty").mkdir()
    cases.append(("no commitlog", tmp_path / "empty", NotAStoreError, "no commitlog"))
    wrong = tmp_path / "wrong"
    shutil.copytree(store, wrong)
    victim = wrong / "commitlog" / "00000000000000065536"
    os.truncate(victim, 4096)
    cases.append(("wrong size", wrong, SegmentSizeError, str(victim)))
    unreadable = tmp_path / "unreadable"
    shutil.copytree(store, unreadable)
    seg = unreadable / "commitlog" / "00000000000000131072"
    if os.geteuid() == 0:                 # root reads any mode: a dangling link cannot be read by anyone
        seg.unlink()
        seg.symlink_to(tmp_path / "gone")
    else:
        seg.chmod(0)
    cases.append(("unreadable", unreadable, StoreFileError, str(seg)))
    named = tmp_path / "misnamed"
    shutil.copytree(store, named)
    (named / "commitlog" / "notes.txt").write_text("hi")
    cases.append(("misnamed", named, SegmentNameError, "notes.txt"))
    return cases


def test_bad_input_local(store, tmp_path):
    for what, path, err, text in bad_stores(store, tmp_path):
        for call in (lambda: rebuild(path, tmp_path / ("out-" + what), engine="local"),
                     lambda: audit(path, engine="local")):
            with pytest.raises(err) as e:
                call()
            assert text in str(e.value), what


def test_remote_uris_are_refused(tmp_path):
    with pytest.raises(PipelineError, match="only local paths"):
        store_segments("hdfs://namenode/store")
    with pytest.raises(PipelineError, match="engine"):
        audit(tmp_path, engine="dask")


def test_no_other_module_imports_pyspark():
    mods = [p.stem for p in (ROOT / "mqstore").glob("*.py") if p.stem not in ("__init__", "cli")]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module('mqstore.' + m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


# ---------------------------------------------------------------- Spark, local mode

@pytest.mark.spark
def test_session_is_quiet_and_uses_this_python(spark):
    assert spark.sparkContext.master == "local[2]"
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert spark.sparkContext.getConf().get("spark.ui.showConsoleProgress") == "false"
    assert pipeline.spark_session() is spark or pipeline.spark_session().sparkContext is spark.sparkContext
    out = subprocess.run(
        [sys.executable, "-c", "from mqstore.pipeline import spark_session; s = spark_session('local[1]'); "
                               "print(s.range(3).count()); s.stop()"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout == "3\n" and out.stderr == "", out.stderr[-2000:]


@pytest.mark.spark
def test_read_messages_one_task_per_segment(spark, store):
    df = read_messages(spark, store, with_body=True)
    assert df.columns == list(MESSAGE_COLUMNS) + ["body"]
    assert df.rdd.getNumPartitions() == len(store_segments(store))
    local = []
    for s in store_segments(store):
        local += pipeline.decode_segment(s.path, s.offset, MESSAGE_COLUMNS + ("body",), check_crc=True).to_pylist()
    got = [r.asDict() for r in df.orderBy("offset").collect()]
    for r in got:
        r["properties"] = sorted(r["properties"].items())
    for r in local:
        r["properties"] = sorted(r["properties"])
    assert got == local


@pytest.mark.spark
def test_spark_rebuild_equals_dispatch(spark, store, reference, tmp_path):
    out = rebuild(store, tmp_path / "out", spark=spark, config=CONFIG, clock=names_clock())
    assert tree_digests(tmp_path / "out") == reference
    local = rebuild(store, tmp_path / "local", engine="local", config=CONFIG, clock=names_clock())
    assert {k: v for k, v in out.items() if k not in ("engine", "out")} == \
        {k: v for k, v in local.items() if k not in ("engine", "out")}


@pytest.mark.spark
def test_spark_rebuild_without_clock_equals_local(spark, store, tmp_path):
    rebuild(store, tmp_path / "spark", spark=spark, config=CONFIG)
    rebuild(store, tmp_path / "local", engine="local", config=CONFIG)
    assert tree_digests(tmp_path / "spark") == tree_digests(tmp_path / "local")


@pytest.mark.spark
def test_both_spark_roads_equal_dispatch(spark, store, reference, tmp_path):
    "Parts as Arrow rows (any master) and through a scratch folder (local masters): the same tree."
    segments = pipeline.store_segments(store, CONFIG)
    results = []
    for road in (pipeline._rebuild_spark_rows, pipeline._rebuild_spark_folder):
        out = tmp_path / road.__name__
        out.mkdir()
        results.append(road(spark, segments, out, CONFIG, names_clock()))
        assert tree_digests(out) == reference
        assert sorted(p.name for p in out.iterdir()) == ["consumequeue", "index"]    # no scratch left
    assert results[0] == results[1]


@pytest.mark.spark
def test_spark_rebuild_without_index_equals_local(spark, store, tmp_path):
    config = dataclasses.replace(CONFIG, message_index_enable=False)
    a = rebuild(store, tmp_path / "spark", spark=spark, config=config)
    b = rebuild(store, tmp_path / "local", engine="local", config=config)
    assert a["index_entries"] == b["index_entries"] == 0 and a["queues"] == b["queues"]
    assert tree_digests(tmp_path / "spark") == tree_digests(tmp_path / "local")


@pytest.mark.spark
def test_audit_finds_exactly_the_injected_faults(spark, store, tmp_path):
    clean = audit(store, spark=spark)
    assert clean["ok"] and clean == {**audit(store, engine="local"), "engine": "spark"}
    damaged = tmp_path / "damaged"
    shutil.copytree(store, damaged)
    rows = read_messages(spark, damaged, columns=["offset", "topic", "queue_id", "queue_offset"]) \
        .orderBy("offset").collect()
    flipped, liar = rows[37], rows[402]
    patch(damaged, flipped.offset + 88 + 3, b"\x01", xor=True)                  # one body bit
    patch(damaged, liar.offset + PHYSICAL_OFFSET_POSITION, struct.pack(">q", 12345))
    report = audit(damaged, spark=spark)
    f = report["findings"]
    assert f["crc_failures"] == [{"offset": flipped.offset, "topic": flipped.topic, "queue_id": flipped.queue_id,
                                  "queue_offset": flipped.queue_offset}]
    assert f["offset_mismatches"] == [{"offset": liar.offset, "stored": 12345, "topic": liar.topic,
                                       "queue_id": liar.queue_id}]
    assert all(not f[k] for k in f if k not in ("crc_failures", "offset_mismatches"))
    assert not report["ok"] and report["topics"] == clean["topics"]
    assert report == {**audit(damaged, engine="local"), "engine": "spark"}
    with pytest.raises(PipelineError, match="PHYSICALOFFSET"):
        rebuild(damaged, tmp_path / "out", spark=spark, config=CONFIG)
    assert not (tmp_path / "out").exists()                 # the refused rebuild removed what it wrote


@pytest.mark.spark
def test_audit_finds_unresolved_transactions_gaps_and_torn_tails(spark, tmp_path):
    root = tmp_path / "store"
    left = write_store(root, n=300, unresolved=True)
    rows = read_messages(spark, root, columns=["offset", "segment", "total_size", "sys_flag", "topic",
                                               "queue_id", "queue_offset"]).orderBy("offset").collect()
    last = [r for r in rows if (r.topic, r.queue_id) == ("clicks", 2) and r.sys_flag & 12 in (0, 8)][-1]
    patch(root, last.offset + 20, struct.pack(">q", last.queue_offset + 2))
    end = rows[-1].offset + rows[-1].total_size                        # a torn record after the last one
    patch(root, end, struct.pack(">ii", 500, -626843481))
    report = audit(root, spark=spark)
    f = report["findings"]
    assert [u["offset"] for u in f["unresolved_prepared"]] == [left]
    assert f["queue_gaps"] == [{"topic": "clicks", "queue_id": 2, "expected": last.queue_offset,
                                "found": last.queue_offset + 2, "offset": last.offset}]
    assert [(s["offset"], s["status"]) for s in f["segment_faults"]] == [(end, "TORN")]
    assert not f["crc_failures"] and not f["offset_mismatches"] and not f["orphan_resolutions"]
    assert report == {**audit(root, engine="local"), "engine": "spark"}


@pytest.mark.spark
def test_parquet_export_for_spark_sql(spark, store, tmp_path):
    out = pipeline.export_parquet(store, tmp_path / "m.parquet", spark=spark)
    report = audit(store, engine="local")
    assert out["rows"] == report["messages"]
    spark.read.parquet(out["path"]).createOrReplaceTempView("m")
    got = {r.topic: r.n for r in spark.sql("SELECT topic, count(*) AS n FROM m GROUP BY topic").collect()}
    assert got == {t["topic"]: t["messages"] for t in report["topics"]}


@pytest.mark.spark
def test_bad_input_spark_fails_before_any_job(spark, store, tmp_path):
    sc = spark.sparkContext
    sc.setJobGroup("bad-input", "bad input must not start jobs")
    try:
        for what, path, err, text in bad_stores(store, tmp_path):
            for call in (lambda: read_messages(spark, path),
                         lambda: rebuild(path, tmp_path / ("out-" + what), spark=spark),
                         lambda: audit(path, spark=spark),
                         lambda: pipeline.export_parquet(path, tmp_path / "p", spark=spark)):
                with pytest.raises(err) as e:
                    call()
                assert text in str(e.value), what
        assert list(sc.statusTracker().getJobIdsForGroup("bad-input")) == []
    finally:
        sc.setJobGroup("tests", "")


@pytest.mark.spark
def test_worker_failures_become_pipeline_errors(spark, store, tmp_path):
    gone = tmp_path / "gone"
    shutil.copytree(store, gone)
    df = read_messages(spark, gone)                     # validated, then a segment vanishes
    (gone / "commitlog" / "00000000000000065536").unlink()
    with pytest.raises(PipelineError, match="FileNotFoundError"):
        pipeline._spark_job("reading", df.count)


# ---------------------------------------------------------------- Spark, standalone cluster

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_worker(ui_port, deadline):
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
                if json.load(r).get("aliveworkers", 0) >= 1:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


@pytest.mark.spark
def test_rebuild_on_a_standalone_cluster(store, reference, tmp_path):
    home = pipeline.spark_home()
    spark_class = home / "bin" / "spark-class"
    if not spark_class.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{spark_class} missing")
        pytest.skip(f"{spark_class} missing")
    port, ui, wui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_WORKER_DIR": str(tmp_path / "work"),
           "SPARK_LOG_DIR": str(tmp_path / "logs")}
    logs = open(tmp_path / "cluster.log", "wb")
    procs = []
    try:
        procs.append(subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master",
                                       "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                                      env=env, stdout=logs, stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker",
                                       f"spark://127.0.0.1:{port}", "--cores", "1", "--memory", "1g",
                                       "--host", "127.0.0.1", "--webui-port", str(wui)],
                                      env=env, stdout=logs, stderr=subprocess.STDOUT))
        assert wait_for_worker(ui, time.monotonic() + 90), (tmp_path / "cluster.log").read_text()[-3000:]
        out = tmp_path / "out"
        code = ("import itertools, json, sys\n"
                "from mqstore.config import StoreConfig\n"
                "from mqstore.pipeline import rebuild, audit, spark_session\n"
                f"names = iter({INDEX_NAMES[:100]!r})\n"
                "import os\n"
                "spark_session('local[1]').range(1).count()\n"      # a local session first, in the same JVM
                f"s = spark_session('spark://127.0.0.1:{port}', app_name='mqstore-cluster-test',\n"
                "                  conf={'spark.executor.memory': '768m'})\n"
                "assert s.sparkContext.master.startswith('spark://')\n"
                "assert 'SPARK_LOCAL_IP' not in os.environ\n"     # the driver is not pinned to loopback
                "assert s.sparkContext.getConf().get('spark.driver.bindAddress', None) is None\n"
                f"r = rebuild({str(store)!r}, {str(out)!r}, spark=s, config=StoreConfig.small(), clock=lambda: next(names))\n"
                f"a = audit({str(store)!r}, spark=s)\n"
                "print(json.dumps({'messages': r['messages'], 'ok': a['ok']}))\n"
                "s.stop()\n")
        driver_env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                             env={**driver_env, "MQSTORE_SPARK_LOG_DIR": str(tmp_path / "driver")})
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stderr == ""
        result = json.loads(run.stdout)
        assert result["ok"] and result["messages"] > 0
        assert tree_digests(out) == reference
        apps = list((tmp_path / "work").glob("app-*"))
        assert apps, "the job did not run on the standalone worker"
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        logs.close()


def test_session_settings_pin_only_a_local_driver_to_loopback(monkeypatch, tmp_path):
    "Issue 25 item 9: a cluster's executors must reach the driver; nothing sizes them behind the user's back."
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    for master in ("local", "local[*]", "local[2]"):
        local = pipeline.session_conf(master)
        assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    for master in ("spark://10.1.2.3:7077", "yarn", "k8s://https://10.1.2.3:6443"):
        cluster = pipeline.session_conf(master)
        assert not {"spark.driver.host", "spark.driver.bindAddress", "spark.executor.memory"} & set(cluster)
    asked = pipeline.session_conf("spark://h:7077", conf={"spark.executor.memory": "2g"})
    assert asked["spark.executor.memory"] == "2g"
    pipeline._prepare_environment(tmp_path)
    assert "SPARK_LOCAL_IP" not in os.environ


def test_a_segment_name_of_non_ascii_digits_is_a_segment_name_error(tmp_path):
    "'²' is a digit to str.isdigit, not to int(): the pipeline names the file instead of failing in int()."
    from mqstore.auditing import store_segments
    from mqstore.errors import SegmentNameError
    (tmp_path / "commitlog").mkdir()
    odd = tmp_path / "commitlog" / ("0" * 19 + "\u00b2")
    odd.write_bytes(bytes(4096))
    with pytest.raises(SegmentNameError, match="not a segment"):
        store_segments(tmp_path)
