"""The three explorers in a real JupyterLab (issue 29): a JupyterLab server started here on
localhost, a notebook that builds each explorer from engine objects in its kernel, headless Chromium
(the system's /usr/bin/chromium under Playwright) running every cell from JupyterLab's own
"run all" command, then a reader's moves on each explorer's output: the output's script ran (it is
trusted, because this session produced it), the controls answer, nothing left localhost, and no
error came from an explorer.

The notebook builds smaller data than the chapters (two crash points, two faults) so that the test
stays short; the chapters' own outputs are checked in the built book by test_explorers_browser.py."""
import json, os, shutil, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

import pytest

from mqstore.index import build_key, index_key_hash
from mqstore.viz.recovery import FAULT_NOTES

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
TOKEN = "mqstore-explorers"
SHOTS = ROOT / "_build" / "screenshots" / "jupyterlab"

pytestmark = [pytest.mark.browser, pytest.mark.once]

CELLS = [
    """from pathlib import Path
import json, tempfile
from mqstore.vectors import rocketmq_vectors
from mqstore.index import IndexFile
work = Path(tempfile.mkdtemp(prefix="mqstore-lab-"))
VECTORS = rocketmq_vectors()""",
    # the record inspector: RocketMQ's own records, re-stamped from offset 0, and a copy torn inside its last record
    """from mqstore.viz.message import record_inspector, walk_log
log = (VECTORS / "commitlog.bin").read_bytes()
spans = [(p, n) for p, n, status in walk_log(log) if status == "OK"][:8]
seg = b"".join(log[p:p + n] for p, n in spans)
(work / "full").write_bytes(seg)
(work / "torn").write_bytes(seg[:-7])
record_inspector({"eight of RocketMQ's records": work / "full", "torn: cut inside its last record": work / "torn"})""",
    # the chain follower over RocketMQ's own index file
    """from mqstore.viz.index import chain_follower
f = IndexFile.create(work / "index", slot_num=64, index_num=256)
for k in map(json.loads, open(VECTORS / "index_keys.jsonl")):
    f.put_key(k["key"], k["phyOffset"], k["storeTimestamp"])
assert f.path.read_bytes() == (VECTORS / "index.bin").read_bytes()
chain_follower(f, "TopicTest", "seq-2")""",
    # the recovery explorer, computed in the kernel for the parameters asked for
    """from mqstore.viz.recovery import recovery_explorer
recovery_explorer(faults=("crash", "power_cut"), crash_points=(5, 25), before_crash=30)""",
]


KERNEL_IDLE = """() => { const w = window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle'; }"""
STARTED = """() => [...document.querySelectorAll('.jp-InputPrompt')].some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"""


