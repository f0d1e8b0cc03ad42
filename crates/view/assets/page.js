// dsh view: draws the timeline and the details from the JSON the page carries. Every string
// from the log reaches the page through textContent or an attribute set from script, never as
// markup, and the page's Content-Security-Policy runs no script but this one.
(function () {
  "use strict";

  var OUTCOMES = ["ok", "DENIED", "BLOCKED", "TOOL_ERROR", "TOOL_TIMEOUT", "ABORTED",
    "ABORTED_BEFORE_DISPATCH", "TOOL_INPUT_ERROR", "TOOL_OUTPUT_ERROR", "UNKNOWN_TOOL",
    "PIPELINE_ERROR", "open"];

  // The class of an outcome: one of ours, or `o-open` for anything else.
  function outcomeClass(outcome) {
    return OUTCOMES.indexOf(outcome) >= 0 ? "o-" + outcome : "o-open";
  }

  function formatMs(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "";
    if (ms < 1000) return Math.round(ms) + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    var m = Math.floor(ms / 60000);
    return m + " min " + Math.round((ms - m * 60000) / 1000) + " s";
  }

  // True when `call` passes the filter: `text` (any case) in its name, id, arguments, result
  // or reason; `tool` and `outcome` exact when set.
  function matches(call, filter) {
    if (filter.tool && call.name !== filter.tool) return false;
    if (filter.outcome && call.outcome !== filter.outcome) return false;
    var text = (filter.text || "").toLowerCase();
    if (!text) return true;
    var fields = [call.name, call.id, call.args, call.result, call.reason];
    for (var k = 0; k < fields.length; k++) {
      if (fields[k] && String(fields[k]).toLowerCase().indexOf(text) >= 0) return true;
    }
    return false;
  }

  // Greedy lanes: each span [start, end] goes to the first lane whose last span ended before
  // it starts, so overlapping (parallel) spans stand side by side and the others share a lane.
  function assignLanes(spans) {
    var ends = [];
    var lanes = [];
    for (var k = 0; k < spans.length; k++) {
      var s = spans[k];
      var lane = -1;
      for (var l = 0; l < ends.length; l++) {
        if (ends[l] <= s.start) { lane = l; break; }
      }
      if (lane < 0) { lane = ends.length; ends.push(s.end); } else { ends[lane] = s.end; }
      lanes.push(lane);
    }
    return lanes;
  }

  // Each call's span in a step. With times: from its body's start (or its call's time) to its
  // result's time. Without: by order, one unit each, one after another.
  function spansOf(calls, timed) {
    var out = [];
    for (var k = 0; k < calls.length; k++) {
      var c = calls[k];
      if (timed && c.at !== null && c.at !== undefined) {
        var start = c.start !== null && c.start !== undefined ? c.start : c.at;
        var end = c.end !== null && c.end !== undefined ? Math.max(c.end, start) : start;
        out.push({ start: start, end: end });
      } else {
        out.push({ start: k, end: k + 1 });
      }
    }
    return out;
  }

  // Where a span sits on its step's axis, in percent: [left, width].
  function place(span, from, to) {
    var total = Math.max(to - from, 1);
    var left = ((span.start - from) / total) * 100;
    var width = ((span.end - span.start) / total) * 100;
    // At least 1.5% wide, so an instant call is still a bar to click, and never past the end.
    width = Math.min(Math.max(width, 1.5), 100);
    left = Math.min(Math.max(left, 0), 100 - width);
    return [left, width];
  }

  var api = { outcomeClass: outcomeClass, formatMs: formatMs, matches: matches,
    assignLanes: assignLanes, spansOf: spansOf, place: place };
  window.dshView = api;

  var dataNode = document.getElementById("dsh-data");
  if (!dataNode) return;
  var view = JSON.parse(dataNode.textContent);
  api.view = view;
  var calls = view.calls;
  var bars = [];        // bar element per call index
  var order = [];       // call indices in seq order, for the keyboard
  var selected = -1;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function bar(call, left, width) {
    var b = el("button", "bar " + outcomeClass(call.outcome) + (call.sub ? " sub" : ""), call.name || "(no name)");
    b.type = "button";
    b.style.left = left + "%";
    b.style.width = width + "%";
    b.setAttribute("data-i", String(call.i));
    b.setAttribute("data-outcome", call.outcome);
    var took = call.end != null && (call.start != null || call.at != null)
      ? formatMs(call.end - (call.start != null ? call.start : call.at)) : "";
    b.title = (call.name || "") + " · " + call.outcome + (took ? " · " + took : "") + " · " + call.id;
    b.addEventListener("click", function () { select(call.i, false); });
    bars[call.i] = b;
    return b;
  }

  function drawStep(step) {
    var box = el("section", "step");
    box.setAttribute("data-step", String(step.step));
    var head = el("div", "step-head");
    head.appendChild(el("b", null, "step " + step.step));
    var top = step.calls.map(function (i) { return calls[i]; });
    var timed = view.timed && step.first != null;
    if (timed) head.appendChild(el("span", null, formatMs(step.last - step.first)));
    head.appendChild(el("span", null, top.length + (top.length === 1 ? " call" : " calls")));
    box.appendChild(head);
    var spans = spansOf(top, timed);
    var from = timed ? step.first : 0;
    var to = timed ? step.last : Math.max(top.length, 1);
    if (timed) {
      for (var s = 0; s < spans.length; s++) {
        from = Math.min(from, spans[s].start);
        to = Math.max(to, spans[s].end);
      }
    }
    var laneOf = assignLanes(spans);
    var lanes = el("div", "lanes");
    var laneEls = [];
    function lane(n) {
      while (laneEls.length <= n) {
        var l = el("div", "lane");
        laneEls.push(l);
        lanes.appendChild(l);
      }
      return laneEls[n];
    }
    var subLanes = [];
    for (var k = 0; k < top.length; k++) {
      var c = top[k];
      var p = place(spans[k], from, to);
      lane(laneOf[k]).appendChild(bar(c, p[0], p[1]));
      if (c.children.length) subLanes.push({ parent: c, left: p[0], width: p[1], lane: laneOf[k] });
    }
    box.appendChild(lanes);
    // A run_code call's sub-calls, nested under it: its span cut into their order.
    subLanes.forEach(function (sl) {
      var row = el("div", "lane sub");
      var n = sl.parent.children.length;
      sl.parent.children.forEach(function (ci, j) {
        row.appendChild(bar(calls[ci], sl.left + (sl.width * j) / n, Math.max(sl.width / n - 0.3, 0.8)));
      });
      laneEls[sl.lane].insertAdjacentElement("afterend", row);
    });
    step.context.forEach(function (ctx) {
      var c = el("div", "context");
      c.appendChild(el("span", "origin", "context from " + ctx.origin + ":"));
      c.appendChild(document.createTextNode(ctx.content));
      box.appendChild(c);
    });
    return box;
  }

  function section(parent, title, text) {
    if (text === null || text === undefined || text === "") return;
    parent.appendChild(el("h3", null, title));
    parent.appendChild(el("pre", null, text));
  }

  function prettyJson(text) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return text; }
  }

  function showDetails(call) {
    var d = document.getElementById("details");
    var body = document.getElementById("details-body");
    body.textContent = "";
    body.appendChild(el("h2", null, call.name || "(no name)"));
    var line = "step " + call.step + " · seq " + call.seq + " · " + call.id + (call.sub ? " · sub-call of " + call.parent : "");
    body.appendChild(el("div", "meta-line", line));
    var badge = el("span", "chip " + outcomeClass(call.outcome), call.outcome);
    badge.id = "detail-outcome";
    body.appendChild(badge);
    if (call.end != null && call.at != null) {
      var times = [];
      if (call.start != null) times.push("queued " + formatMs(call.start - call.at), "ran " + formatMs(call.end - call.start));
      else times.push("took " + formatMs(call.end - call.at));
      body.appendChild(el("div", "meta-line", times.join(" · ")));
    }
    if (call.reason !== null && call.reason !== undefined) {
      var h = el("h3", null, "Error " + call.outcome);
      body.appendChild(h);
      var r = el("pre", null, call.reason);
      r.id = "detail-reason";
      body.appendChild(r);
    }
    section(body, "Arguments", call.args);
    section(body, "Result, as the model saw it", call.result);
    section(body, "Meta", call.meta ? prettyJson(call.meta) : null);
    if (call.cut) body.appendChild(el("div", "note", call.cut + " bytes of this call are not shown (the page's per-field cap)"));
    var links = el("div", "links");
    if (call.parent) {
      var parent = calls.filter(function (c) { return c.id === call.parent && c.step === call.step && !c.sub; })[0];
      if (parent) {
        links.appendChild(el("h3", null, "Parent"));
        links.appendChild(linkTo(parent));
      }
    }
    if (call.children.length) {
      links.appendChild(el("h3", null, "Sub-calls"));
      call.children.forEach(function (ci) { links.appendChild(linkTo(calls[ci])); });
    }
    body.appendChild(links);
    d.hidden = false;
  }

  function linkTo(call) {
    var b = el("button", null, call.name + " · " + call.outcome);
    b.type = "button";
    b.addEventListener("click", function () { select(call.i, true); });
    return b;
  }

  function select(i, focus) {
    if (selected >= 0 && bars[selected]) bars[selected].classList.remove("selected");
    selected = i;
    var b = bars[i];
    if (b) {
      b.classList.add("selected");
      if (focus) b.focus();
      if (b.scrollIntoView) b.scrollIntoView({ block: "nearest" });
    }
    showDetails(calls[i]);
  }

  function currentFilter() {
    return {
      text: document.getElementById("filter").value,
      tool: document.getElementById("tool").value,
      outcome: document.getElementById("outcome").value,
    };
  }

  function applyFilter() {
    var f = currentFilter();
    var shown = 0;
    calls.forEach(function (c) {
      var ok = matches(c, f);
      if (bars[c.i]) bars[c.i].hidden = !ok;
      if (ok) shown++;
    });
    var active = !!(f.text || f.tool || f.outcome);
    document.querySelectorAll(".step").forEach(function (s) {
      s.hidden = active && !s.querySelector(".bar:not([hidden])");
    });
    document.getElementById("count").textContent = shown + " of " + calls.length + " calls shown";
  }

  function visibleOrder() {
    return order.filter(function (i) { return bars[i] && !bars[i].hidden; });
  }

  function move(delta) {
    var vis = visibleOrder();
    if (!vis.length) return;
    var at = vis.indexOf(selected);
    var next = at < 0 ? (delta > 0 ? 0 : vis.length - 1) : Math.min(Math.max(at + delta, 0), vis.length - 1);
    select(vis[next], true);
  }
  api.move = move;

  function fillSelect(id, values) {
    var s = document.getElementById(id);
    values.forEach(function (v) {
      var o = el("option", null, v);
      o.value = v;
      s.appendChild(o);
    });
  }

  var timeline = document.getElementById("timeline");
  view.steps.forEach(function (step) { timeline.appendChild(drawStep(step)); });
  order = calls.map(function (c) { return c.i; }).sort(function (a, b) { return calls[a].seq - calls[b].seq; });
  fillSelect("tool", Object.keys(view.figures.tools).sort());
  fillSelect("outcome", Object.keys(view.figures.outcomes).sort());
  ["filter", "tool", "outcome"].forEach(function (id) {
    document.getElementById(id).addEventListener("input", applyFilter);
    document.getElementById(id).addEventListener("change", applyFilter);
  });
  document.getElementById("close").addEventListener("click", function () {
    document.getElementById("details").hidden = true;
  });
  document.addEventListener("keydown", function (e) {
    var inField = e.target && (e.target.tagName === "INPUT" || e.target.tagName === "SELECT");
    if (e.key === "Escape") {
      document.getElementById("details").hidden = true;
      if (inField) e.target.blur();
      return;
    }
    if (inField) return;
    if (e.key === "/") { e.preventDefault(); document.getElementById("filter").focus(); }
    else if (e.key === "j" || e.key === "ArrowDown" || e.key === "ArrowRight") { e.preventDefault(); move(1); }
    else if (e.key === "k" || e.key === "ArrowUp" || e.key === "ArrowLeft") { e.preventDefault(); move(-1); }
  });
  applyFilter();
  document.body.setAttribute("data-ready", "1");
})();
