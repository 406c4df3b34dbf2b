"""The book's live explorers, driven in a real browser: headless Chromium (the system's
/usr/bin/chromium) under Playwright for Python, on the built pages opened from `_build/html` by
file:// URLs.

* Record inspector (chapter 3): point at bytes, type an offset, choose a field, switch to the torn
  file; what the page names (record, status, field, offset, length, value) must be what the engine
  answers for the same bytes (`check_record`, `record_fields`, `decode_record`).
* Index chain follower (chapter 6): type keys and topics; the hash, slot, chain and offsets the
  page shows must be what `index_key_hash`, `chain_of` and `IndexFile.select_phy_offsets` give
  on the same file; the page's hash is also checked on its own against `index_key_hash`.
* Recovery explorer (chapter 7): move the crash-point and step sliders, pick faults and rules; the
  verdict (acknowledged messages lost, keys not found, units wrong), the start segment, the cut and
  the number of steps must be what `run_scenario` and `check_store` give for the same input.

Every page must log no console error and make no request that is not file:// (or data:).
Screenshots of each explorer in a few states go to `_build/screenshots/explorers/`.

Needs `make html` first (`make test` does it); MQSTORE_BOOK_HTML may name another built book
(a scratch build with only some chapters). Without Chromium, Playwright or a built book the test
skips with the reason, except under CI, where it must run."""
import os, random, shutil, tempfile
from pathlib import Path

import pytest

from mqstore.index import IndexFile, build_key, index_key_hash
from mqstore.message import FIELD_NAMES, RecordStatus, check_record, decode_record, record_fields
from mqstore.viz.index import chain_of
from mqstore.viz.message import field_value
from mqstore.recovery import RecordChecked, SegmentChosen, Truncated
from mqstore.vectors import rocketmq_vectors
from mqstore.viz.recovery import FAULT_NOTES, check_scenario, keys_lost_by_rocketmq, rocketmq_events, run_scenario

ROOT = Path(__file__).resolve().parent.parent
HTML = Path(os.environ.get("MQSTORE_BOOK_HTML", ROOT / "_build" / "html"))
SHOTS = ROOT / "_build" / "screenshots" / "explorers"
CHROMIUM = "/usr/bin/chromium"
LOCAL = ("file:", "data:", "blob:", "about:")

pytestmark = [pytest.mark.browser, pytest.mark.once]