def _need(condition, reason):
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab():
    _need(shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-lab"),
          "JupyterLab is not installed (pip install jupyterlab)")
    folder = Path(tempfile.mkdtemp(prefix="mqstore-jupyterlab-"))
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                     "source": src} for i, src in enumerate(CELLS)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (folder / "explorers.ipynb").write_text(json.dumps(nb))
    news = folder / ".config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)                                # no "get notified about Jupyter news?" toast
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JUPYTER_CONFIG_DIR=str(folder / ".config"), JUPYTER_RUNTIME_DIR=str(folder / ".runtime"))
    lab_exe = Path(sys.executable).parent / "jupyter-lab"
    server = subprocess.Popen(
        [str(lab_exe) if lab_exe.exists() else "jupyter-lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", "--allow-root", "--LabApp.extension_manager=readonly", f"--ServerApp.root_dir={folder}", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.expose_app_in_browser=True",
         "--ServerApp.disable_check_xsrf=True"],
        cwd=folder, env=env, stdout=open(folder / "server.log", "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
            break
        except OSError:
            assert server.poll() is None, (folder / "server.log").read_text()[-3000:]
            time.sleep(0.5)
    else:
        pytest.fail("JupyterLab did not start: " + (folder / "server.log").read_text()[-3000:])
    yield url, folder
    server.terminate()
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def notebook(lab):
    url, folder = lab
    exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    _need(exe, "headless Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                                               "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        errors, outside = [], []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        local = (url, "data:", "blob:", "about:")
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(local)
                   else (outside.append(route.request.url), route.abort()))
        page.goto(f"{url}/lab/tree/explorers.ipynb?token={TOKEN}")
        page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')",
                               timeout=120_000)
        page.wait_for_function("() => document.querySelector('.jp-Notebook-ExecutionIndicator, .jp-Notebook')",
                               timeout=60_000)
        page.wait_for_function(KERNEL_IDLE, timeout=180_000)  # the notebook's kernel is connected and idle
        for _ in range(3):                                # run all; again if no cell started (a busy machine)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            try:
                page.wait_for_function(STARTED, timeout=60_000)
                break
            except Exception:
                page.wait_for_function(KERNEL_IDLE, timeout=60_000)
        try:
            page.wait_for_function("() => document.querySelectorAll('.mqx[data-ready=\"1\"]').length === 3",
                                   timeout=240_000)
        except Exception:
            page.screenshot(path=str(SHOTS / "failed.png"), full_page=True)
            texts = page.locator(".jp-OutputArea-output").all_inner_texts()
            pytest.fail(f"the explorers did not start in JupyterLab; outputs: {texts}; errors: {errors}")
        yield page, errors, outside
        page.screenshot(path=str(SHOTS / "notebook.png"), full_page=True)
        browser.close()


def test_each_explorer_runs_from_its_output(notebook):
    page, errors, outside = notebook
    roots = page.locator(".jp-OutputArea-output .mqx")
    assert roots.count() == 3
    kinds = roots.evaluate_all("els => els.map(e => [...e.classList].find(c => c.startsWith('mqx-') && c !== 'mqx'))")
    assert kinds == ["mqx-record-inspector", "mqx-index-chain", "mqx-recovery"]
    assert "explorer starts when its script runs" not in page.locator(".jp-Notebook").inner_text()


def test_record_inspector_in_jupyterlab(notebook):
    page, _, _ = notebook
    root = page.locator(".mqx-record-inspector")
    root.scroll_into_view_if_needed()
    root.locator(".mqx-byte").fill("36")                      # SYSFLAG: bytes 36-39 of the first record
    panel = root.locator(".mqx-panel").evaluate("p => Object.assign({}, p.dataset)")
    assert (panel["record"], panel["status"], panel["field"]) == ("0", "OK", "SYSFLAG")
    root.locator(".mqx-byte").fill("")
    root.locator(".mqx-field").select_option("TOPIC")
    assert int(root.locator(".mqx-summary").get_attribute("data-records")) == 8
    torn = [k for k, s in enumerate(root.evaluate("el => el.mqxData.segments.map(s => s.name)")) if s.startswith("torn")]
    root.locator(".mqx-segment").select_option(str(torn[0]))
    assert root.locator(".mqx-b.mqx-torn").count() > 0
    root.screenshot(path=str(SHOTS / "record_inspector.png"))


@pytest.mark.parametrize("topic,key", [("TopicTest", "tx-1"), ("TopicTest", "missing"), ("主题测试", "键1")])
def test_chain_follower_in_jupyterlab(notebook, topic, key):
    page, _, _ = notebook
    root = page.locator(".mqx-index-chain")
    root.scroll_into_view_if_needed()
    root.locator(".mqx-topic").fill(topic)
    root.locator(".mqx-key").fill(key)
    h = index_key_hash(build_key(topic, key))
    assert int(root.get_attribute("data-hash")) == h
    if key == "tx-1":
        assert root.get_attribute("data-offsets") == "5040,4839"
        root.screenshot(path=str(SHOTS / "index_chain.png"))


def test_recovery_explorer_in_jupyterlab(notebook):
    page, _, _ = notebook
    root = page.locator(".mqx-recovery")
    root.scroll_into_view_if_needed()
    assert root.evaluate("el => el.mqxData.crash_points") == [5, 25]
    root.locator(".mqx-fault").select_option(label=FAULT_NOTES["power_cut"])
    root.locator(".mqx-crash").fill("1")
    shown = root.evaluate("el => Object.assign({}, el.dataset)")
    assert (shown["fault"], shown["crash"]) == ("power_cut", "25") and int(shown["acked"]) > 0
    steps = int(shown["steps"])
    root.locator(".mqx-step").fill(str(steps // 2))
    assert int(root.get_attribute("data-step")) == steps // 2
    root.screenshot(path=str(SHOTS / "recovery.png"))


def test_nothing_left_localhost_and_no_explorer_error(notebook):
    _, errors, outside = notebook
    assert not outside, f"requests that leave localhost: {outside}"
    ours = [e for e in errors if "mqx" in e or "mqstore" in e or "uncaught" in e]
    assert not ours, ours
