/* Stands in for require.js, which bertviz loads from a CDN. bertviz's view scripts call
 * requirejs(["jquery", "d3"], factory); we keep each factory, keyed by the data-bertviz attribute of the
 * script that registered it, and run it only when the report opens that view, with the d3 and jQuery
 * already inlined in this page. Nothing is ever fetched. */
(function () {
  "use strict";
  var factories = {};
  var paramsFor = null;

  function resolve(name) {
    if (name === "jquery") { return window.jQuery; }
    if (name === "d3") { return window.d3; }
    throw new Error("bertviz asked for module " + name + ", which this report does not include");
  }

  window.require = { config: function () {} };
  window.requirejs = function (names, factory) {
    var script = document.currentScript;
    var view = script ? script.getAttribute("data-bertviz") : null;
    if (!view) { throw new Error("bertviz view script without a data-bertviz attribute"); }
    factories[view] = function () { factory.apply(null, names.map(resolve)); };
  };

  window.AUDIT_BERTVIZ = {
    /* report.js registers the function that builds a view's parameters from the report's JSON block. */
    setParams: function (fn) { paramsFor = fn; },
    params: function (view) { return paramsFor(view); },
    has: function (view) { return Object.prototype.hasOwnProperty.call(factories, view); },
    run: function (view) { factories[view](); }
  };
}());
