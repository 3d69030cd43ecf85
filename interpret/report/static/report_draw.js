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

  function truncate(text, n) { return text.length > n ? text.slice(0, n - 1) + "…" : text; }

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

  /* A diverging map around 0 for signed values, else a sequential map. `mode` picks the sequential range
   * ("range": minimum → maximum, "zero": 0 → maximum) and "sqrt" stretches small values (√ of the position
   * in the range). The domain comes from `values`; values outside it take the end colours. */
  function makeScale(values, mode) {
    var lo = Infinity;
    var hi = -Infinity;
    values.forEach(function (v) { if (!isNaN(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    if (lo === Infinity) { lo = 0; hi = 0; }
    var signed = lo < 0;
    var top = signed ? Math.max(-lo, hi) : hi;
    var bottom = signed ? -top : (mode === "zero" || mode === "sqrt" ? Math.min(0, lo) : lo);
    var bend = mode === "sqrt" ? Math.sqrt : function (t) { return t; };
    var scale = { signed: signed, lo: bottom, hi: top, mode: mode };
    scale.rgb = function (v) {
      if (isNaN(v)) { return MISSING; }
      if (top === bottom) { return signed ? NEGATIVE[0] : SEQUENTIAL[SEQUENTIAL.length - 1]; }
      if (signed) { return v < 0 ? ramp(NEGATIVE, bend(clamp(-v / top, 0, 1))) : ramp(POSITIVE, bend(clamp(v / top, 0, 1))); }
      return ramp(SEQUENTIAL, bend(clamp((v - bottom) / (top - bottom), 0, 1)));
    };
    scale.css = function (v) { var c = scale.rgb(v); return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; };
    scale.ink = function (v) {
      var c = scale.rgb(v);
      return 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] < 140 ? "#fff" : "#111";
    };
    scale.describe = function () {
      if (signed) { return "diverging around 0" + (mode === "sqrt" ? ", √" : ""); }
      return { range: "minimum → maximum", zero: "0 → maximum", sqrt: "0 → maximum, √ (small values stretched)" }[mode];
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
    box.appendChild(el("span", null, fmt(scale.lo)));
    box.appendChild(canvas);
    box.appendChild(el("span", null, fmt(scale.hi)));
    box.appendChild(el("span", null, scale.describe() + (note ? " · " + note : "")));
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
    var hint = labels.rowName + " (rows) × " + labels.colName + " (columns)" + (step > 1 ? " · every " + step + "th label shown" : "") + " · hover to read a cell";
    status.textContent = hint;
    canvas.addEventListener("mousemove", function (event) {
      var box = canvas.getBoundingClientRect();
      var x = Math.floor((event.clientX - box.left - left) / cell);
      var y = Math.floor((event.clientY - box.top - top) / cell);
      if (x < 0 || y < 0 || x >= cols.length || y >= rows.length) { status.textContent = hint; return; }
      status.textContent = labels.rowName + " " + JSON.stringify(labels.row(rows[y])) + " [" + rows[y] + "] → " +
        labels.colName + " " + JSON.stringify(labels.col(cols[x])) + " [" + cols[x] + "]: " + fmt(get(rows[y], cols[x]));
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
    truncate: truncate, makeScale: makeScale, legend: legend, matrix: matrix, thumbnail: thumbnail
  };
}());
