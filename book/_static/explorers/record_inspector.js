/* mqstore record inspector (chapter 3). Written for the book; no library, no network.
   data = {segments: [{name, size, b64, records: [{start, size, status, reason,
           fields: [[number of its name in names, offset in record, length, value]]}]}], names,
           field_names (RocketMQ's, for the chooser), colors: {field: [background, text]},
           groups: [[group, background]]}
   Everything shown comes from `data`: the bytes of a segment file and the engine's answers for them. */
(function () {
  "use strict";
  var X = window.mqstoreExplorers = window.mqstoreExplorers || {};

  X.b64bytes = X.b64bytes || function (s) {
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  };
  X.el = X.el || function (tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  function hex2(b) { return (b < 16 ? "0" : "") + b.toString(16); }

  X.recordInspector = function (root, data) {
    var el = X.el, WIDTH = 32;
    root.textContent = "";                    // the note shown until the script runs
    var controls = el("div", "mqx-controls");
    var segSel = el("select", "mqx-segment"), fieldSel = el("select", "mqx-field");
    var byteIn = el("input", "mqx-byte");
    byteIn.type = "number"; byteIn.min = 0; byteIn.step = 1; byteIn.style.width = "6em";
    data.segments.forEach(function (s, i) {
      var o = el("option", "", s.name + " (" + s.size + " bytes)"); o.value = i; segSel.appendChild(o);
    });
    var none = el("option", "", "(none)"); none.value = ""; fieldSel.appendChild(none);
    data.field_names.forEach(function (f) { var o = el("option", "", f); o.value = f; fieldSel.appendChild(o); });
    [["segment ", segSel], ["highlight field ", fieldSel], ["byte ", byteIn]].forEach(function (p) {
      var l = el("label", "", p[0]); l.appendChild(p[1]); controls.appendChild(l);
    });
    var summary = el("div", "mqx-note mqx-summary");
    var grid = el("div", "mqx-grid");
    var panel = el("div", "mqx-panel mqx-mono", "Point at a byte (or type its offset) to name its record and field.");
    var legend = el("div", "mqx-legend");
    data.groups.forEach(function (g) {
      var item = el("span"), sw = el("span", "mqx-sw"); sw.style.background = g[1];
      item.appendChild(sw); item.appendChild(document.createTextNode(g[0])); legend.appendChild(item);
    });
    [["mqx-filler", "blank: size + magic, the rest never read"], ["mqx-torn", "torn record"],
     ["mqx-unread", "after the stop: never read"]].forEach(function (g) {
      var item = el("span"), sw = el("span", "mqx-sw " + g[0]);
      item.appendChild(sw); item.appendChild(document.createTextNode(g[1])); legend.appendChild(item);
    });
    root.appendChild(controls); root.appendChild(summary); root.appendChild(grid);
    root.appendChild(legend); root.appendChild(panel);

    var seg, bytes, owner, spans, pinned = -1, current = -1;

    function describe(i) {
      var o = owner[i], r = seg.records[o[0]], f = r.fields[o[1]];
      return {record: o[0], status: r.status, reason: r.reason, start: r.start, size: r.size,
              field: data.names[f[0]], offset: f[1], length: f[2], value: String(f[3])};
    }
    function show(i) {
      if (current >= 0 && spans[current]) spans[current].classList.remove("mqx-cur");
      current = i;
      if (i < 0 || i >= bytes.length) { panel.textContent = "no byte " + i + " in this segment"; return; }
      spans[i].classList.add("mqx-cur");
      var d = describe(i);
      var end = d.start + d.size - 1;
      var what = d.status === "OK" ? "record " + d.record + " (counted from 0 in this file)"
        : "the stop after " + (d.record ? "record " + (d.record - 1) : "no record") + " (entry " + d.record + ")";
      panel.textContent =
        "byte " + i + " (0x" + i.toString(16) + ") = 0x" + hex2(bytes[i]) + "\n" +
        what + ": " + d.status + ", bytes " + d.start + "-" + end + " (size " + d.size + ")" +
        (d.reason ? " - " + d.reason : "") + "\n" +
        "field " + d.field + ": offset " + d.offset + " in the record (byte " + (d.start + d.offset) +
        " of the segment), length " + d.length + "\n" +
        "value: " + d.value;
      var ds = panel.dataset;
      ds.byte = i; ds.record = d.record; ds.status = d.status; ds.field = d.field;
      ds.offset = d.offset; ds.length = d.length; ds.value = d.value;
    }
    function highlight(name) {
      var n = 0, recs = 0;
      seg.records.forEach(function (r, ri) {
        r.fields.forEach(function (f, fi) {
          var on = name !== "" && data.names[f[0]] === name;
          if (on) recs++;
          for (var k = 0; k < f[2]; k++) {
            var s = spans[r.start + f[1] + k];
            if (!s) continue;
            if (on) { s.classList.add("mqx-hl"); n++; } else s.classList.remove("mqx-hl");
          }
        });
      });
      summary.dataset.records = recs; summary.dataset.bytes = n;
      var ok = seg.records.filter(function (r) { return r.status === "OK"; }).length;
      var stop = seg.records.length > ok ? seg.records[seg.records.length - 1] : null;
      var walked = ok + " record" + (ok === 1 ? "" : "s") + " (numbered 0 to " + (ok - 1) + ")" +
        (stop ? ", then " + stop.status + " at byte " + stop.start + " (" + stop.size + " bytes)" : "") +
        ": " + seg.records.length + " entries walked by check_record";
      summary.dataset.ok = ok;
      summary.textContent = name === "" ? walked + "; choose a field to highlight it in every record"
        : name + " highlighted in " + recs + " record" + (recs === 1 ? "" : "s") + ": " + n + " bytes";
    }
    function render() {
      seg = data.segments[+segSel.value];
      bytes = X.b64bytes(seg.b64);
      owner = new Array(bytes.length); spans = new Array(bytes.length);
      seg.records.forEach(function (r, ri) {
        r.fields.forEach(function (f, fi) {
          for (var k = 0; k < f[2]; k++) owner[r.start + f[1] + k] = [ri, fi];
        });
      });
      grid.textContent = ""; pinned = -1; current = -1;
      var frag = document.createDocumentFragment(), row;
      for (var i = 0; i < bytes.length; i++) {
        if (i % WIDTH === 0) {
          row = el("div", "mqx-row"); row.appendChild(el("span", "mqx-off", String(i))); frag.appendChild(row);
        }
        var s = el("span", "mqx-b", hex2(bytes[i])), o = owner[i], r = seg.records[o[0]], f = r.fields[o[1]];
        s.dataset.i = i;
        var c = data.colors[data.names[f[0]]];
        if (r.status === "TORN") s.classList.add("mqx-torn");
        else if (c) { s.style.background = c[0]; s.style.color = c[1]; }
        else if (r.status === "BLANK") s.classList.add("mqx-filler");
        else s.classList.add("mqx-unread");
        if (i === r.start) s.classList.add("mqx-start");
        spans[i] = s; row.appendChild(s);
      }
      grid.appendChild(frag);
      byteIn.max = bytes.length - 1;
      highlight(fieldSel.value);
      if (byteIn.value !== "") {          // a typed offset stays, clamped to this segment's bytes, and pinned
        pinned = Math.max(0, Math.min(bytes.length - 1, Math.floor(+byteIn.value) || 0));
        byteIn.value = pinned; show(pinned);
      } else panel.textContent = "Point at a byte (or type its offset) to name its record and field.";
    }
    grid.addEventListener("mouseover", function (ev) {
      var i = ev.target.dataset && ev.target.dataset.i;
      if (i !== undefined && pinned < 0) show(+i);
    });
    grid.addEventListener("click", function (ev) {
      var i = ev.target.dataset && ev.target.dataset.i;
      if (i === undefined) return;
      pinned = pinned === +i ? -1 : +i;
      show(+i);
    });
    byteIn.addEventListener("input", function () {
      if (byteIn.value === "") { pinned = -1; return; }      // back to following the pointer
      pinned = +byteIn.value; show(pinned);
    });
    segSel.addEventListener("change", render);
    fieldSel.addEventListener("change", function () { highlight(fieldSel.value); });
    render();
    root.mqxData = data;                 // what the page was fed, for tests and the curious
    root.dataset.ready = "1";
  };
})();