def _need(condition, reason):
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    exe = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    _need(exe, "headless Chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need(False, "Playwright for Python is not installed (pip install playwright)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield b
        b.close()


class Page:
    "A chapter's built page, with every console error and every request that leaves the page recorded."

    def __init__(self, browser, chapter, selector):
        _need((HTML / "book" / f"{chapter}.html").exists(), f"{chapter} is not built in {HTML} (run `make html`)")
        self.page = browser.new_page(viewport={"width": 1280, "height": 1000})
        self.errors, self.outside = [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("request", lambda r: None if r.url.startswith(LOCAL) else self.outside.append(r.url))
        self.page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(LOCAL)
                        else route.abort())                        # recorded above, never fetched
        self.page.goto((HTML / "book" / f"{chapter}.html").as_uri())
        self.page.wait_for_load_state("load")
        self.root = self.page.locator(selector)
        assert self.root.count() == 1, f"{chapter}: {self.root.count()} explorers {selector}"
        self.root.scroll_into_view_if_needed()
        assert self.root.get_attribute("data-ready") == "1", f"{chapter}: the explorer did not start"
        self.id = self.root.get_attribute("id")

    def data(self):
        return self.root.evaluate("el => el.mqxData")

    def shot(self, name):
        path = SHOTS / f"{name}.png"
        self.page.evaluate("window.scrollTo(0, window.scrollY)")
        self.root.evaluate("el => el.scrollIntoView({block: 'start', inline: 'start'})")
        self.root.screenshot(path=str(path))
        assert path.stat().st_size > 5_000, path

    def clean(self):
        assert not self.errors, f"console errors: {self.errors}"
        assert not self.outside, f"requests that leave the page: {self.outside}"
        self.page.close()


def _bytes(seg):
    import base64
    return base64.b64decode(seg["b64"])


def _engine_field(buf, i):
    "What the engine says about byte i of a segment walked from 0: (record, status, field, offset, length, value)."
    pos, k = 0, 0
    while True:
        r = check_record(buf, pos, check_crc=True, read_body=True)
        if r.ok and i >= pos + r.size:
            pos, k = pos + r.size, k + 1
            continue
        if not r.ok:
            return k, r.status.name, None, None, None, None
        layout = record_fields(buf, pos)
        sizes = {name: size for name, _, size in layout}
        for name, off, size in layout:
            if pos + off <= i < pos + off + size:
                return k, "OK", name, off, size, field_value(decode_record(buf, pos), name, sizes)


def _panel(page):
    return page.root.locator(".mqx-panel").evaluate("p => Object.assign({}, p.dataset)")


# ------------------------------------------------------------------ chapter 3: the record inspector

@pytest.fixture(scope="module")
def inspector(browser):
    p = Page(browser, "03_record_format", ".mqx-record-inspector")
    yield p
    p.clean()


def test_inspector_names_the_field_under_every_pointed_byte(inspector):
    p = inspector
    seg = p.data()["segments"][0]
    buf = _bytes(seg)
    p.shot("record_inspector_start")
    walked = [(pos, r.size) for pos, r in _walk(buf)]
    targets = set()
    for pos, size in walked:                                    # the first and last byte of every field
        if check_record(buf, pos).ok:
            for _, off, n in record_fields(buf, pos):
                targets |= {pos + off, pos + off + max(n, 1) - 1}
    targets = sorted(t for t in targets if t < len(buf))
    rng = random.Random(3)
    for i in targets[::3] + rng.sample(range(len(buf)), 12):
        p.page.hover(f"#{p.id} .mqx-b[data-i='{i}']")
        shown = _panel(p)
        k, status, field, off, size, value = _engine_field(buf, i)
        assert (int(shown["record"]), shown["status"]) == (k, status), i
        if status == "OK":
            assert (shown["field"], int(shown["offset"]), int(shown["length"]), shown["value"]) == \
                   (field, off, size, value), i
    ipv6 = next(pos for pos, r in _walk(buf) if r.ok and ":" in r.message.born_host[0])
    p.page.hover(f"#{p.id} .mqx-b[data-i='{ipv6 + 50}']")
    assert _panel(p)["field"] == "BORNHOST" and int(_panel(p)["length"]) == 20
    p.root.locator(".mqx-byte").fill(str(ipv6 + 50))           # pinned: the shot keeps this byte
    p.shot("record_inspector_ipv6_born_host")
    p.root.locator(".mqx-byte").fill("")
    p.page.hover(f"#{p.id} .mqx-b[data-i='0']")
    assert _panel(p)["field"] == "TOTALSIZE"                    # following the pointer again


def _walk(buf):
    pos = 0
    while pos < len(buf):
        r = check_record(buf, pos)
        yield pos, r
        if not r.ok:
            return
        pos += r.size


def test_inspector_typed_offset_and_the_blank(inspector):
    p = inspector
    buf = _bytes(p.data()["segments"][0])
    *_, (blank_at, blank) = _walk(buf)
    assert blank.status is RecordStatus.BLANK
    for i, want in ((blank_at, "TOTALSIZE"), (blank_at + 5, "MAGICCODE"), (len(buf) - 1, "(blank: never read)")):
        p.root.locator(".mqx-byte").fill(str(i))
        shown = _panel(p)
        assert (int(shown["byte"]), shown["status"], shown["field"]) == (i, "BLANK", want)
    assert int(_panel(p)["record"]) == len(list(_walk(buf))) - 1
    ok = sum(1 for _, r in _walk(buf) if r.ok)                # the summary counts records apart from the blank
    assert int(p.root.locator(".mqx-summary").get_attribute("data-ok")) == ok
    assert f"{ok} records (numbered 0 to {ok - 1}), then BLANK" in p.root.locator(".mqx-summary").inner_text()
    p.shot("record_inspector_blank")
    p.root.locator(".mqx-byte").fill("")


@pytest.mark.parametrize("field", ["BORNHOST", "TOPIC", "PHYSICALOFFSET"])
def test_inspector_highlights_a_field_in_every_record(inspector, field):
    p = inspector
    p.root.locator(".mqx-segment").select_option("0")
    buf = _bytes(p.data()["segments"][0])
    p.root.locator(".mqx-field").select_option(field)
    want = set()
    records = 0
    for pos, r in _walk(buf):
        if r.ok:
            records += 1
            (off, size), = [(o, n) for name, o, n in record_fields(buf, pos) if name == field]
            want |= set(range(pos + off, pos + off + size))
    lit = set(p.root.locator(".mqx-b.mqx-hl").evaluate_all("els => els.map(e => +e.dataset.i)"))
    assert lit == want
    summary = p.root.locator(".mqx-summary")
    assert (int(summary.get_attribute("data-records")), int(summary.get_attribute("data-bytes"))) == (records, len(want))
    if field == "BORNHOST":
        p.shot("record_inspector_field_BORNHOST")
    p.root.locator(".mqx-field").select_option("")
    assert p.root.locator(".mqx-b.mqx-hl").count() == 0


def test_inspector_shows_the_torn_record(inspector):
    p = inspector
    segs = p.data()["segments"]
    (k, torn), = [(k, s) for k, s in enumerate(segs) if s["name"].startswith("torn")]
    p.root.locator(".mqx-segment").select_option(str(k))
    buf = _bytes(torn)
    assert p.root.locator(".mqx-b").count() == len(buf)
    *_, (at, last) = _walk(buf)
    assert last.status is RecordStatus.TORN
    torn_bytes = p.root.locator(".mqx-b.mqx-torn").evaluate_all("els => els.map(e => +e.dataset.i)")
    assert torn_bytes == list(range(at, len(buf)))
    p.page.hover(f"#{p.id} .mqx-b[data-i='{len(buf) - 1}']")
    shown = _panel(p)
    assert shown["status"] == "TORN" and int(shown["record"]) == len(list(_walk(buf))) - 1
    assert last.reason in p.root.locator(".mqx-panel").inner_text()
    p.root.locator(".mqx-byte").fill(str(len(buf) - 1))
    p.shot("record_inspector_torn")
    p.root.locator(".mqx-byte").fill("")
    p.root.locator(".mqx-segment").select_option("0")


def test_inspector_transaction_points_at_its_prepared_record(inspector):
    p = inspector
    p.root.locator(".mqx-segment").select_option("0")
    buf = _bytes(p.data()["segments"][0])
    msgs = [(pos, decode_record(buf, pos)) for pos, r in _walk(buf) if r.ok]
    (prepared, _), = [(pos, m) for pos, m in msgs if m.transaction_type == 0x4]
    pointers = [(pos, m.prepared_transaction_offset) for pos, m in msgs if m.transaction_type in (0x8, 0xC)]
    assert len(pointers) == 2 and {ptr for _, ptr in pointers} == {prepared}     # commit and rollback, this file's
    for pos, ptr in pointers:
        (off, _), = [(o, n) for name, o, n in record_fields(buf, pos) if name == "PREPAREDTRANSACTIONOFFSET"]
        p.root.locator(".mqx-byte").fill(str(pos + off))
        assert _panel(p)["value"] == str(prepared)
        p.root.locator(".mqx-byte").fill(str(ptr))                   # following the pointer
        shown = _panel(p)
        assert (int(shown["record"]), shown["field"], int(shown["offset"])) == (
            [q for q, _ in msgs].index(prepared), "TOTALSIZE", 0)
    p.root.locator(".mqx-byte").fill("")


def test_inspector_typed_offset_is_clamped_to_a_shorter_segment(inspector):
    p = inspector
    segs = p.data()["segments"]
    (k, torn), = [(k, s) for k, s in enumerate(segs) if s["name"].startswith("torn")]
    p.root.locator(".mqx-segment").select_option("0")
    p.root.locator(".mqx-byte").fill(str(len(_bytes(segs[0])) - 152))          # past the torn file's end
    p.root.locator(".mqx-segment").select_option(str(k))
    last = len(_bytes(torn)) - 1
    box = p.root.locator(".mqx-byte")
    assert int(box.input_value()) == last == int(box.get_attribute("max")) and int(_panel(p)["byte"]) == last
    p.shot("record_inspector_torn_clamped")
    box.fill("")
    p.root.locator(".mqx-segment").select_option("0")


def test_inspector_fields_are_rocketmqs(inspector):
    names = set(inspector.data()["field_names"])
    assert names == set(FIELD_NAMES)


# ------------------------------------------------------------------ chapter 6: the index chain follower

@pytest.fixture(scope="module")
def follower(browser):
    p = Page(browser, "06_index", ".mqx-index-chain")
    d = p.data()
    raw = _bytes(d)
    raw += bytes(d["file_size"] - len(raw))
    assert raw == (rocketmq_vectors() / "index.bin").read_bytes(), "the page holds another file than RocketMQ's"
    folder = Path(tempfile.mkdtemp(prefix="mqstore-explorer-"))
    (folder / "index").write_bytes(raw)
    f = IndexFile(folder / "index", d["slot_num"], d["index_num"], read_only=True)
    yield p, f
    f.close()
    shutil.rmtree(folder)
    p.clean()


KEYS = [("TopicTest", "seq-2"), ("TopicTest", "tx-1"), ("TopicTest", "nope"), ("TopicTest", "missing"),
        ("主题测试", "键1"), ("TopicTest", "🚀key"), ("TopicTest", "k4096"), ("TopicTest", "user-42"),
        ("TopicTest", "Aa"), ("OtherTopic", "seq-2"), ("", "")]


@pytest.mark.parametrize("topic,key", KEYS)
def test_follower_walks_the_chain_the_engine_walks(follower, topic, key):
    p, f = follower
    p.root.locator(".mqx-topic").fill(topic)
    p.root.locator(".mqx-key").fill(key)
    h = index_key_hash(build_key(topic, key))
    shown = p.root.evaluate("el => Object.assign({}, el.dataset)")
    chain = chain_of(f, h)
    offsets = f.select_phy_offsets(h, 0, 2**62)
    assert int(shown["hash"]) == h and int(shown["slot"]) == h % f.slot_num
    assert int(shown["head"]) == f.slot_value(h)
    assert shown["chain"] == ",".join(map(str, chain))
    assert shown["matches"] == ",".join(str(n) for n in chain if f.entry(n)[0] == h)
    assert shown["offsets"] == ",".join(map(str, offsets))
    rows = p.root.locator("table.mqx-steps tr")
    assert rows.count() == len(chain) + 1
    assert p.root.locator(".mqx-entries .mqx-match").count() == len([n for n in chain if f.entry(n)[0] == h])
    assert p.root.locator(".mqx-slots .mqx-slot").count() == 1
    result = p.root.locator(".mqx-result").inner_text()
    assert (f"found {len(offsets)} offset" in result) if offsets else result.startswith("no entry found")
    if (topic, key) in {("TopicTest", "seq-2"), ("TopicTest", "tx-1"), ("TopicTest", "nope"), ("TopicTest", "missing")}:
        p.shot(f"index_chain_{key}")


def test_follower_hash_is_javas(follower):
    p, _ = follower
    rng = random.Random(29)
    alphabet = "aAbB09#-_ .é主题键🚀\U0001F600zZ"
    strings = ["", "polygenelubricants", "Aa", "BB", "TopicTest#seq-2", "主题测试#键1", "TopicTest#🚀key",
               "GydZG_", "a" * 300] + ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
                                      for _ in range(300)]
    got = p.page.evaluate("ss => ss.map(s => [window.mqstoreExplorers.javaStringHash(s),"
                          " window.mqstoreExplorers.indexKeyHash(s)])", strings)
    from mqstore.message import java_string_hash
    assert [g[0] for g in got] == [java_string_hash(s) for s in strings]
    assert [g[1] for g in got] == [index_key_hash(s) for s in strings]
    assert got[1] == [-2**31, 0]                 # Integer.MIN_VALUE: abs stays negative, RocketMQ uses 0


