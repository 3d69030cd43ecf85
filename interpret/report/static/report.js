/* transformer-audit report, part 3 of 3: builds the views, follows the example picker, feeds bertviz.
 * Runs last; parts 1 and 2 (report_draw.js, report_views.js) and bertviz's scripts run before it. */
(function () {
  "use strict";

  var D = window.AuditDraw;
  var V = window.AuditViews;
  var el = D.el, clear = D.clear, range = D.range, shorten = D.shorten, visible = D.visible;
  var DATA = V.DATA, state = V.state, accessor = V.accessor, shownIndices = V.shownIndices, tickLabel = V.tickLabel;
  var views = [];
  var BERTVIZ_LINE_LIMIT = 300000;

  function makeView(section, request, container) {
    var root = el("div", "view");
    root.appendChild(el("h3", null, request.title));
    var view = {
      section: section, title: request.title, options: request.options || {}, picks: {},
      controls: el("div", "controls"), body: el("div", "body")
    };
    root.appendChild(view.controls);
    root.appendChild(view.body);
    container.appendChild(root);
    view.render = function () {
      clear(view.controls);
      clear(view.body);
      try {
        V.DRAW[request.kind](view, section.arrays[request.array]);
      } catch (err) {
        view.body.appendChild(el("p", "muted", "This view could not be drawn: " + err.message));
        console.error(err);
      }
    };
    return view;
  }

  /* ---------- bertviz ---------- */

  function findSection(key) {
    return DATA.sections.filter(function (s) { return s.key === key; })[0];
  }

  /* bertviz's params for the current example: its [layer][head][query][key] lists over real positions. */
  function bertvizParams(name) {
    var section = findSection(DATA.bertviz.section);
    var attention = DATA.bertviz.entries.map(function (entry) {
      var spec = section.arrays[entry.array];
      var get = accessor(spec, { 0: state.example }, [1, 2, 3, 4]);
      var queries = shownIndices(spec, 3);
      var keys = shownIndices(spec, 4);
      var attn = range(spec.shape[1]).map(function (l) {
        return range(spec.shape[2]).map(function (h) {
          return queries.map(function (q) { return keys.map(function (k) { return get(l, h, q, k); }); });
        });
      });
      return {
        name: entry.name,
        attn: attn,
        left_text: queries.map(function (q) { return shorten(tickLabel(spec, 3, q)); }),
        right_text: keys.map(function (k) { return shorten(tickLabel(spec, 4, k)); })
      };
    });
    var first = section.arrays[DATA.bertviz.entries[0].array];
    return {
      attention: attention, default_filter: "0", root_div_id: "bertviz-" + name, layer: null, heads: null,
      include_layers: first.coords.layer, include_heads: first.coords.head,
      total_heads: first.coords.head.length, display_mode: "light"
    };
  }

  function bertvizLines(name) {
    var section = findSection(DATA.bertviz.section);
    var spec = section.arrays[DATA.bertviz.entries[0].array];
    var pairs = shownIndices(spec, 3).length * shownIndices(spec, 4).length;
    return (name === "model" ? spec.shape[1] : 1) * spec.shape[2] * pairs;
  }

  function prepareBertvizRoot(name) {
    var root = document.getElementById("bertviz-" + name);
    clear(root);
    var bar = el("span");
    if (name === "head") {
      bar.appendChild(document.createTextNode("Layer: "));
      var layer = el("select");
      layer.id = "layer";
      bar.appendChild(layer);
    }
    if (DATA.bertviz.entries.length > 1) {
      bar.appendChild(document.createTextNode("Attention: "));
      var filter = el("select");
      filter.id = "filter";
      DATA.bertviz.entries.forEach(function (entry, i) {
        var option = el("option", null, entry.name);
        option.value = String(i);
        filter.appendChild(option);
      });
      bar.appendChild(filter);
    }
    root.appendChild(bar);
    var vis = el("div");
    vis.id = "vis";
    root.appendChild(vis);
  }

  function drawBertviz(details, force) {
    var name = details.getAttribute("data-view");
    var status = details.querySelector(".bertviz-status");
    if (details.drawnFor === state.example || !window.AUDIT_BERTVIZ.has(name)) { return; }
    clear(status);
    var lines = bertvizLines(name);
    if (lines > BERTVIZ_LINE_LIMIT && !force) {
      clear(document.getElementById("bertviz-" + name));
      status.appendChild(document.createTextNode("This view draws " + lines.toLocaleString("en") + " lines and may be slow. "));
      var button = el("button", null, "Draw it anyway");
      button.type = "button";
      button.addEventListener("click", function () { drawBertviz(details, true); });
      status.appendChild(button);
      return;
    }
    prepareBertvizRoot(name);
    window.AUDIT_BERTVIZ.run(name);
    details.drawnFor = state.example;
  }

  function setUpBertviz() {
    if (!DATA.bertviz || !window.AUDIT_BERTVIZ) { return; }
    window.AUDIT_BERTVIZ.setParams(bertvizParams);
    document.querySelectorAll("details.bertviz-view").forEach(function (details) {
      details.addEventListener("toggle", function () { if (details.open) { drawBertviz(details, false); } });
    });
  }

  /* ---------- the summary's top-token chips (rendered by the template) ---------- */

  /* Each chip's token: its display form when the data has one (the chip's raw token — its data-raw, else its
   * text — must be the raw token at the chip's data-pos on the encoder or decoder side, else it is left alone),
   * escaped and cut to LABEL_LIMIT in a <bdi>; the whole raw token (escaped) on hover. */
  function labelSummaryChips() {
    document.querySelectorAll(".example-summary").forEach(function (block) {
      var example = Number(block.getAttribute("data-example"));
      block.querySelectorAll(".chip").forEach(function (chip) {
        var token = chip.querySelector(".tok");
        if (!token) { return; }
        var raw = chip.hasAttribute("data-raw") ? chip.getAttribute("data-raw") : token.textContent;
        var position = chip.hasAttribute("data-pos") ? Number(chip.getAttribute("data-pos")) : -1;
        var label = raw;
        ["encoder", "decoder"].some(function (side) {
          var t = V.sideTokens(side, example);
          if (t.tokens[position] !== raw) { return false; }
          label = t.display[position];
          return true;
        });
        var node = D.tokenLabel(visible(label), raw);
        node.className = token.className;
        token.parentNode.replaceChild(node, token);
      });
    });
  }

  /* ---------- examples and start-up ---------- */

  function selectExample(index) {
    state.example = index;
    document.querySelectorAll(".example-summary, .example-words, .example-heat").forEach(function (block) {
      block.hidden = Number(block.getAttribute("data-example")) !== index;
    });
    document.querySelectorAll("table.overview tbody tr").forEach(function (row) {
      row.classList.toggle("selected", Number(row.getAttribute("data-example")) === index);
    });
    var picker = document.getElementById("example-picker");
    if (picker) { picker.value = String(index); }
    views.forEach(function (view) { view.render(); });
    document.querySelectorAll("details.bertviz-view").forEach(function (details) {
      details.drawnFor = -1;
      if (details.open) { drawBertviz(details, false); }
    });
  }

  function start() {
    document.querySelectorAll(".no-js").forEach(function (node) { node.parentNode.removeChild(node); });
    labelSummaryChips();
    document.querySelectorAll(".views").forEach(function (container) {
      var section = findSection(container.getAttribute("data-section"));
      if (!section) { return; }
      section.views.forEach(function (request) { views.push(makeView(section, request, container)); });
    });
    var picker = document.getElementById("example-picker");
    if (picker) { picker.addEventListener("change", function () { selectExample(Number(picker.value)); }); }
    // The overview's rows pick their text too, then bring its summary into view.
    document.querySelectorAll("table.overview tbody tr").forEach(function (row) {
      function pick() {
        selectExample(Number(row.getAttribute("data-example")));
        document.getElementById("summary").scrollIntoView();
      }
      row.addEventListener("click", pick);
      row.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); pick(); }
      });
    });
    setUpBertviz();
    // A printed report shows every analyzer's parameters; the screen keeps them folded.
    var folded = [];
    window.addEventListener("beforeprint", function () {
      folded = [].slice.call(document.querySelectorAll("details.params:not([open])"));
      folded.forEach(function (details) { details.open = true; });
    });
    window.addEventListener("afterprint", function () { folded.forEach(function (details) { details.open = false; }); });
    selectExample(0);
    document.documentElement.setAttribute("data-report-ready", "1");
  }

  start();
}());
