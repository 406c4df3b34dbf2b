/* mqstore index chain follower (chapter 6). Written for the book; no library, no network.
   data = {b64: the index file's bytes (its all-zero tail left off), file_size, slot_num, index_num,
           topic, key}. The page hashes `topic#key` as RocketMQ does and walks the chain through the
   file's bytes, as IndexFile.select_phy_offsets does (whole time range, at most 64 offsets). */
(function () {
  "use strict";
  var X = window.mqstoreExplorers = window.mqstoreExplorers || {};
  var HEADER = 40, SLOT = 4, ENTRY = 20, MAX_NUM = 64, MIN_INT = -2147483648;

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
  /* Java's String.hashCode: h = 31*h + c over the UTF-16 code units (a JS string is UTF-16), int32 overflow */
  X.javaStringHash = function (s) {
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (Math.imul(31, h) + s.charCodeAt(i)) | 0;
    return h;
  };
  /* IndexFile.indexKeyHashMethod: Math.abs of the hash; abs(Integer.MIN_VALUE) stays negative in Java,
     and RocketMQ maps it to 0 */
  X.indexKeyHash = function (s) {
    var h = X.javaStringHash(s);
    return h === MIN_INT ? 0 : Math.abs(h);
  };
  function hex(bytes, from, n) {
    var out = [];
    for (var i = from; i < from + n; i++) out.push((bytes[i] < 16 ? "0" : "") + bytes[i].toString(16));
    return out.join("");
  }
  function entryHex(bytes, at) {          // keyHash, phyOffset, timeDiff, prev
    return [hex(bytes, at, 4), hex(bytes, at + 4, 8), hex(bytes, at + 12, 4), hex(bytes, at + 16, 4)].join(" ");
  }

  X.indexFile = function (data) {
    var raw = X.b64bytes(data.b64), bytes = new Uint8Array(data.file_size);
    bytes.set(raw);
    var dv = new DataView(bytes.buffer), f = {bytes: bytes, slotNum: data.slot_num, indexNum: data.index_num};
    f.beginTs = dv.getBigInt64(0); f.endTs = dv.getBigInt64(8);
    f.slotCount = dv.getInt32(32); f.count = dv.getInt32(36);
    if (f.count <= 0) f.count = 1;                      // a header never written: empty
    f.entriesAt = HEADER + f.slotNum * SLOT;
    f.slotAt = function (keyHash) { return HEADER + (keyHash % f.slotNum) * SLOT; };
    f.slotValue = function (keyHash) {
      var v = dv.getInt32(f.slotAt(keyHash));
      return (v <= 0 || v >= f.count) ? 0 : v;
    };
    f.entry = function (n) {
      var at = f.entriesAt + n * ENTRY;
      return {n: n, at: at, hash: dv.getInt32(at), phy: dv.getBigInt64(at + 4), diff: dv.getInt32(at + 12),
              prev: dv.getInt32(at + 16), hex: entryHex(bytes, at)};
    };
    /* select_phy_offsets(keyHash, 0, 2**62): the entries visited, the offsets found, why the walk ended */
    f.walk = function (keyHash) {
      var out = {steps: [], offsets: [], slot: keyHash % f.slotNum, slotAt: f.slotAt(keyHash),
                 slotRaw: dv.getInt32(f.slotAt(keyHash)), head: f.slotValue(keyHash)};
      var n = out.head;
      if (n === 0 || f.count <= 1) {
        out.reason = out.slotRaw === 0 ? "slot " + out.slot + " is empty: no key of this file hashes there"
          : "slot " + out.slot + " holds " + out.slotRaw + ", not an entry of 1.." + (f.count - 1) + ": read as empty";
        return out;
      }
      for (var k = 0; k < f.count - 1; k++) {
        if (out.offsets.length >= MAX_NUM) { out.reason = "stopped at " + MAX_NUM + " offsets"; return out; }
        var e = f.entry(n);
        if (e.diff < 0) { out.reason = "entry " + n + " has a negative timeDiff: the walk stops"; return out; }
        e.match = e.hash === keyHash;
        out.steps.push(e);
        if (e.match) out.offsets.push(e.phy.toString());
        if (e.prev <= 0) { out.reason = "entry " + n + " has prev 0: the end of the chain"; return out; }
        if (e.prev >= f.count || e.prev === n) {
          out.reason = "entry " + n + " has prev " + e.prev + ", not a later step of a chain: the walk stops";
          return out;
        }
        n = e.prev;
      }
      out.reason = "walked indexCount - 1 = " + (f.count - 1) + " entries, the most a chain can hold";
      return out;
    };
    return f;
  };

  X.indexChain = function (root, data) {
    var el = X.el, f = X.indexFile(data);
    root.textContent = "";                    // the note shown until the script runs
    var controls = el("div", "mqx-controls");
    var topicIn = el("input", "mqx-topic"), keyIn = el("input", "mqx-key");
    topicIn.value = data.topic; keyIn.value = data.key;
    topicIn.size = 14; keyIn.size = 18; topicIn.spellcheck = keyIn.spellcheck = false;
    [["topic ", topicIn], ["key ", keyIn]].forEach(function (p) {
      var l = el("label", "", p[0]); l.appendChild(p[1]); controls.appendChild(l);
    });
    controls.appendChild(el("span", "mqx-note", "file: " + f.slotNum + " slots, " + f.indexNum + " entries, indexCount " +
                            f.count + " (entries 1.." + (f.count - 1) + " used)"));
    var hashBox = el("div", "mqx-mono mqx-hash");
    var slotLabel = el("div", "mqx-note", "slots (grey: holds a chain head)"), slots = el("div", "mqx-strip mqx-slots");
    var entLabel = el("div", "mqx-note", "entries in the order they were written (green: the hash matches; vermillion: another key, same slot)");
    var ents = el("div", "mqx-strip mqx-entries");
    var result = el("div", "mqx-result");
    var table = el("table", "mqx-steps");
    [controls, hashBox, slotLabel, slots, entLabel, ents, result, table].forEach(function (e) { root.appendChild(e); });

    var slotCells = [], entCells = [];
    for (var s = 0; s < f.slotNum; s++) {
      var c = el("div", "mqx-cell"); c.title = "slot " + s;
      if (f.slotValue(s) !== 0) c.classList.add("mqx-used");
      slotCells.push(c); slots.appendChild(c);
    }
    for (var n = 1; n < f.count; n++) {
      var e = el("div", "mqx-cell", String(n)); e.title = "entry " + n; entCells[n] = e; ents.appendChild(e);
    }

    function update() {
      var key = topicIn.value + "#" + keyIn.value;
      var jh = X.javaStringHash(key), kh = X.indexKeyHash(key), w = f.walk(kh);
      hashBox.textContent =
        "hashed: " + JSON.stringify(key) + " (" + key.length + " UTF-16 units)\n" +
        "String.hashCode = " + jh + (jh === MIN_INT ? " = Integer.MIN_VALUE, whose abs is still negative: keyHash 0"
                                       : ", abs: keyHash " + kh) + "\n" +
        "slot = " + kh + " % " + f.slotNum + " = " + w.slot + "; its 4 bytes at " + w.slotAt + ": " +
        hex(f.bytes, w.slotAt, 4) + " = " + w.slotRaw + (w.head ? " -> entry " + w.head : "");
      hashBox.style.whiteSpace = "pre-wrap";
      slotCells.forEach(function (c, i) { c.classList.toggle("mqx-slot", i === w.slot); });
      entCells.forEach(function (c) { if (c) c.classList.remove("mqx-match", "mqx-collide"); });
      table.textContent = "";
      var head = el("tr");
      ["step", "entry", "at byte", "20 bytes", "keyHash", "phyOffset", "timeDiff", "prev", ""].forEach(function (h) {
        head.appendChild(el("th", "", h));
      });
      table.appendChild(head);
      w.steps.forEach(function (e, i) {
        if (entCells[e.n]) entCells[e.n].classList.add(e.match ? "mqx-match" : "mqx-collide");
        var tr = el("tr", e.match ? "mqx-match" : "mqx-collide");
        [i + 1, e.n, e.at, e.hex, e.hash, e.phy.toString(), e.diff, e.prev,
         e.match ? "match: collected" : "other key: skipped"].forEach(function (v, j) {
          tr.appendChild(el("td", j === 3 ? "mqx-hex" : "", String(v)));
        });
        table.appendChild(tr);
      });
      var found = w.offsets.length ? "found " + w.offsets.length + " offset" + (w.offsets.length > 1 ? "s" : "") +
        ": " + w.offsets.join(", ") : "no entry found";
      var collisions = w.steps.filter(function (e) { return !e.match; }).length;
      result.textContent = found + " (" + w.steps.length + " entries walked, " + collisions + " of other keys); " + w.reason;
      var ds = root.dataset;
      ds.hash = kh; ds.javaHash = jh; ds.slot = w.slot; ds.head = w.head;
      ds.chain = w.steps.map(function (e) { return e.n; }).join(",");
      ds.matches = w.steps.filter(function (e) { return e.match; }).map(function (e) { return e.n; }).join(",");
      ds.offsets = w.offsets.join(",");
    }
    topicIn.addEventListener("input", update);
    keyIn.addEventListener("input", update);
    update();
    root.mqxData = data;                 // what the page was fed, for tests and the curious
    root.dataset.ready = "1";
  };
})();
