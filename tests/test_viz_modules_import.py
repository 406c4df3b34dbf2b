"""Every picture module of the package imports on its own (issue 28: chapter 10's `viz.accel` once
exported a cell's plotting call with its definitions, so importing it raised NameError)."""
import os, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VIZ = sorted(p.stem for p in (ROOT / "mqstore" / "viz").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", VIZ)
def test_viz_module_imports_in_a_fresh_process(module):
    out = subprocess.run([sys.executable, "-c", f"import mqstore.viz.{module}; print('ok')"],
                         env=dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT)), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