# ------------------------------------------------------------------ chapter 7: the recovery explorer

@pytest.fixture(scope="module")
def recovery(browser):
    p = Page(browser, "07_recovery", ".mqx-recovery")
    yield p
    p.clean()


_RUNS = {}

def _engine(fault, crash_at, index_safe=False):
    "The engine's recovery of the same input, checked by check_store (every put acknowledged)."
    key = (fault, crash_at, index_safe)
    if key not in _RUNS:
        _RUNS[key] = run_scenario(fault, crash_at=crash_at, index_safe=index_safe, check=check_scenario)
    return _RUNS[key]


def _expected(fault, crash_at, rule):
    sc = _engine(fault, crash_at)
    rep = sc.verdict
    lost = {a.key for a, why in rep.lost + rep.torn if not why.startswith("query")}
    keys = {a.key for a, why in rep.lost if why.startswith("query")} | (set(sc.unfound) - lost)
    events = sc.events
    if rule != "mqstore":
        raw = _engine(fault, crash_at, index_safe=rule == "index_safe").events
        keys |= {k for _, k in keys_lost_by_rocketmq(raw, sc.sent)} - lost
        events = rocketmq_events(raw)
    units = [p for p in rep.problems if not p.startswith(("index", "commit log"))]
    return dict(acked=len(sc.sent), lost=len(lost), keys=len(keys), units=len(units), events=events)


