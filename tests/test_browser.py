"""The built book, opened in a real browser (headless Chromium): every page of the table of
contents renders its pictures (and animation controls), and shows no error output.

Needs `make html` first (`make test` does it). Without Chromium or a built book the test
skips with the reason, except under CI, where it must run."""
import os, re, shutil, subprocess, tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]

pytestmark = [pytest.mark.browser, pytest.mark.once]


def toc_pages():
    files = re.findall(r"file:\s*(\S+)", (ROOT / "_toc.yml").read_text())
    root = re.search(r"root:\s*(\S+)", (ROOT / "_toc.yml").read_text()).group(1)
    return [root] + files


def _need(condition, reason):
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    _need(exe, "headless Chromium is not installed (apt-get install chromium)")
    _need((HTML / "book" / "intro.html").exists(), "the book is not built (run `make html`)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    return exe


def run_chromium(exe, *args):
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(["timeout", "90", exe, *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("page", toc_pages())
def test_page_renders_with_pictures_and_no_errors(chromium, page):
    html = HTML / f"{page}.html"
    assert html.exists(), f"{html.relative_to(ROOT)} was not built"
    url = html.as_uri()
    dom = run_chromium(chromium, "--virtual-time-budget=5000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert "<h1" in text, "the page has no title"
    images = re.findall(r'<img[^>]+src="([^"]+)"', text)
    figures = [s for s in images if s.startswith("data:image/png") or "_images/" in s]
    source = ROOT / f"{page}.ipynb"
    expected = 1 if page.endswith("intro") else 2
    assert len(figures) >= expected, f"{page}: {len(figures)} pictures, expected at least {expected}"
    for src in figures:
        if not src.startswith("data:"):
            assert (html.parent / src).resolve().exists(), f"{page}: missing image {src}"
    if source.exists() and "to_jshtml" in source.read_text():
        assert "anim-controls" in text or "anim-buttons" in text, f"{page}: animation without controls"
    assert "#|" not in text, f"{page}: an export directive is visible on the page"
    for bad in ("Traceback (most recent call last)", 'class="output traceback', "output stderr",
                "Error in cell", "ModuleNotFoundError"):
        assert bad not in text, f"{page}: error output on the page ({bad!r})"
    shot = SHOTS / (page.replace("/", "_") + ".png")
    res = run_chromium(chromium, f"--screenshot={shot}", "--window-size=1280,1600", url)
    assert res.returncode == 0 and shot.exists() and shot.stat().st_size > 10_000, res.stderr[-2000:]
