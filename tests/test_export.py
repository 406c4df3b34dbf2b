"""The export step that lets classes grow across cells: every `@add_to_class(C)` function of a
chapter lands in the body of class C in the generated module, with no decorator left."""
import importlib.util, subprocess, sys
from pathlib import Path
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from export import fold_methods, ExportError          # noqa: E402


def _chapter(tmp_path, cells, name="01_toy"):
    book = tmp_path / "book"
    book.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in cells]
    nbformat.write(nb, book / f"{name}.ipynb")
    return book


def _export(tmp_path, book):
    lib = tmp_path / "mqstore"
    lib.mkdir(exist_ok=True)
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "export.py"), str(book), str(lib)],
                       cwd=tmp_path, capture_output=True, text=True)
    return r, lib


def _load(path):
    spec = importlib.util.spec_from_file_location("toy_module", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CELLS = [
    "#| default_exp toy",
    "#| export\nfrom mqstore.book import add_to_class\nfrom dataclasses import dataclass\n\n"
    "class Counter:\n    \"Counts.\"\n    def __init__(self, start=0):\n        self.n = start\n",
    "#| export\n@add_to_class(Counter)\ndef bump(self, by: int = 1) -> int:\n"
    "    \"\"\"Add `by`.\n\nA docstring line at column 0 stays as it was.\"\"\"\n"
    "    self.n += by\n    return self.n",
    "c = Counter(); c.bump()",
    "#| export\nLIMIT = 3\n\n@add_to_class(Counter)\n@property\ndef full(self) -> bool:\n"
    "    return self.n >= LIMIT\n\n@add_to_class(Counter)\n@classmethod\ndef at(cls, n):\n    return cls(n)\n\n"
    "def helper(x):\n    return x + 1\n",
    "#| export\n@add_to_class(Counter)\n@staticmethod\ndef text():\n    return '''two\nlines'''",
]


def test_methods_fold_into_the_class_body(tmp_path):
    r, lib = _export(tmp_path, _chapter(tmp_path, CELLS))
    assert r.returncode == 0, r.stderr
    text = (lib / "toy.py").read_text()
    assert "add_to_class" not in text
    assert "__all__ = ['LIMIT', 'Counter', 'helper']" in text
    mod = _load(lib / "toy.py")
    c = mod.Counter.at(2)
    assert c.bump() == 3 and c.full and mod.Counter.text() == "two\nlines" and mod.helper(1) == 2
    assert mod.Counter.bump.__doc__ == "Add `by`.\n\nA docstring line at column 0 stays as it was."
    # every method is written inside the class body, in the order of the chapter
    body = text[text.index("class Counter"):text.index("LIMIT = 3")]
    assert [m for m in ("def __init__", "def bump", "def full", "def at", "def text") if m in body] == \
        ["def __init__", "def bump", "def full", "def at", "def text"]
    assert body.index("def bump") < body.index("def full") < body.index("def at") < body.index("def text")


def test_a_method_for_another_modules_class_is_refused():
    text = "from .book import add_to_class\nfrom .other import Thing\n\n@add_to_class(Thing)\ndef f(self):\n    pass\n"
    with pytest.raises(ExportError, match="does not define"):
        fold_methods(text)


def test_the_decorator_must_be_outermost():
    text = "class A:\n    pass\n\n@property\n@add_to_class(A)\ndef f(self):\n    pass\n"
    with pytest.raises(ExportError, match="outermost"):
        fold_methods(text)


def test_no_generated_module_uses_the_decorator():
    "The package holds ordinary classes: only mqstore/book.py (which defines it) names add_to_class."
    users = [str(p.relative_to(ROOT)) for p in (ROOT / "mqstore").rglob("*.py")
             if "add_to_class" in p.read_text() and p.name != "book.py"]
    assert not users
    from mqstore.book import add_to_class

    class A:
        pass

    @add_to_class(A)
    @property
    def x(self):
        return 7

    assert A().x == 7
