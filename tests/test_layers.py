"""The reference engine (chapters 1-9) stands on its own; chapter 10's fast paths are reached only
through `mqstore.accel`, and each of them is compared with the reference it replaces.

- No module exported by chapters 1-9 imports `mqstore.fast`, numba or llvmlite, at any level
  (top of the module or inside a function).
- With MQSTORE_ACCEL=0, a store that puts, dispatches, indexes, crashes and recovers calls no fast
  version and loads no compiled kernel.
- Every entry of the fast modules' `REPLACES` names an `@accelerated` reference function, its fast
  version lives in `mqstore.fast`, and some tests/test_fast_*.py file names it (the comparison on
  random and damaged input)."""
import ast, importlib, os, re, subprocess, sys, textwrap
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mqstore"
SOURCE = re.compile(r"File to edit: (?:\.\./)+book/(\d\d)\w*\.ipynb")


def reference_modules():
    "{module path: chapter} for the modules that chapters 1-9 export (pictures excluded)."
    found = {}
    for py in sorted(PKG.glob("*.py")):
        m = SOURCE.search(py.read_text().split("\n", 3)[0] + py.read_text()[:400])
        if m and int(m.group(1)) <= 9:
            found[py] = int(m.group(1))
    return found


def imported_names(tree):
    "Every module an import statement names, anywhere in the module (`from . import fast` gives `.fast`)."
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            yield base
            sep = "" if base.endswith(".") else "."
            yield from (base + sep + a.name for a in node.names)


def test_there_are_reference_modules():
    mods = {p.stem for p in reference_modules()}
    assert {"message", "commit_log", "dispatch", "consume_queue", "index", "recovery", "store"} <= mods, mods


@pytest.mark.parametrize("path", sorted(reference_modules()), ids=lambda p: p.stem)
def test_a_reference_module_imports_no_fast_code(path):
    names = set(imported_names(ast.parse(path.read_text())))
    bad = sorted(n for n in names if re.match(r"^(\.fast\b|mqstore\.fast\b|numba\b|llvmlite\b|\.\.fast\b)", n))
    assert not bad, f"{path.name} imports {bad}: reference code reaches the fast paths only through mqstore.accel"


def test_the_reference_engine_runs_without_the_fast_paths(tmp_path):
    """With MQSTORE_ACCEL=0 a store that puts, dispatches, indexes, crashes and recovers calls no fast
    version and loads no compiled kernel (numba, llvmlite, mqstore.fast.kernels); importing the reference
    modules imports no module of mqstore.fast. (Chapter 14's recognition of a store root, which every
    open runs, scans segments with chapter 10.1's numpy column scan: a tool, not a replacement.)"""
    script = textwrap.dedent(f"""
        import sys
        import mqstore.message, mqstore.commit_log, mqstore.dispatch, mqstore.consume_queue, mqstore.index
        import mqstore.recovery, mqstore.store, mqstore.verify, mqstore.crash, mqstore.transaction
        early = sorted(m for m in sys.modules if m.startswith("mqstore.fast"))
        assert not early, early
        called = []                                # from here on, importing the fast modules is allowed
        import mqstore.fast.records, mqstore.fast.put, mqstore.fast.dispatch, mqstore.fast.recovery
        for mod in (mqstore.fast.records, mqstore.fast.put, mqstore.fast.dispatch, mqstore.fast.recovery):
            for key, fn in list(mod.REPLACES.items()):
                def spy(*a, _key=key, _fn=fn, **k):
                    called.append(_key)
                    return _fn(*a, **k)
                mod.REPLACES[key] = spy
        from mqstore.config import StoreConfig
        from mqstore.message import Message
        from mqstore.store import MessageStore
        cfg = StoreConfig(commit_log_file_size=64 * 1024, consume_queue_units=100,
                          index_slots=64, index_entries=256)
        store = MessageStore.open({str(tmp_path)!r}, cfg)
        for i in range(300):
            store.put(Message(topic="T%d" % (i % 3), body=b"x" * (i % 50), queue_id=i % 2,
                              properties={{"KEYS": "k%d" % i, "TAGS": "a"}}))
        store.put_batch([Message(topic="B", body=b"y", properties={{"KEYS": "b%d" % i}}) for i in range(20)])
        store.wait_dispatched()
        store.halt()
        store = MessageStore.open({str(tmp_path)!r}, cfg)
        assert store.query("T1", "k4") and store.query("B", "b7")
        store.close()
        kernels = sorted(m for m in sys.modules if m.startswith(("numba", "llvmlite", "mqstore.fast.kernels")))
        assert not kernels, kernels
        assert not called, sorted(set(called))
        print("ok")
    """)
    env = dict(os.environ, MQSTORE_ACCEL="0", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_every_fast_path_replaces_an_accelerated_reference_and_is_compared():
    from mqstore import accel
    table = accel.replacements()
    assert table, "no fast paths found (is numba installed?)"
    tests = "".join(p.read_text() for p in sorted((ROOT / "tests").glob("test_fast_*.py")))
    for name, fast in table.items():
        module, _, rest = name.partition(".")[2].partition(".")
        mod = importlib.import_module(f"mqstore.{module}")
        ref = mod
        for part in rest.split("."):
            ref = getattr(ref, part)
        assert hasattr(ref, "reference"), f"{name} is not @accelerated"
        assert accel.FAST_MODULES[f"mqstore.{module}"] == fast.__module__, (name, fast.__module__)
        assert fast.__module__.startswith("mqstore.fast."), (name, fast.__module__)
        assert f'"{name}"' in tests or f"'{name}'" in tests, f"no tests/test_fast_*.py compares {name}"


def test_every_accelerated_reference_has_a_fast_version():
    "A decorator with nothing behind it would claim a fast path that does not exist."
    from mqstore import accel
    table = accel.replacements()
    for path in reference_modules():
        mod = importlib.import_module(f"mqstore.{path.stem}")
        for name, obj in vars(mod).items():
            for qual, fn in [(name, obj)] + [(f"{name}.{k}", v) for k, v in vars(obj).items()] if isinstance(obj, type) else [(name, obj)]:
                if callable(fn) and hasattr(fn, "reference") and getattr(fn, "__module__", "") == mod.__name__:
                    assert f"{mod.__name__}.{qual}" in table, f"{mod.__name__}.{qual} is @accelerated but nothing replaces it"
