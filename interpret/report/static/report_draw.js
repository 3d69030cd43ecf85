/* transformer-audit report, part 1 of 3: drawing primitives that know nothing of the report's data.
 * Text reaches the page only through textContent, attribute setters and canvas fillText, never as HTML. */
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var MONO = "ui-monospace, Menlo, Consolas, monospace";

  /* ---------- DOM helpers ---------- */

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, String(attrs[key])); });
    return node;
  }

  function clear(node) {
    while (node.firstChild) { node.removeChild(node.firstChild); }
  }

  function fmt(value) {
    if (value === null || value === undefined || isNaN(value)) { return "NaN"; }
    return String(Number(value.toPrecision(4)));
  }

  function range(n) {
    var out = [];
    for (var i = 0; i < n; i++) { out.push(i); }
    return out;
  }

  function clamp(x, lo, hi) { return Math.max(lo, Math.min(hi, x)); }

  /* `text` cut to n characters with an ellipsis; never between the two halves of a surrogate pair (an emoji). */
  function truncate(text, n) {
    if (text.length <= n) { return text; }
    var end = n - 1;
    var last = text.charCodeAt(end - 1);
    if (last >= 0xd800 && last <= 0xdbff) { end -= 1; }
    return text.slice(0, end) + "…";
  }

  /* The longest token label drawn whole; a longer one is cut with an ellipsis (its whole text is on hover). */
  var LABEL_LIMIT = 40;

  function shorten(text) { return truncate(String(text), LABEL_LIMIT); }

  /* Control characters, the bidi embeddings/overrides/isolates/marks, line and paragraph separators and lone
   * surrogates written as \xNN / \uNNNN, as interpret.reading.text.printable does: a token can then neither
   * reorder the labels around it nor hide itself. */
  var UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]/;

  function visible(text) {
    text = String(text);
    if (!UNSAFE.test(text)) { return text; }
    var out = "";
    for (var i = 0; i < text.length; i++) {
      var code = text.charCodeAt(i);
      var next = text.charCodeAt(i + 1);
      if (code >= 0xd800 && code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        out += text.slice(i, i + 2);  // a surrogate pair is one character (an emoji), kept
        i++;
      } else if (UNSAFE.test(text.charAt(i))) {
        out += code < 0x100 ? "\\x" + ("0" + code.toString(16)).slice(-2) : "\\u" + ("000" + code.toString(16)).slice(-4);
      } else {
        out += text.charAt(i);
      }
    }
    return out;
  }

  /* "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "102nd", "111th". */
  function ordinal(n) {
    var tens = n % 100;
    var suffix = tens >= 11 && tens <= 13 ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th");
    return n + suffix;
  }

  /* A <bdi> holding a token's label, cut to LABEL_LIMIT, with the whole raw token (control and bidi characters
   * escaped) as its title. <bdi> isolates the label's direction, so right-to-left text in one token cannot move
   * what comes after it. */
  function tokenLabel(label, raw) {
    var node = el("bdi", "tok", shorten(label));
    node.setAttribute("title", visible(raw === undefined || raw === null ? label : raw));
    return node;
  }

  /* ---------- colour ---------- */

  var SEQUENTIAL = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  var NEGATIVE = [[247, 247, 247], [146, 197, 222], [33, 102, 172]];
  var POSITIVE = [[247, 247, 247], [244, 165, 130], [178, 24, 43]];
  var MISSING = [205, 205, 205];
  var PALETTE = ["#1f5fa8", "#d1495b", "#2b7a3d", "#e09f3e", "#6c4ab6", "#00798c", "#8c564b", "#555"];

  function ramp(stops, t) {
    t = clamp(t, 0, 1) * (stops.length - 1);
    var i = Math.min(Math.floor(t), stops.length - 2);
    var f = t - i;
    return [0, 1, 2].map(function (c) { return Math.round(stops[i][c] + f * (stops[i + 1][c] - stops[i][c])); });
  }

  /* The colour scale of `values`: a diverging map around 0 for signed values (any below 0, or `signed`: a
   * signed method's scores, diverging even where every one is positive), else a sequential map.
   * `mode` "zero" (the default): colours start at 0 — 0 → maximum, or −m → +m with m the largest |value| when
   * signed — so a row whose values differ little looks uniform, as it is. "range": minimum → maximum (signed:
   * each side of 0 stretched to its own extreme), which shows small differences but exaggerates them. "sqrt":
   * like "zero" with √ of the position, stretching small values. Values outside the domain take the end
   * colours; `min` and `max` are the data's own range, which the legend prints. */
  function makeScale(values, mode, signed) {
    var lo = Infinity;
    var hi = -Infinity;
    values.forEach(function (v) { if (!isNaN(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    if (lo === Infinity) { lo = 0; hi = 0; }
    mode = mode === "range" || mode === "sqrt" ? mode : "zero";
    signed = signed === true || lo < 0;
    var negTop = signed ? (mode === "range" ? -lo : Math.max(-lo, hi)) : 0;
    var posTop = signed ? (mode === "range" ? Math.max(hi, 0) : Math.max(-lo, hi)) : hi;
    var bottom = signed ? -negTop : (mode === "range" ? lo : Math.min(0, lo));
    var bend = mode === "sqrt" ? Math.sqrt : function (t) { return t; };
    var scale = { signed: signed, lo: bottom, hi: posTop, min: lo, max: hi, mode: mode };
    function side(stops, v, top) { return top > 0 ? ramp(stops, bend(clamp(v / top, 0, 1))) : stops[0]; }
    scale.rgb = function (v) {
      if (isNaN(v)) { return MISSING; }
      if (signed) { return v < 0 ? side(NEGATIVE, -v, negTop) : side(POSITIVE, v, posTop); }
      if (posTop === bottom) { return v === 0 ? SEQUENTIAL[0] : SEQUENTIAL[SEQUENTIAL.length - 1]; }
      return ramp(SEQUENTIAL, bend(clamp((v - bottom) / (posTop - bottom), 0, 1)));
    };
    scale.css = function (v) { var c = scale.rgb(v); return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; };
    scale.ink = function (v) {
      var c = scale.rgb(v);
      return 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] < 140 ? "#fff" : "#111";
    };
    scale.describe = function () {
      if (signed) {
        return { zero: "diverging around 0, symmetric", range: "diverging around 0, each side to its extreme",
          sqrt: "diverging around 0, symmetric, √" }[mode];
      }
      return { zero: "0 → maximum", range: "minimum → maximum", sqrt: "0 → maximum, √ (small values stretched)" }[mode];
    };
    return scale;
  }

  function legend(parent, scale, note) {
    var box = el("div", "legend");
    var width = 160;
    var canvas = document.createElement("canvas");
    canvas.width = width;
    canvas.height = 12;
    var ctx = canvas.getContext("2d");
    for (var x = 0; x < width; x++) {
      ctx.fillStyle = scale.css(scale.lo + (x / (width - 1)) * (scale.hi - scale.lo));
      ctx.fillRect(x, 0, 1, 12);
    }
    box.appendChild(el("span", "end", fmt(scale.lo)));
    box.appendChild(canvas);
    box.appendChild(el("span", "end", fmt(scale.hi)));
    box.appendChild(el("span", "range", "values " + fmt(scale.min) + " to " + fmt(scale.max)));
    box.appendChild(el("span", null, "colours " + scale.describe() + (note ? " · " + note : "")));
    parent.appendChild(box);
  }

  /* ---------- a matrix on a canvas (cells, token labels, hover read-out) ---------- */

  function matrix(parent, rows, cols, get, scale, labels, status) {
    var n = Math.max(rows.length, cols.length, 1);
    var cell = clamp(Math.floor(880 / n), 2, 26);
    // Label every token when cells are tall enough for text, else every `step`-th one.
    var step = Math.ceil(11 / cell);
    var withLabels = true;
    var fontPx = clamp(cell - 1, 9, 12);
    var font = fontPx + "px " + MONO;
    var probe = document.createElement("canvas").getContext("2d");
    probe.font = font;
    function widest(indices, label) {
      var w = 0;
      indices.forEach(function (i, k) { if (k % step === 0) { w = Math.max(w, probe.measureText(truncate(label(i), 18)).width); } });
      return Math.ceil(w);
    }
    var left = withLabels ? Math.min(170, widest(rows, labels.row) + 8) : 2;
    var top = withLabels ? Math.min(130, widest(cols, labels.col) + 8) : 2;
    var width = left + cols.length * cell + 2;
    var height = top + rows.length * cell + 2;
    var ratio = window.devicePixelRatio || 1;
    var canvas = document.createElement("canvas");
    canvas.className = "matrix";
    canvas.width = Math.ceil(width * ratio);
    canvas.height = Math.ceil(height * ratio);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", labels.name);
    var ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, width, height);
    rows.forEach(function (r, y) {
      cols.forEach(function (c, x) {
        ctx.fillStyle = scale.css(get(r, c));
        ctx.fillRect(left + x * cell, top + y * cell, cell, cell);
      });
    });
    if (withLabels) {
      ctx.fillStyle = "#1d2330";
      ctx.font = font;
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      rows.forEach(function (r, y) { if (y % step === 0) { ctx.fillText(truncate(labels.row(r), 18), left - 4, top + (y + 0.5) * cell); } });
      cols.forEach(function (c, x) {
        if (x % step !== 0) { return; }
        ctx.save();
        ctx.translate(left + (x + 0.5) * cell, top - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(truncate(labels.col(c), 18), 0, 0);
        ctx.restore();
      });
    }
    var hint = labels.rowName + " (rows) × " + labels.colName + " (columns)" + (step > 1 ? " · every " + ordinal(step) + " label shown" : "") + " · hover to read a cell";
    status.textContent = hint;
    canvas.addEventListener("mousemove", function (event) {
      var box = canvas.getBoundingClientRect();
      var x = Math.floor((event.clientX - box.left - left) / cell);
      var y = Math.floor((event.clientY - box.top - top) / cell);
      if (x < 0 || y < 0 || x >= cols.length || y >= rows.length) { status.textContent = hint; return; }
      status.textContent = labels.rowName + " " + JSON.stringify(shorten(labels.row(rows[y]))) + " [" + rows[y] + "] → " +
        labels.colName + " " + JSON.stringify(shorten(labels.col(cols[x]))) + " [" + cols[x] + "]: " + fmt(get(rows[y], cols[x]));
    });
    canvas.addEventListener("mouseleave", function () { status.textContent = hint; });
    var scroller = el("div", "scroll");
    scroller.appendChild(canvas);
    parent.appendChild(scroller);
    return canvas;
  }

  function thumbnail(rows, cols, get, scale, size) {
    var raw = document.createElement("canvas");
    raw.width = Math.max(cols.length, 1);
    raw.height = Math.max(rows.length, 1);
    var rawCtx = raw.getContext("2d");
    var image = rawCtx.createImageData(raw.width, raw.height);
    rows.forEach(function (r, y) {
      cols.forEach(function (c, x) {
        var rgb = scale.rgb(get(r, c));
        var o = 4 * (y * raw.width + x);
        image.data[o] = rgb[0]; image.data[o + 1] = rgb[1]; image.data[o + 2] = rgb[2]; image.data[o + 3] = 255;
      });
    });
    rawCtx.putImageData(image, 0, 0);
    var canvas = document.createElement("canvas");
    var ratio = window.devicePixelRatio || 1;
    canvas.width = Math.ceil(size * ratio);
    canvas.height = Math.ceil(size * ratio);
    canvas.style.width = size + "px";
    canvas.style.height = size + "px";
    var ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(raw, 0, 0, canvas.width, canvas.height);
    return canvas;
  }

  window.AuditDraw = {
    SVG: SVG, PALETTE: PALETTE, el: el, svg: svg, clear: clear, fmt: fmt, range: range, clamp: clamp,
    truncate: truncate, shorten: shorten, visible: visible, ordinal: ordinal, tokenLabel: tokenLabel,
    LABEL_LIMIT: LABEL_LIMIT, makeScale: makeScale, legend: legend, matrix: matrix, thumbnail: thumbnail
  };
}());
