"""Start-up (issue 30): what `import mqstore.store`, `MessageStore.open` of an empty store and loading the
compiled kernels import. Each check runs in a fresh interpreter (a subprocess), since this test process
has imported everything already. numpy costs 0.1-0.2 s of a process's start here, numba 0.5 s and the
coverage package (which numba's import would pull in) 0.1-0.2 s: none of them is needed to open an
empty store, and coverage is never needed by the kernels when it is not already running."""
import json, os, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "numba", "llvmlite", "coverage", "matplotlib", "pyspark", "pandas", "rich",
         "zstandard", "lz4", "isal", "mqstore.fast.kernels")


def fresh(code: str, *args: str) -> dict:
    "Run `code` in a new interpreter importing this worktree's mqstore (no coverage hook); its JSON output."
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


LOADED = "import json, sys\ndef loaded(): return sorted(m for m in sys.modules if m in %r)\n" % (HEAVY,)


def test_import_store_loads_nothing_heavy():
    got = fresh(LOADED + "import mqstore.store\nprint(json.dumps(loaded()))")
    assert got == [], got


@pytest.mark.parametrize("accel", ["1", "0"])
def test_open_empty_store_loads_nothing_heavy(tmp_path, accel):
    code = (LOADED + "import os\nos.environ['MQSTORE_ACCEL'] = %r\n" % accel +
            "from mqstore.store import MessageStore\n"
            "s = MessageStore.open(sys.argv[1]); s.close()\n"
            "print(json.dumps(loaded()))")
    got = fresh(code, str(tmp_path / "store"))
    assert got == [], got
    assert (tmp_path / "store" / "checkpoint").is_file()


def test_kernels_do_not_import_coverage():
    "numba's import would import coverage; the kernels' module hides a coverage that is not running."
    got = fresh(LOADED + "import mqstore.fast.kernels\nprint(json.dumps(loaded()))")
    assert "numba" in got and "coverage" not in got, got
    again = fresh("import json, sys, coverage\nimport mqstore.fast.kernels\n"
                  "import numba.misc.coverage_support as c\nprint(json.dumps(c.coverage_available))")
    assert again is True                  # a coverage imported before: numba reports to it as before


def test_open_empty_store_same_files(tmp_path):
    "The store an open of an empty folder leaves is the same whatever the process imported before it."
    code = ("import json, sys\nfrom pathlib import Path\nfrom mqstore.store import MessageStore\n"
            "%s\ns = MessageStore.open(sys.argv[1]); s.close()\n"
            "root = Path(sys.argv[1])\n"
            "print(json.dumps(sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1)"
            " for p in root.rglob('*') if p.name != 'checkpoint')))")
    lean = fresh(code % "", str(tmp_path / "a"))
    heavy = fresh(code % "import numpy, mqstore.fast.dispatch, mqstore.modern, mqstore.auditing", str(tmp_path / "b"))
    assert lean == heavy and lean