def _choose(p, fault, crash_at, rule):
    d = p.data()
    p.root.locator(".mqx-fault").select_option(str([f for f, _ in d["faults"]].index(fault)))
    p.root.locator(".mqx-rule").select_option(str([r for r, _ in d["rules"]].index(rule)))
    p.root.locator(".mqx-crash").fill(str(d["crash_points"].index(crash_at)))
    return p.root.evaluate("el => Object.assign({}, el.dataset)")


COMBOS = [("crash", 5, "rocketmq4"), ("crash", 45, "index_safe"), ("crash", 25, "mqstore"),
          ("power_cut", 15, "mqstore"), ("power_cut", 35, "rocketmq4"), ("torn", 25, "index_safe"),
          ("flipped_bit", 5, "mqstore"), ("flipped_bit", 45, "rocketmq4"), ("dropped_index", 15, "rocketmq4"),
          ("dropped_index", 15, "index_safe"), ("dropped_index", 35, "mqstore"), ("stale_checkpoint", 25, "rocketmq4"),
          ("dispatch_lag", 45, "mqstore"), ("dispatch_lag", 5, "index_safe")]


@pytest.mark.parametrize("fault,crash_at,rule", COMBOS)
def test_recovery_verdict_is_check_stores(recovery, fault, crash_at, rule):
    p = recovery
    shown = _choose(p, fault, crash_at, rule)
    want = _expected(fault, crash_at, rule)
    assert int(shown["step"]) <= len(want["events"])      # a change keeps the step, clamped (see below)
    p.root.locator(".mqx-step").fill(shown["steps"])       # the end: the verdict
    shown = p.root.evaluate("el => Object.assign({}, el.dataset)")
    assert (shown["fault"], int(shown["crash"]), shown["rule"]) == (fault, crash_at, rule)
    assert {k: int(shown[k]) for k in ("acked", "lost", "keys", "units")} == \
           {k: want[k] for k in ("acked", "lost", "keys", "units")}
    text = p.root.locator(".mqx-verdict").inner_text()
    assert f"{want['lost']} of {want['acked']} acknowledged messages lost, {want['keys']} keys no longer found" in text
    events = want["events"]
    assert int(shown["steps"]) == len(events) == int(p.root.locator(".mqx-step").get_attribute("max"))
    cut = next(e.offset for e in events if isinstance(e, Truncated) and e.what == "commitlog")
    walked = [e for e in events if isinstance(e, RecordChecked) and e.status in ("OK", "BLANK")]
    assert (int(shown["step"]), int(shown["cut"]), int(shown["walked"])) == (len(events), cut, len(walked))
    chosen = [(i, e) for i, e in enumerate(events) if isinstance(e, SegmentChosen)]
    assert int(shown["start"]) == chosen[-1][1].index
    step = p.root.locator(".mqx-step")
    step.fill(str(chosen[0][0] + 1))                         # just after the first choice of a start
    now = p.root.evaluate("el => Object.assign({}, el.dataset)")
    assert int(now["start"]) == chosen[0][1].index and now["cut"] == ""
    assert now["title"].startswith(f"start at segment {chosen[0][1].index}: {chosen[0][1].reason}")
    assert p.root.locator(".mqx-chosen").count() == 1
    step.fill("0")
    assert p.root.get_attribute("data-walked") == "0" and p.root.locator(".mqx-walked").count() == 0
    if (fault, rule) in {("crash", "rocketmq4"), ("power_cut", "mqstore"), ("flipped_bit", "mqstore"),
                         ("dropped_index", "rocketmq4")}:
        step.fill(str(len(events) * 2 // 3))
        p.shot(f"recovery_{fault}_{crash_at}_{rule}_mid")
    step.fill(str(len(events)))
    if fault in ("flipped_bit", "dropped_index"):
        p.shot(f"recovery_{fault}_{crash_at}_{rule}_end")


# ------------------------------------------------------------------ the same outputs in a notebook front-end

def _stored_html(chapter, call):
    import json
    nb = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    (html,) = ["".join(o["data"]["text/html"]) for c in nb["cells"] if c["cell_type"] == "code"
               and call in "".join(c["source"]) for o in c["outputs"] if "text/html" in o.get("data", {})]
    return html


@pytest.mark.parametrize("chapter,call,selector", [("03_record_format", "record_inspector(", ".mqx-record-inspector"),
                                                   ("06_index", "chain_follower(", ".mqx-index-chain"),
                                                   ("07_recovery", "recovery_explorer(", ".mqx-recovery")])
def test_the_stored_output_runs_as_jupyterlab_shows_it(browser, chapter, call, selector):
    """JupyterLab puts a trusted text/html output into the page with innerHTML, then replaces each
    <script> by a new one with the same text so that it runs: the same here, on a blank page."""
    page = browser.new_page()
    errors, outside = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
    page.set_content("<div class='jp-OutputArea-output'></div><div class='jp-OutputArea-output'></div>")
    html = _stored_html(chapter, call)
    page.evaluate("""html => document.querySelectorAll('.jp-OutputArea-output').forEach(host => {
        host.innerHTML = html;
        host.querySelectorAll('script').forEach(old => {
            const s = document.createElement('script'); s.text = old.text; old.replaceWith(s); });
    })""", html)                                  # twice: a notebook may show the same output again
    roots = page.locator(selector)
    assert roots.count() == 2
    assert "explorer starts when its script runs" not in roots.first.inner_text()
    page.evaluate("html => { const d = document.createElement('div'); d.id = 'untrusted';"
                  " d.innerHTML = html; document.body.appendChild(d); }", html)   # scripts not run
    assert "explorer starts when its script runs" in page.locator("#untrusted").inner_text()
    for k in range(2):
        root = roots.nth(k)
        assert root.get_attribute("data-ready") == "1"
        if chapter == "06_index":
            root.locator(".mqx-key").fill("tx-1")
            assert root.get_attribute("data-offsets") == "5040,4839"
        elif chapter == "07_recovery":
            root.locator(".mqx-fault").select_option(label=FAULT_NOTES["power_cut"])
            assert root.get_attribute("data-lost") == "3"
        else:
            root.locator(".mqx-byte").fill("36")
            assert root.locator(".mqx-panel").evaluate("p => p.dataset.field") == "SYSFLAG"
    assert not errors and not outside, (errors, outside)
    page.close()


def _rendered_widths(p, cls):
    return p.root.locator(f"rect.{cls}").evaluate_all("els => els.map(e => e.getBoundingClientRect().width)")


def test_recovery_keeps_the_step_across_changes(recovery):
    p = recovery
    d = p.data()
    labels = dict(d["faults"])
    step = p.root.locator(".mqx-step")
    _choose(p, "crash", 25, "rocketmq4")
    n4 = int(p.root.get_attribute("data-steps"))
    step.fill("0")
    assert p.root.get_attribute("data-title") == "before recovery \u2014 " + labels["crash"]   # the menu's label
    step.fill("10")
    p.shot("recovery_crash_25_rocketmq4_step10")
    p.root.locator(".mqx-rule").select_option(str([r for r, _ in d["rules"]].index("mqstore")))
    n = int(p.root.get_attribute("data-steps"))
    assert (p.root.get_attribute("data-rule"), int(p.root.get_attribute("data-step"))) == ("mqstore", 10)
    p.shot("recovery_crash_25_mqstore_step10")
    assert n > n4
    step.fill(str(n))                                      # past the end of the other rule's run: its end
    p.root.locator(".mqx-rule").select_option(str([r for r, _ in d["rules"]].index("rocketmq4")))
    assert int(p.root.get_attribute("data-step")) == n4 == int(step.input_value())
    text = p.root.locator(".mqx-verdict").inner_text()     # the rule's keys and check_store's check, apart
    keys = int(p.root.get_attribute("data-keys"))
    assert keys and f"({keys} that RocketMQ 4.x would not index again, simulated; 0 not served by this engine's store)" in text
    assert "What check_store checked: the files this engine's abnormal recovery left" in text
    assert "every key was queried in the recovered store itself" in text
    p.shot("recovery_crash_25_rocketmq4_verdict")
    p.root.locator(".mqx-crash").fill(str(d["crash_points"].index(5)))           # the crash point too
    assert int(p.root.get_attribute("data-step")) == min(n4, int(p.root.get_attribute("data-steps")))


@pytest.mark.parametrize("fault", ["flipped_bit", "torn"])
def test_recovery_bad_records_are_visible(recovery, fault):
    p = recovery
    _choose(p, fault, 25, "mqstore")
    step = p.root.locator(".mqx-step")
    step.fill("0")
    assert p.root.get_attribute("data-title") == "before recovery \u2014 " + FAULT_NOTES[fault]
    widths = _rendered_widths(p, "mqx-bad-before")
    assert len(widths) == 1 and min(widths) >= 6, widths  # the damaged record in the files the crash left
    p.shot(f"recovery_{fault}_25_mqstore_before")
    step.fill(p.root.get_attribute("data-steps"))
    widths = _rendered_widths(p, "mqx-bad")
    assert len(widths) == int(p.root.get_attribute("data-bad")) >= 1 and min(widths) >= 6, widths
    p.shot(f"recovery_{fault}_25_mqstore_bad")
