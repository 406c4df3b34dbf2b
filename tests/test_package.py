"The package is generated from the chapters, and importing it is silent and light."
import filecmp, shutil, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_export_is_in_sync(tmp_path):
    "Exporting book/ afresh gives exactly the committed mqstore/ modules."
    shutil.copytree(ROOT / "book", tmp_path / "book")
    (tmp_path / "mqstore").mkdir()
    subprocess.run([sys.executable, str(ROOT / "tools" / "export.py"),
                    str(tmp_path / "book"), str(tmp_path / "mqstore")], check=True, cwd=tmp_path)
    fresh = sorted(p.relative_to(tmp_path / "mqstore") for p in (tmp_path / "mqstore").rglob("*.py"))
    committed = sorted(p.relative_to(ROOT / "mqstore") for p in (ROOT / "mqstore").rglob("*.py"))
    assert fresh == committed, "modules differ: run `make export`"
    differ = [str(p) for p in fresh
              if not filecmp.cmp(tmp_path / "mqstore" / p, ROOT / "mqstore" / p, shallow=False)]
    assert not differ, f"run `make export`: these modules differ from the chapters: {differ}"


def test_import_is_silent_and_light():
    code = ("import sys, mqstore; mqstore.MappedFile; "
            "print(sorted(m for m in ('matplotlib', 'pyspark', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n" and out.stderr == ""
    bare = subprocess.run([sys.executable, "-c", "import mqstore"], capture_output=True, text=True)
    assert bare.returncode == 0 and bare.stdout == "" and bare.stderr == ""


def test_every_public_name_resolves():
    import mqstore
    missing = [n for n in mqstore.__all__ if not hasattr(mqstore, n)]
    assert not missing
    from importlib.metadata import version
    assert mqstore.__version__ == version("mqstore")       # written by the export from pyproject.toml


def test_engine_modules_do_not_import_pictures():
    import re
    for py in (ROOT / "mqstore").glob("*.py"):
        text = py.read_text()
        assert not re.search(r"^\s*(import|from)\s+(matplotlib|\.viz|mqstore\.viz)", text, re.M), py.name
        if py.stem != "pipeline":  # the Spark chapter's module imports pyspark inside its functions
            assert not re.search(r"^\s*(import|from)\s+pyspark", text, re.M), py.name


def test_chapters_are_stored_executed():
    "nbval compares stored outputs: a chapter committed without them would be checked against nothing."
    import json
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        unexecuted = [i for i, c in enumerate(code) if c.get("execution_count") is None]
        assert not unexecuted, f"{nb.name}: code cells {unexecuted[:5]} have no stored outputs (make outputs)"
        pictures = sum(1 for c in code for o in c.get("outputs", [])
                       if "image/png" in o.get("data", {}) or "anim" in "".join(o.get("data", {}).get("text/html", "")))
        assert pictures >= 2, f"{nb.name}: {pictures} stored pictures, a chapter has at least two"
