/* mqstore recovery explorer (chapter 7). Written for the book; no library, no network.
   data = {faults: [[name, note]], crash_points: [puts after the clean close], before_crash, rules: [[id, label]],
           kinds: [[event name, field names]], cases[fault][crash point] = {puts, segments, file_size,
           first_offset, before: {records: [[offset, size, bad]], queues: {name: [offsets]}, index: [offsets]},
           rules: [{events: [[kind, fields...]], after: (as before), verdict: {acked, lost, keys, units, ...}}]}}.
   Everything shown is computed by the engine (`recovery_explorer_data`); the page only draws it. */
(function () {
  "use strict";
  var X = window.mqstoreExplorers = window.mqstoreExplorers || {};
  var NS = "http://www.w3.org/2000/svg";
  // Okabe-Ito, one meaning each (as the chapter's matplotlib pictures)
  var C = {walked: "#56B4E9", skipped: "#999999", bad: "#D55E00", redisp: "#E69F00", kept: "#000000",
           chosen: "#009E73", dropped: "#CC79A7"};
  X.el = X.el || function (tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  function s(tag, attrs, parent, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function num(n) { return Number(n).toLocaleString("en-US"); }
  function firstDropped(r) { return r > 0 ? r + 1 : 0; }

  X.recoveryEvents = function (kinds, rows) {
    return rows.map(function (row) {
      var k = kinds[row[0]], e = {kind: k[0]};
      k[1].forEach(function (f, i) { e[f] = row[i + 1]; });
      return e;
    });
  };

  /* what the first `upto` events say (the chapter's _state); `fault`: the fault's label, as in the menu */
  X.recoveryState = function (evs, upto, fault) {
    var st = {checked: {}, chosen: null, walked: [], bad: [], cut: null, cqCut: null, dropped: null,
              title: "before recovery \u2014 " + fault};
    evs.slice(0, upto).forEach(function (e) {
      switch (e.kind) {
        case "RecoveryStarted":
          st.title = e.mode + " recovery starts: " + e.segments + " segment(s)"; break;
        case "IndexFilesDropped":
          st.dropped = firstDropped(e.replay_from);
          st.title = e.names.length + " index file(s) dropped: the replay must start by " + num(e.replay_from); break;
        case "IndexHoleFound":
          st.title = "a lost index file from " + num(e.start) + " to " + num(e.end) + ": " + e.names.length +
                     " file(s) written again"; break;
        case "SegmentChecked":
          st.checked[e.index] = e.accepted;
          st.title = "segment " + e.index + ": " + (e.accepted ? "older than the checkpoint" : "too new"); break;
        case "SegmentChosen":
          st.chosen = e.index; st.title = "start at segment " + e.index + ": " + e.reason; break;
        case "RecordChecked":
          if (e.status === "END") {            // zeros: the end of what was written, no damage
            st.title = "zeros at " + num(e.offset) + ": nothing was written there"; break;
          }
          (e.status === "OK" || e.status === "BLANK" ? st.walked : st.bad).push([e.offset, e.size]);
          st.title = "walked the record at " + num(e.offset) + ": " + e.status; break;
        case "WalkStopped":
          st.title = "the walk stopped at " + num(e.offset) + ": " + e.status + " (" + e.reason + ")"; break;
        case "Redispatched":
          st.title = "re-dispatched " + e.count + " records from " + num(e.from_offset); break;
        case "Truncated":
          if (e.what === "commitlog") st.cut = e.offset; else st.cqCut = e.offset;
          st.title = "truncated the " + e.what + " at " + num(e.offset); break;
        default:
          st.title = e.kind;
      }
    });
    return st;
  };

  function describe(e) {
    var parts = [];
    for (var k in e) if (k !== "kind") parts.push(k + "=" + (Array.isArray(e[k]) ? "[" + e[k].join(", ") + "]" : e[k]));
    return e.kind + " " + parts.join(", ");
  }

  X.recoveryExplorer = function (root, data) {
    var el = X.el, uid = root.id || "mqx-recovery";
    root.textContent = "";
    var controls = el("div", "mqx-controls");
    var crash = el("input"); crash.type = "range"; crash.min = 0; crash.max = data.crash_points.length - 1;
    crash.value = Math.floor(data.crash_points.length / 2); crash.className = "mqx-crash";
    var crashOut = el("span", "mqx-note");
    var fault = el("select", "mqx-fault");
    data.faults.forEach(function (f, i) { var o = el("option", "", f[1]); o.value = i; fault.appendChild(o); });
    var rule = el("select", "mqx-rule");
    data.rules.forEach(function (r, i) { var o = el("option", "", r[1]); o.value = i; rule.appendChild(o); });
    rule.value = data.rules.length - 1;
    var step = el("input"); step.type = "range"; step.min = 0; step.className = "mqx-step";
    var stepOut = el("span", "mqx-note");
    var l1 = el("label", "", "crash point "); l1.appendChild(crash); l1.appendChild(crashOut);
    var l2 = el("label", "", "fault "); l2.appendChild(fault);
    var l3 = el("label", "", "rule "); l3.appendChild(rule);
    [l1, l2, l3].forEach(function (l) { controls.appendChild(l); });
    var stepRow = el("div", "mqx-controls");
    var l4 = el("label", "", "step "); l4.appendChild(step); l4.appendChild(stepOut);
    var prev = el("button", "mqx-prev", "\u25C0"), next = el("button", "mqx-next", "\u25B6");
    stepRow.appendChild(l4); stepRow.appendChild(prev); stepRow.appendChild(next);
    var title = el("div", "mqx-result mqx-title");
    var sim = el("div", "mqx-note mqx-sim");
    var pic = el("div", "mqx-pic");
    var legend = el("div", "mqx-legend");
    [["walked record", C.walked], ["torn / bad record", C.bad], ["skipped segment (hatched)", "#dddddd"],
     ["cut off (cross-hatched)", "#ffffff"], ["walk starts here (outline)", C.chosen],
     ["\u2717 segment too new", null, C.bad], ["\u2713 checkpoint vouches for it", null, C.chosen],
     ["| unit / entry on disk (upper half of a row)", null, C.kept], ["| dropped or cut", null, C.dropped],
     ["+ written by the replay (lower half)", null, C.redisp]].forEach(function (p) {
      var sp = el("span");
      if (p[1]) { var sw = el("span", "mqx-sw"); sw.style.background = p[1]; sp.appendChild(sw); }
      else { sp.style.color = p[2]; sp.style.fontWeight = 700; }
      sp.appendChild(document.createTextNode(p[0])); legend.appendChild(sp);
    });
    var log = el("div", "mqx-panel mqx-log");
    var verdict = el("div", "mqx-panel mqx-verdict");
    [controls, stepRow, title, sim, pic, legend, log, verdict].forEach(function (e) { root.appendChild(e); });
    [log, verdict].forEach(function (p) { p.style.wordBreak = "normal"; p.style.overflowWrap = "anywhere"; });

    var cur = {};
    function pick() {
      var fi = +fault.value, ci = +crash.value, ri = +rule.value;
      var c = data.cases[fi][ci], r = c.rules[ri];
      var kept = cur.evs ? +step.value : Infinity;     // the first run opens at its end; a change keeps the step
      cur = {fi: fi, ci: ci, ri: ri, c: c, r: r, evs: X.recoveryEvents(data.kinds, r.events)};
      step.max = cur.evs.length; step.value = Math.min(kept, cur.evs.length);
      var n = data.crash_points[ci];
      crashOut.textContent = " " + n + " puts after the clean close (" + data.before_crash + " before it; " +
        (c.puts - data.before_crash - n) + " more reach only the log; the crash after put " + c.puts + ")";
      sim.textContent = data.rules[ri][0] === "mqstore" ? "This engine's recovery, run end to end." :
        "Simulated from RocketMQ's rules: the start segment (the checkpoint's choice, never moved back), " +
        "no lost index file looked for, and the keys RocketMQ would not index again. The walk, the cut " +
        "and the units are this engine's.";
      var v = r.verdict;
      var ds = root.dataset;
      ds.fault = data.faults[fi][0]; ds.crash = n; ds.rule = data.rules[ri][0];
      ds.acked = v.acked; ds.lost = v.lost; ds.keys = v.keys; ds.units = v.units; ds.steps = cur.evs.length;
      draw();
    }

    function showVerdict(upto) {          // check_store judges the recovered store: only once recovery has run
      var v = cur.r.verdict, n = cur.evs.length;
      verdict.textContent = "";
      if (upto < n) {
        verdict.appendChild(el("div", "mqx-note", "verdict: recovery has run " + upto + " of its " + n +
          " events; step to the end to see the verdict on the recovered store"));
        root.dataset.verdictShown = "0";
        return;
      }
      var simulated = data.rules[cur.ri][0] !== "mqstore", label = data.rules[cur.ri][1];
      verdict.appendChild(el("div", "mqx-result", (simulated ? "verdict under " + label + " (simulated)"
        : "verdict (this engine)") + ": " + v.lost + " of " + v.acked + " acknowledged messages lost, " + v.keys +
        " keys no longer found, " + v.units + " units wrong"));
      if (v.lost) verdict.appendChild(el("div", "", "lost: " + v.lost_keys.join(", ") + (v.lost > v.lost_keys.length ? ", ..." : "")));
      if (v.keys) verdict.appendChild(el("div", "", "keys not found: " + v.missing_keys.join(", ") +
        (v.keys > v.missing_keys.length ? ", ..." : "") + (simulated ? " (" + v.keys_by_rule + " that " + label +
        " would not index again, simulated; " + (v.keys - v.keys_by_rule) + " not served by this engine's store)" : "")));
      if (v.units) verdict.appendChild(el("div", "", "units: " + v.unit_problems.join("; ")));
      verdict.appendChild(el("div", "mqx-note", "What check_store checked: the files this engine's " + v.recovery +
        " recovery left (it reopens the store, which closed cleanly): " + v.summary + ". Before that reopen, " +
        "every key was queried in the recovered store itself; a kept message's key it did not serve counts above too" +
        (simulated ? ". The keys " + label + " would not index again are not in these files' check: they are " +
         "counted from its rule (keys_lost_by_rocketmq) and added above." : ".")));
      root.dataset.verdictShown = "1";
    }

    function draw() {
      var upto = +step.value, c = cur.c, r = cur.r, evs = cur.evs;
      var st = X.recoveryState(evs, upto, data.faults[cur.fi][1]);
      stepOut.textContent = " " + upto + " / " + evs.length + " events";
      title.textContent = st.title;
      var queues = Object.keys(c.before.queues);
      Object.keys(r.after.queues).forEach(function (q) { if (queues.indexOf(q) < 0) queues.push(q); });
      queues.sort();
      var names = [];
      for (var i = 0; i < c.segments; i++) names.push("segment " + i);
      names = names.concat(queues, ["index"]);
      var left = 90, W = 720, H = 18, top = 6, span = c.segments * c.file_size, base = c.first_offset;
      var x = function (off) { return left + (off - base) / span * (W - left - 40); };   // 40 px: marks, last label
      var yOf = function (name) { return top + names.indexOf(name) * H; };
      var shown = Math.min(W, pic.getBoundingClientRect().width || W);             // px the svg is drawn in
      var minW = 7 * W / Math.max(shown, 120);           // over 6 px on screen, however small the record
      var mark = function (off, size) {                   // [x, width] of a record's mark, from its start on
        var seg = Math.min(c.segments - 1, Math.floor((off - base) / c.file_size));
        var x0 = x(off), w = Math.max(x(off + size) - x0, minW), end = x(base + (seg + 1) * c.file_size);
        return [Math.max(x(base + seg * c.file_size), Math.min(x0, end - w)), w];
      };
      var rowOf = function (off) { return "segment " + Math.min(c.segments - 1, Math.floor((off - base) / c.file_size)); };
      pic.textContent = "";
      var svg = s("svg", {width: "100%", viewBox: "0 0 " + W + " " + (top + names.length * H + 22),
                          preserveAspectRatio: "xMinYMin meet", "font-size": 10, "font-family": "sans-serif"}, pic);
      svg.style.maxWidth = W + "px"; svg.style.display = "block";
      var defs = s("defs", {}, svg), pid = uid + "-hatch", cid = uid + "-cross";
      var p1 = s("pattern", {id: pid, width: 6, height: 6, patternUnits: "userSpaceOnUse"}, defs);
      s("path", {d: "M0,6 L6,0", stroke: C.skipped, "stroke-width": 1}, p1);
      var p2 = s("pattern", {id: cid, width: 6, height: 6, patternUnits: "userSpaceOnUse"}, defs);
      s("path", {d: "M0,6 L6,0 M0,0 L6,6", stroke: "#444", "stroke-width": 0.8}, p2);
      names.forEach(function (n) { s("text", {x: left - 6, y: yOf(n) + 12, "text-anchor": "end"}, svg, n); });
      for (i = 0; i < c.segments; i++) {
        var x0 = x(base + i * c.file_size), x1 = x(base + (i + 1) * c.file_size), y0 = yOf("segment " + i) + 2;
        if (st.chosen !== null && i < st.chosen)
          s("rect", {x: x0, y: y0, width: x1 - x0, height: H - 4, fill: "url(#" + pid + ")"}, svg);
        var chosen = i === st.chosen;
        s("rect", {x: x0, y: y0, width: x1 - x0, height: H - 4, fill: "none", stroke: chosen ? C.chosen : "#000",
                   "stroke-width": chosen ? 2.5 : 0.8, "class": chosen ? "mqx-chosen" : ""}, svg);
        if (i in st.checked)
          s("text", {x: x1 + 4, y: y0 + 11, fill: st.checked[i] ? C.chosen : C.bad, "font-weight": 700,
                     "class": st.checked[i] ? "mqx-tick" : "mqx-cross"}, svg, st.checked[i] ? "\u2713" : "\u2717");
      }
      c.before.records.forEach(function (rec) {          // a bad one: see-through, its neighbours' edges show
        var m = rec[2] ? mark(rec[0], rec[1]) : [x(rec[0]), Math.max(0.5, x(rec[0] + rec[1]) - x(rec[0]))];
        s("rect", {x: m[0], y: yOf(rowOf(rec[0])) + 3, width: m[1], height: H - 6, fill: rec[2] ? C.bad : "none",
                   "fill-opacity": rec[2] ? 0.45 : 1, stroke: rec[2] ? C.bad : "#888", "stroke-width": rec[2] ? 0.8 : 0.3,
                   "class": rec[2] ? "mqx-bad-before" : ""}, svg);
      });
      st.walked.forEach(function (w) {
        s("rect", {x: x(w[0]), y: yOf(rowOf(w[0])) + 3, width: Math.max(0.5, x(w[0] + w[1]) - x(w[0])), height: H - 6,
                   fill: C.walked, stroke: "#fff", "stroke-width": 0.3, "class": "mqx-walked"}, svg);
      });
      if (st.cut !== null) {                 // the cut tail of its segment, and every later segment (deleted)
        for (i = 0; i < c.segments; i++) {
          var from = Math.max(st.cut, base + i * c.file_size), to = base + (i + 1) * c.file_size;
          if (from < to) {
            s("rect", {x: x(from), y: yOf("segment " + i) + 2, width: x(to) - x(from), height: H - 4,
                       fill: "#fff", stroke: "#444", "stroke-width": 0.8}, svg);
            s("rect", {x: x(from), y: yOf("segment " + i) + 2, width: x(to) - x(from), height: H - 4,
                       fill: "url(#" + cid + ")", "class": "mqx-cut"}, svg);
          }
        }
      }
      st.bad.forEach(function (w) {           // over the cut: the walk stopped here (the walked records end before it)
        var m = mark(w[0], w[1]);
        s("rect", {x: m[0], y: yOf(rowOf(w[0])) + 3, width: m[1], height: H - 6, fill: C.bad, stroke: "#fff",
                   "stroke-width": 0.5, "class": "mqx-bad"}, svg);
      });
      var reached = -1;
      st.walked.forEach(function (w) { reached = Math.max(reached, w[0] + w[1]); });
      function units(name, old, now, goneFrom) {
        var y = yOf(name), keep = {};
        old.forEach(function (o) {
          var gone = goneFrom !== null && o >= goneFrom;
          if (!gone) keep[o] = 1;
          s("line", {x1: x(o), x2: x(o), y1: y + 1, y2: y + H / 2, stroke: gone ? C.dropped : C.kept,
                     "stroke-width": 1.2, "class": gone ? "mqx-gone" : "mqx-kept"}, svg);
        });
        now.forEach(function (o) {
          if (o < reached && !keep[o]) {
            var cx = x(o), cy = y + H - 5;
            s("path", {d: "M" + (cx - 3) + "," + cy + "h6M" + cx + "," + (cy - 3) + "v6", stroke: C.redisp,
                       "stroke-width": 2, "class": "mqx-redisp"}, svg);
          }
        });
      }
      queues.forEach(function (q) { units(q, c.before.queues[q] || [], r.after.queues[q] || [], st.cqCut); });
      units("index", c.before.index, r.after.index, st.dropped);
      var yAxis = top + names.length * H + 12;
      for (i = 0; i <= c.segments; i++)
        s("text", {x: x(base + i * c.file_size), y: yAxis, "text-anchor": "middle", fill: "#555"}, svg,
          num(base + i * c.file_size));
      log.textContent = "";
      var first = Math.max(0, upto - 6);
      evs.slice(first, upto).forEach(function (e, k) {
        log.appendChild(el("div", first + k + 1 === upto ? "mqx-result" : "", (first + k + 1) + ". " + describe(e)));
      });
      if (!upto) log.appendChild(el("div", "mqx-note", "before recovery: the files the crash left"));
      showVerdict(upto);
      var ds = root.dataset;
      ds.step = upto; ds.title = st.title; ds.start = st.chosen === null ? "" : st.chosen;
      ds.cut = st.cut === null ? "" : st.cut;
      ds.walked = st.walked.length; ds.bad = st.bad.length;
    }
    crash.addEventListener("input", pick);
    fault.addEventListener("change", pick);
    rule.addEventListener("change", pick);
    step.addEventListener("input", draw);
    prev.addEventListener("click", function () { step.value = Math.max(0, +step.value - 1); draw(); });
    next.addEventListener("click", function () { step.value = Math.min(+step.max, +step.value + 1); draw(); });
    pick();
    root.mqxData = data;
    root.dataset.ready = "1";
  };
})();
