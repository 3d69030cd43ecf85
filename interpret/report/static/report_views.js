/* transformer-audit report, part 2 of 3: the report's data (the JSON block) and the views drawn from it.
 * Each view function draws one View an analyzer asked for into view.body, with pickers in view.controls.
 *
 * Tokens are labelled by their display form when the data has one — examples[b].display_tokens,
 * examples[b].decoder_display_tokens and examples[b].image_display_tokens (a dual encoder's class token and
 * patches), [pos] strings as interpret.reading.text.display_tokens writes them — else by the raw token; either
 * way with control and bidi characters escaped, cut to LABEL_LIMIT characters, and the raw token on hover. */
(function () {
  "use strict";

  var D = window.AuditDraw;
  var el = D.el, svg = D.svg, clear = D.clear, fmt = D.fmt, range = D.range, clamp = D.clamp;
  var makeScale = D.makeScale, legend = D.legend, matrix = D.matrix;
  var thumbnail = D.thumbnail, PALETTE = D.PALETTE;
  var shorten = D.shorten, visible = D.visible, tokenLabel = D.tokenLabel;
  var DATA = JSON.parse(document.getElementById("report-data").textContent);
  var state = { example: 0 };

  /* ---------- arrays ---------- */

  function decoded(spec) {
    if (spec.values) { return spec.values; }
    var n = spec.shape.reduce(function (a, b) { return a * b; }, 1);
    var out = new Float64Array(n);
    if (spec.encoding === "u16") {
      // 16-bit little-endian fixed point over [lo, hi]; 65535 marks a value that was NaN or infinite.
      var bytes = atob(spec.data);
      var span = spec.hi - spec.lo;
      for (var i = 0; i < n; i++) {
        var q = bytes.charCodeAt(2 * i) | (bytes.charCodeAt(2 * i + 1) << 8);
        out[i] = q === 65535 ? NaN : spec.lo + (q / 65534) * span;
      }
    } else {
      for (var j = 0; j < n; j++) { out[j] = spec.data[j] === null ? NaN : spec.data[j]; }
    }
    spec.strides = [];
    var stride = 1;
    for (var k = spec.shape.length - 1; k >= 0; k--) { spec.strides[k] = stride; stride *= spec.shape[k]; }
    spec.values = out;
    return out;
  }

  /* Returns get(i, j, ...) over the free axes (positions), the other axes fixed by `fixed` (position → index). */
  function accessor(spec, fixed, free) {
    var values = decoded(spec);
    var base = 0;
    spec.axes.forEach(function (axis, k) {
      if (free.indexOf(k) < 0) { base += (fixed[k] || 0) * spec.strides[k]; }
    });
    var strides = free.map(function (k) { return spec.strides[k]; });
    return function () {
      var offset = base;
      for (var a = 0; a < arguments.length; a++) { offset += arguments[a] * strides[a]; }
      return values[offset];
    };
  }

  function hasBatch(spec) { return spec.axes[0] === "batch"; }

  /* An example's tokens on one side: raw `tokens`, `display` forms (the raw tokens when the data has none, or
   * a list of another length), `special` and `real` flags. */
  function sideTokens(side, example) {
    var ex = DATA.examples[example === undefined ? state.example : example];
    var prefix = side === "decoder" || side === "image" ? side + "_" : "";
    var tokens = ex[prefix + "tokens"] || [];
    var display = ex[prefix + "display_tokens"];
    return {
      tokens: tokens,
      display: Array.isArray(display) && display.length === tokens.length ? display : tokens,
      special: ex[prefix + "special"] || [],
      real: ex[prefix + "real"] || []
    };
  }

  function tokenSide(spec, k) { return spec.tokens[spec.axes[k]] || null; }

  /* The indices shown along an axis: the real (unpadded) positions of a token axis, else all. */
  function shownIndices(spec, k) {
    var side = tokenSide(spec, k);
    var n = spec.shape[k];
    if (!side) { return range(n); }
    var t = sideTokens(side);
    if (t.real.length !== n) { return range(n); }
    return range(n).filter(function (i) { return t.real[i]; });
  }

  /* The label of index i on axis k, whole: a token's display form (escaped), a coordinate, or the index. */
  function tickLabel(spec, k, i) {
    var axis = spec.axes[k];
    var side = tokenSide(spec, k);
    if (side) {
      var t = sideTokens(side);
      if (i < t.tokens.length) { return visible(t.display[i]); }
    }
    if (spec.coords[axis]) { return String(spec.coords[axis][i]); }
    return String(i);
  }

  /* The raw token at index i of a token axis (null on other axes). */
  function rawToken(spec, k, i) {
    var side = tokenSide(spec, k);
    if (!side) { return null; }
    var t = sideTokens(side);
    return i < t.tokens.length ? t.tokens[i] : null;
  }

  /* A label with its position or axis name, the token cut to LABEL_LIMIT: "cat [3]", "layer 2". */
  function longLabel(spec, k, i) {
    var axis = spec.axes[k];
    if (tokenSide(spec, k)) { return shorten(tickLabel(spec, k, i)) + " [" + i + "]"; }
    if (axis === "row") { return "readout row " + i; }
    return axis + " " + shorten(tickLabel(spec, k, i));
  }

  /* What a hover shows for index i: the whole raw token (escaped) and its position, else the long label. */
  function hoverLabel(spec, k, i) {
    var raw = rawToken(spec, k, i);
    return raw === null ? longLabel(spec, k, i) : visible(raw) + " [" + i + "]";
  }

  /* A table cell or legend entry for index i: a token as an isolated, cut label (raw token on hover) and its
   * position; other axes as plain text. */
  function labelNode(tag, spec, k, i) {
    var node = el(tag);
    var raw = rawToken(spec, k, i);
    if (raw === null) {
      node.textContent = longLabel(spec, k, i);
      return node;
    }
    node.appendChild(tokenLabel(tickLabel(spec, k, i), raw));
    node.appendChild(document.createTextNode(" [" + i + "]"));
    return node;
  }

  function isSpecial(spec, k, i) {
    var side = tokenSide(spec, k);
    if (!side) { return false; }
    var t = sideTokens(side);
    return Boolean(t.special[i]);
  }

  /* Colours start at 0 by default (symmetric around 0 for signed values); min → max is a choice. */
  var SCALE_MODES = [["zero", "from 0"], ["range", "min → max"], ["sqrt", "√, from 0"]];
  var DEFAULT_SCALE = "zero";

  /* Adds the colour-scale picker to a view's controls; returns the chosen mode. */
  function scaleControl(view) {
    var mode = view.picks.scale || DEFAULT_SCALE;
    var label = el("label", null, "colour ");
    var select = el("select");
    SCALE_MODES.forEach(function (pair) {
      var option = el("option", null, pair[1]);
      option.value = pair[0];
      option.selected = pair[0] === mode;
      select.appendChild(option);
    });
    select.className = "scale";
    select.addEventListener("change", function () { view.picks.scale = select.value; view.render(); });
    label.appendChild(select);
    view.controls.appendChild(label);
    return mode;
  }

  /* The values that set a colour domain: those away from special tokens when there are any (a [CLS] or
   * [SEP] that soaks up attention would otherwise wash every other cell out). */
  function domainValues(cells) {
    var plain = cells.filter(function (cell) { return !cell.special; });
    return (plain.length ? plain : cells).map(function (cell) { return cell.value; });
  }

  /* ---------- pickers for the axes a view does not draw ---------- */

  function pickers(view, spec, drawn, defaults) {
    var fixed = {};
    spec.axes.forEach(function (axis, k) {
      if (drawn.indexOf(k) >= 0) { return; }
      if (k === 0 && hasBatch(spec)) { fixed[k] = state.example; return; }
      var shown = shownIndices(spec, k);
      var key = axis + ":" + k;
      var chosen = view.picks[key];
      if (shown.indexOf(chosen) < 0) { chosen = shown.indexOf(defaults[k]) >= 0 ? defaults[k] : shown[0]; }
      fixed[k] = chosen;
      if (shown.length < 2) { return; }
      var label = el("label", null, axis + " ");
      var select = el("select");
      shown.forEach(function (i) {
        var option = el("option", null, longLabel(spec, k, i));
        option.value = String(i);
        option.selected = i === chosen;
        select.appendChild(option);
      });
      select.addEventListener("change", function () {
        view.picks[key] = Number(select.value);
        view.render();
      });
      label.appendChild(select);
      view.controls.appendChild(label);
      view.controls.appendChild(el("span", "printed", longLabel(spec, k, chosen)));
    });
    return fixed;
  }

  /* The default index of a `row` axis (a readout row: options.row, else 0) or a `query` axis (options.row,
   * "readout" meaning the analyzer's readout position). */
  function readoutDefault(view, spec, k) {
    var option = view.options.row;
    if (spec.axes[k] === "row") { return typeof option === "number" ? option : 0; }
    if (spec.axes[k] !== "query") { return undefined; }
    if (option === "readout") {
      var positions = view.section.readout[state.example] || [];
      return positions.length ? positions[0] : undefined;
    }
    return typeof option === "number" ? (option < 0 ? spec.shape[k] + option : option) : undefined;
  }

  /* ---------- the views ---------- */

  function drawStrip(view, spec) {
    var last = spec.axes.length - 1;
    var defaults = {};
    spec.axes.forEach(function (axis, k) { if (k !== last) { defaults[k] = readoutDefault(view, spec, k); } });
    var fixed = pickers(view, spec, [last], defaults);
    var free = [last];
    var get = accessor(spec, fixed, free);
    var shown = shownIndices(spec, last);
    var plain = shown.filter(function (i) { return !isSpecial(spec, last, i); });
    var scale = makeScale(domainValues(shown.map(function (i) { return { value: get(i), special: isSpecial(spec, last, i) }; })), scaleControl(view), view.options.signed_scores);
    var strip = el("div", "strip");
    shown.forEach(function (i) {
      var value = get(i);
      var token = el("span", "t" + (isSpecial(spec, last, i) ? " special" : ""), shorten(tickLabel(spec, last, i)));
      token.style.backgroundColor = scale.css(value);
      token.style.color = scale.ink(value);
      token.setAttribute("title", hoverLabel(spec, last, i) + ": " + fmt(value) + (isSpecial(spec, last, i) ? " (special token)" : ""));
      strip.appendChild(token);
    });
    view.body.appendChild(strip);
    legend(view.body, scale, plain.length && plain.length < shown.length ? "range of the non-special tokens" : "");
  }

  function drawHeatmap(view, spec) {
    var rowAxis = spec.axes.length - 2;
    var colAxis = spec.axes.length - 1;
    var fixed = pickers(view, spec, [rowAxis, colAxis], {});
    var get = accessor(spec, fixed, [rowAxis, colAxis]);
    var rows = shownIndices(spec, rowAxis);
    var cols = shownIndices(spec, colAxis);
    var scale = makeScale(matrixDomain(spec, rowAxis, colAxis, rows, cols, get), scaleControl(view), view.options.signed_scores);
    var status = el("div", "status");
    matrix(view.body, rows, cols, get, scale, {
      name: view.title,
      rowName: spec.axes[rowAxis],
      colName: spec.axes[colAxis],
      row: function (i) { return tickLabel(spec, rowAxis, i); },
      col: function (i) { return tickLabel(spec, colAxis, i); }
    }, status);
    view.body.appendChild(status);
    legend(view.body, scale, SPECIAL_NOTE);
  }

  var SPECIAL_NOTE = "domain set by cells between non-special tokens";

  function matrixDomain(spec, rowAxis, colAxis, rows, cols, get) {
    var cells = [];
    rows.forEach(function (r) {
      var rowSpecial = isSpecial(spec, rowAxis, r);
      cols.forEach(function (c) { cells.push({ value: get(r, c), special: rowSpecial || isSpecial(spec, colAxis, c) }); });
    });
    return domainValues(cells);
  }

  function drawHeadGrid(view, spec) {
    var layerAxis = spec.axes.indexOf("layer");
    var headAxis = spec.axes.indexOf("head");
    if (layerAxis < 0 || headAxis < 0) { throw new Error("a head grid needs layer and head axes; this array has " + spec.axes.join(", ")); }
    var rest = spec.axes.length - (hasBatch(spec) ? 1 : 0);
    if (rest === 2) { drawHeadMap(view, spec, layerAxis, headAxis); return; }
    var qAxis = spec.axes.length - 2;
    var kAxis = spec.axes.length - 1;
    var fixed = pickers(view, spec, [layerAxis, headAxis, qAxis, kAxis], {});
    var mode = scaleControl(view);
    var get = accessor(spec, fixed, [layerAxis, headAxis, qAxis, kAxis]);
    var layers = range(spec.shape[layerAxis]);
    var heads = range(spec.shape[headAxis]);
    var rows = shownIndices(spec, qAxis);
    var cols = shownIndices(spec, kAxis);
    var size = clamp(Math.floor(860 / heads.length) - 8, 28, 96);
    var grid = el("div", "grid");
    grid.style.gridTemplateColumns = "auto repeat(" + heads.length + ", auto)";
    grid.appendChild(el("span", "label", ""));
    heads.forEach(function (h) { grid.appendChild(el("span", "label", "head " + tickLabel(spec, headAxis, h))); });
    var detail = el("div", "detail");
    var buttons = [];
    var selected = view.picks.cell || [0, 0];
    if (selected[0] >= layers.length || selected[1] >= heads.length) { selected = [0, 0]; }
    layers.forEach(function (l) {
      grid.appendChild(el("span", "label", "layer " + tickLabel(spec, layerAxis, l)));
      heads.forEach(function (h) {
        var button = el("button", "thumb");
        button.type = "button";
        button.setAttribute("title", "layer " + tickLabel(spec, layerAxis, l) + ", head " + tickLabel(spec, headAxis, h) + ": click to enlarge");
        var one = function (r, c) { return get(l, h, r, c); };
        var scale = makeScale(matrixDomain(spec, qAxis, kAxis, rows, cols, one), mode, view.options.signed_scores);
        button.appendChild(thumbnail(rows, cols, one, scale, size));
        button.addEventListener("click", function () {
          view.picks.cell = [l, h];
          buttons.forEach(function (b) { b.node.classList.toggle("selected", b.l === l && b.h === h); });
          showHead(l, h);
        });
        buttons.push({ node: button, l: l, h: h });
        if (l === selected[0] && h === selected[1]) { button.classList.add("selected"); }
        grid.appendChild(button);
      });
    });
    function showHead(l, h) {
      clear(detail);
      var title = "Layer " + tickLabel(spec, layerAxis, l) + " · head " + tickLabel(spec, headAxis, h);
      detail.appendChild(el("h4", null, title));
      var one = function (r, c) { return get(l, h, r, c); };
      var scale = makeScale(matrixDomain(spec, qAxis, kAxis, rows, cols, one), mode, view.options.signed_scores);
      var status = el("div", "status");
      matrix(detail, rows, cols, one, scale, {
        name: title,
        rowName: spec.axes[qAxis],
        colName: spec.axes[kAxis],
        row: function (i) { return tickLabel(spec, qAxis, i); },
        col: function (i) { return tickLabel(spec, kAxis, i); }
      }, status);
      detail.appendChild(status);
      legend(detail, scale, SPECIAL_NOTE);
    }
    view.body.appendChild(el("p", "caption", "Each thumbnail is one head's pattern [query × key] on its own colour range (set by the cells between non-special tokens). Click one to enlarge it."));
    var scroller = el("div", "scroll");
    scroller.appendChild(grid);
    view.body.appendChild(scroller);
    view.body.appendChild(detail);
    showHead(selected[0], selected[1]);
  }

  function drawHeadMap(view, spec, layerAxis, headAxis) {
    var fixed = pickers(view, spec, [layerAxis, headAxis], {});
    var get = accessor(spec, fixed, [layerAxis, headAxis]);
    var layers = range(spec.shape[layerAxis]);
    var heads = range(spec.shape[headAxis]);
    var all = [];
    layers.forEach(function (l) { heads.forEach(function (h) { all.push(get(l, h)); }); });
    var scale = makeScale(all, scaleControl(view), view.options.signed_scores);
    var status = el("div", "status");
    matrix(view.body, layers, heads, get, scale, {
      name: view.title, rowName: "layer", colName: "head",
      row: function (i) { return "L" + tickLabel(spec, layerAxis, i); },
      col: function (i) { return "H" + tickLabel(spec, headAxis, i); }
    }, status);
    view.body.appendChild(status);
    legend(view.body, scale, "");
  }

  function drawLine(view, spec) {
    var xAxis = spec.axes.indexOf("layer");
    var first = hasBatch(spec) ? 1 : 0;
    if (xAxis < 0) { xAxis = first; }
    var others = range(spec.axes.length).filter(function (k) { return k !== xAxis && !(k === 0 && hasBatch(spec)); });
    var seriesAxis = others.length ? others[others.length - 1] : -1;
    var defaults = {};
    others.forEach(function (k) { if (k !== seriesAxis) { defaults[k] = readoutDefault(view, spec, k); } });
    var drawn = seriesAxis >= 0 ? [xAxis, seriesAxis] : [xAxis];
    var fixed = pickers(view, spec, drawn, defaults);
    var get = accessor(spec, fixed, drawn);
    var xs = range(spec.shape[xAxis]);
    var series;
    if (seriesAxis < 0) {
      series = [{ label: view.title, node: el("span", null, view.title), at: function (x) { return get(x); } }];
    } else {
      var candidates = shownIndices(spec, seriesAxis).filter(function (i) { return !isSpecial(spec, seriesAxis, i); });
      if (!candidates.length) { candidates = shownIndices(spec, seriesAxis); }
      var lastX = xs[xs.length - 1];
      candidates.sort(function (a, b) { return (get(lastX, b) || 0) - (get(lastX, a) || 0); });
      series = candidates.slice(0, 6).map(function (i) {
        return { label: longLabel(spec, seriesAxis, i), node: labelNode("span", spec, seriesAxis, i), at: function (x) { return get(x, i); } };
      });
    }
    var lo = 0;
    var hi = 0;
    series.forEach(function (s) { xs.forEach(function (x) { var v = s.at(x); if (!isNaN(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } }); });
    if (hi === lo) { hi = lo + 1; }
    var W = 640;
    var H = 260;
    var m = { l: 56, r: 16, t: 12, b: 34 };
    var plot = svg("svg", { "class": "line", width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" });
    plot.setAttribute("aria-label", view.title);
    function px(i) { return m.l + (xs.length < 2 ? 0.5 : i / (xs.length - 1)) * (W - m.l - m.r); }
    function py(v) { return H - m.b - ((v - lo) / (hi - lo)) * (H - m.t - m.b); }
    plot.appendChild(svg("line", { "class": "axis", x1: m.l, y1: H - m.b, x2: W - m.r, y2: H - m.b }));
    plot.appendChild(svg("line", { "class": "axis", x1: m.l, y1: m.t, x2: m.l, y2: H - m.b }));
    for (var t = 0; t <= 4; t++) {
      var v = lo + (t / 4) * (hi - lo);
      var label = svg("text", { x: m.l - 6, y: py(v) + 4, "text-anchor": "end" });
      label.textContent = fmt(v);
      plot.appendChild(label);
    }
    xs.forEach(function (x, i) {
      var tick = svg("text", { x: px(i), y: H - m.b + 16, "text-anchor": "middle" });
      tick.textContent = shorten(tickLabel(spec, xAxis, x));
      plot.appendChild(tick);
    });
    var axisName = svg("text", { x: (m.l + W - m.r) / 2, y: H - 4, "text-anchor": "middle" });
    axisName.textContent = spec.axes[xAxis];
    plot.appendChild(axisName);
    var key = el("div", "legend");
    series.forEach(function (s, n) {
      var colour = PALETTE[n % PALETTE.length];
      var points = xs.map(function (x, i) { return px(i) + "," + py(s.at(x)); }).join(" ");
      plot.appendChild(svg("polyline", { "class": "series", points: points, stroke: colour }));
      xs.forEach(function (x, i) {
        var dot = svg("circle", { cx: px(i), cy: py(s.at(x)), r: 3, fill: colour });
        var tip = svg("title", {});
        tip.textContent = s.label + " · " + spec.axes[xAxis] + " " + tickLabel(spec, xAxis, x) + ": " + fmt(s.at(x));
        dot.appendChild(tip);
        plot.appendChild(dot);
      });
      var swatch = el("span", null, "■ ");
      swatch.style.color = colour;
      var entry = el("span", "entry");
      entry.appendChild(swatch);
      entry.appendChild(s.node);
      key.appendChild(entry);
    });
    view.body.appendChild(plot);
    view.body.appendChild(key);
  }

  function drawTable(view, spec) {
    var axes = range(spec.axes.length).filter(function (k) { return !(k === 0 && hasBatch(spec)); });
    var fixed = pickers(view, spec, axes, {});
    var get = accessor(spec, fixed, axes);
    var rows = [];
    (function walk(depth, index) {
      if (depth === axes.length) { rows.push({ index: index.slice(), value: get.apply(null, index) }); return; }
      shownIndices(spec, axes[depth]).forEach(function (i) { index.push(i); walk(depth + 1, index); index.pop(); });
    }(0, []));
    var limit = 200;
    var total = rows.length;
    if (total > limit) {
      rows.sort(function (a, b) { return Math.abs(b.value) - Math.abs(a.value); });
      rows = rows.slice(0, limit);
    }
    var sort = view.picks.sort || { column: axes.length, descending: true };
    function cellValue(row, column) { return column === axes.length ? row.value : row.index[column]; }
    rows.sort(function (a, b) {
      var x = cellValue(a, sort.column);
      var y = cellValue(b, sort.column);
      var order = isNaN(x) ? 1 : isNaN(y) ? -1 : x - y;
      return sort.descending ? -order : order;
    });
    var table = el("table", "sortable");
    var head = el("tr");
    axes.concat([null]).forEach(function (k, column) {
      var th = el("th");
      th.setAttribute("scope", "col");
      var name = k === null ? "value" : spec.axes[k];
      var arrow = sort.column === column ? (sort.descending ? " ▼" : " ▲") : "";
      var button = el("button", null, name + arrow);
      button.type = "button";
      button.addEventListener("click", function () {
        view.picks.sort = { column: column, descending: sort.column === column ? !sort.descending : column === axes.length };
        view.render();
      });
      th.appendChild(button);
      head.appendChild(th);
    });
    var thead = el("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    var body = el("tbody");
    rows.forEach(function (row) {
      var tr = el("tr");
      axes.forEach(function (k, column) { tr.appendChild(labelNode("td", spec, k, row.index[column])); });
      tr.appendChild(el("td", "num", fmt(row.value)));
      body.appendChild(tr);
    });
    table.appendChild(body);
    if (total > limit) { view.body.appendChild(el("p", "caption", "The " + limit + " of " + total + " cells with the largest |value|; export() has them all.")); }
    var scroller = el("div", "scroll");
    scroller.appendChild(table);
    view.body.appendChild(scroller);
  }

  var DRAW = { token_strip: drawStrip, heatmap: drawHeatmap, head_grid: drawHeadGrid, line: drawLine, table: drawTable };
  window.AuditViews = {
    DATA: DATA, state: state, DRAW: DRAW, accessor: accessor, shownIndices: shownIndices, tickLabel: tickLabel,
    sideTokens: sideTokens
  };
}());
