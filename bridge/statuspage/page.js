// The status page's refresh: polls /routes, keeps the last minutes of
// samples per route in memory and redraws the table and its charts. It
// writes untrusted text (names, URLs, errors) only with textContent.
(function () {
  "use strict";
  var WINDOW_MS = 5 * 60 * 1000; // samples kept per route
  var TREND_MS = 60 * 1000; // the lag trend compares with this long ago
  var SVG = "http://www.w3.org/2000/svg";
  var CW = 160, CH = 34; // chart size in px

  var body = document.body;
  var tbody = document.getElementById("routes-body");
  var table = document.getElementById("routes");
  var conn = document.getElementById("conn");
  var refreshMs = Math.round(clamp(Number(new URLSearchParams(location.search).get("refresh")) ||
    Number(body.dataset.refresh) || 2, 0.2, 60) * 1000);
  var history = new Map(); // route name -> [{t, fwd, lag, rate}], oldest first
  var startedKey = null;
  var lastTime = null;

  function clamp(v, lo, hi) { return Math.min(hi, Math.max(lo, v)); }
  function fmtInt(n) { return Number(n).toLocaleString("en-US"); }
  function fmtRate(r) { return (r >= 100 ? r.toFixed(0) : r.toFixed(1)) + " /s"; }
  function fmtBytes(b) {
    var units = ["B", "kB", "MB", "GB", "TB"], i = 0;
    if (b < 1000) { return b + " B"; }
    while (b >= 1000 && i < units.length - 1) { b /= 1000; i++; }
    return b.toFixed(1) + " " + units[i];
  }
  function fmtSpan(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) { return s + " s"; }
    var m = Math.floor(s / 60);
    if (m < 60) { return m + " min"; }
    var h = Math.floor(m / 60);
    if (h < 48) { return h + " h"; }
    return Math.floor(h / 24) + " d";
  }
  // fmtWindow is fmtSpan with tenths below 10 s: a chart's first seconds.
  function fmtWindow(ms) { return ms < 10000 ? (Math.max(0, ms) / 1000).toFixed(1) + " s" : fmtSpan(ms); }
  function fmtTime(iso) { return iso.slice(0, 19).replace("T", " ") + " UTC"; }
  // holdsText says what this replica holds of the route's source (the
  // server's pageHolds says the same).
  function holdsText(h) {
    if (h.mode === "partitions") {
      return h.partitions && h.partitions.length ? "holds partitions " + h.partitions.join(", ") : "holds no partition";
    }
    if (h.mode === "single-active") { return h.active ? "single active consumer" : "waiting to be the active consumer"; }
    return "competing consumer";
  }

  function endText(e) {
    var s = e.topic ? e.topic + " @ " + e.url : e.url;
    return e.group ? s + " (group " + e.group + ")" : s;
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }

  // record appends the routes of st to their history; a restarted bridge
  // (another started time, or a counter going down) starts it afresh.
  function record(st) {
    var t = Date.parse(st.time);
    var key = st.started || "";
    if (key !== startedKey) { history.clear(); startedKey = key; }
    st.routes.forEach(function (r) {
      var h = history.get(r.name);
      if (!h) { h = []; history.set(r.name, h); }
      var prev = h[h.length - 1];
      if (prev && t <= prev.t) { return; }
      if (prev && r.forwarded < prev.fwd) { h.length = 0; prev = undefined; }
      var s = { t: t, fwd: r.forwarded, lag: r.source_lag, rate: null };
      if (prev) { s.rate = (r.forwarded - prev.fwd) / ((t - prev.t) / 1000); }
      h.push(s);
      while (h.length && h[0].t < t - WINDOW_MS) { h.shift(); }
    });
  }

  // chart draws points [{t, v}] as a line over an area, scaled from 0 to
  // their maximum; label is its text alternative.
  function chart(points, cls, label) {
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "chart " + cls);
    svg.setAttribute("width", CW);
    svg.setAttribute("height", CH);
    svg.setAttribute("viewBox", "0 0 " + CW + " " + CH);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    svg.setAttribute("data-points", points.length);
    if (points.length) { svg.setAttribute("data-last", points[points.length - 1].v); }
    var title = document.createElementNS(SVG, "title");
    title.textContent = label;
    svg.appendChild(title);
    var axis = document.createElementNS(SVG, "line");
    axis.setAttribute("class", "axis");
    axis.setAttribute("x1", 0); axis.setAttribute("x2", CW);
    axis.setAttribute("y1", CH - 0.5); axis.setAttribute("y2", CH - 0.5);
    svg.appendChild(axis);
    if (points.length < 2) { return svg; }
    var t0 = points[0].t, span = Math.max(1, points[points.length - 1].t - t0);
    var max = 0;
    points.forEach(function (p) { max = Math.max(max, p.v); });
    max = max > 0 ? max * 1.25 : 1; // a steady value draws a line, not a full box
    var xy = points.map(function (p) {
      var x = (p.t - t0) / span * CW, y = CH - 1 - p.v / max * (CH - 3);
      return [x.toFixed(1), y.toFixed(1)];
    });
    var d = xy.map(function (p, i) { return (i ? "L" : "M") + p[0] + " " + p[1]; }).join(" ");
    var area = document.createElementNS(SVG, "path");
    area.setAttribute("class", "area");
    area.setAttribute("d", d + " L" + xy[xy.length - 1][0] + " " + CH + " L" + xy[0][0] + " " + CH + " Z");
    var line = document.createElementNS(SVG, "path");
    line.setAttribute("class", "line");
    line.setAttribute("d", d);
    svg.appendChild(area);
    svg.appendChild(line);
    return svg;
  }

  // note is the visible caption of a chart: its span and its peak (the
  // chart's aria-label says more, so screen readers skip the note).
  function note(pts, fmt) {
    var text = "collecting samples\u2026";
    if (pts.length >= 2) {
      var hi = 0;
      pts.forEach(function (p) { hi = Math.max(hi, p.v); });
      text = "last " + fmtWindow(pts[pts.length - 1].t - pts[0].t) + ", peak " + fmt(hi);
    }
    var n = el("span", "chart-note", text);
    n.setAttribute("aria-hidden", "true");
    return n;
  }

  function rateCell(r, h) {
    var td = el("td", "rate");
    td.appendChild(el("span", "num rate-now", fmtRate(r.forwarded_per_sec_10s)));
    var pts = h.filter(function (s) { return s.rate !== null; }).map(function (s) { return { t: s.t, v: s.rate }; });
    var label;
    if (pts.length < 2) {
      label = "Forward rate chart: collecting samples (one per refresh).";
    } else {
      var lo = Infinity, hi = 0;
      pts.forEach(function (p) { lo = Math.min(lo, p.v); hi = Math.max(hi, p.v); });
      label = "Forward rate over the last " + fmtWindow(pts[pts.length - 1].t - pts[0].t) + ": now " +
        fmtRate(pts[pts.length - 1].v) + ", low " + fmtRate(lo) + ", peak " + fmtRate(hi) + ".";
    }
    td.appendChild(chart(pts, "rate-chart", label));
    td.appendChild(note(pts, fmtRate));
    return td;
  }

  function lagCell(r, h) {
    var td = el("td", "lag");
    td.appendChild(el("span", "num lag-now", r.source_lag === null ? "unknown" : fmtInt(r.source_lag)));
    var pts = h.filter(function (s) { return s.lag !== null; }).map(function (s) { return { t: s.t, v: s.lag }; });
    var trend = "unknown", text = r.source_lag === null ? "not reported by the source" : "trend after more samples";
    if (pts.length >= 2) {
      var last = pts[pts.length - 1], ref = pts[0];
      for (var i = pts.length - 1; i >= 0 && pts[i].t >= last.t - TREND_MS; i--) { ref = pts[i]; }
      var span = fmtWindow(last.t - ref.t), diff = last.v - ref.v;
      if (diff < 0) {
        trend = "falling"; text = "\u2193 falling: " + fmtInt(-diff) + " fewer in " + span;
      } else if (diff > 0) {
        trend = "rising"; text = "\u2191 rising: " + fmtInt(diff) + " more in " + span;
      } else {
        trend = "steady"; text = last.v === 0 ? "nothing waiting" : "\u2192 steady for " + span;
      }
    }
    td.dataset.trend = trend;
    td.appendChild(el("span", "trend " + trend, text));
    var label = pts.length < 2 ? "Source lag chart: collecting samples." :
      "Source lag over the last " + fmtWindow(pts[pts.length - 1].t - pts[0].t) + ": from " + fmtInt(pts[0].v) +
      " to " + fmtInt(pts[pts.length - 1].v) + " messages, " + trend + ".";
    td.appendChild(chart(pts, "lag-chart", label));
    td.appendChild(note(pts, fmtInt));
    return td;
  }

  function row(r, st) {
    var h = history.get(r.name) || [];
    var tr = el("tr", "route state-" + r.state);
    tr.dataset.route = r.name;
    var th = el("th");
    th.scope = "row";
    th.appendChild(el("span", "route-name", r.name));
    th.appendChild(el("span", "end-from", "from " + endText(r.from)));
    th.appendChild(el("span", "end-to", "to " + endText(r.to)));
    tr.appendChild(th);

    var state = el("td", "state");
    state.appendChild(el("span", "badge", r.state));
    if (r.holds) { state.appendChild(el("span", "holds", holdsText(r.holds))); }
    if (r.not_ready) { state.appendChild(el("span", "why", "not ready: " + r.not_ready)); }
    if (r.caught_up_since) { state.appendChild(el("span", "sub cutover", "since " + r.caught_up_since.replace("T", " ").replace(/\.\d+Z$/, "Z"))); }
    if (r.caught_up_unknown) { state.appendChild(el("span", "sub cutover", "no cutover signal: " + r.caught_up_unknown)); }
    if (r.stop_when) { state.appendChild(el("span", "sub", "stops when " + r.stop_when)); }
    tr.appendChild(state);

    var fwd = el("td", "num forwarded");
    fwd.appendChild(el("span", "forwarded-count", fmtInt(r.forwarded)));
    var skipped = [];
    if (r.looped) { skipped.push(fmtInt(r.looped) + " looped"); }
    if (r.duplicates) { skipped.push(fmtInt(r.duplicates) + " duplicates"); }
    if (skipped.length) { fwd.appendChild(el("span", "sub", skipped.join(", "))); }
    tr.appendChild(fwd);

    tr.appendChild(rateCell(r, h));
    tr.appendChild(lagCell(r, h));

    var inflight = el("td", "num in-flight", fmtInt(r.in_flight));
    if (r.in_flight_bytes) { inflight.appendChild(el("span", "sub", fmtBytes(r.in_flight_bytes))); }
    tr.appendChild(inflight);
    tr.appendChild(el("td", "num retries", fmtInt(r.retries)));
    tr.appendChild(el("td", "num failed", fmtInt(r.failed)));
    tr.appendChild(el("td", "num poisoned", fmtInt(r.poisoned)));

    var le = el("td", "last-error");
    if (r.last_error) {
      var rec = r.last_error.recovered_at;
      if (rec) {
        // Recovered: shown muted, with when, not as a live error.
        le.classList.add("recovered");
        var ra = el("span", "recovered-at", "recovered ");
        var rt = el("time", null, fmtSpan(Date.parse(st.time) - Date.parse(rec)) + " ago");
        rt.dateTime = rec;
        rt.title = rec;
        ra.appendChild(rt);
        ra.appendChild(document.createTextNode(" from"));
        le.appendChild(ra);
      }
      le.appendChild(el("span", "msg", r.last_error.message));
      var when = el("time", null, fmtSpan(Date.parse(st.time) - Date.parse(r.last_error.time)) + " ago");
      when.dateTime = r.last_error.time;
      when.title = r.last_error.time;
      le.appendChild(when);
    } else {
      le.appendChild(el("span", "none", "none"));
    }
    tr.appendChild(le);
    return tr;
  }

  function render(st) {
    record(st);
    var rows = st.routes.map(function (r) { return row(r, st); });
    if (!rows.length) {
      var tr = el("tr"), td = el("td", null, "This bridge has no routes.");
      td.colSpan = 10;
      tr.appendChild(td);
      rows.push(tr);
    }
    tbody.replaceChildren.apply(tbody, rows);
    document.getElementById("bridge-name").textContent = st.bridge;
    document.getElementById("instance").textContent = st.instance || "";
    document.title = "relay bridge " + st.bridge;
    var started = document.getElementById("started");
    started.textContent = st.started ? fmtTime(st.started) : "not yet";
    if (st.started) { started.dateTime = st.started; } else { started.removeAttribute("datetime"); }
    var snap = document.getElementById("snapshot");
    snap.textContent = fmtTime(st.time);
    snap.dateTime = st.time;
    table.caption.textContent = "Routes (" + st.routes.length + "), in config order";
    lastTime = st.time;
    conn.classList.remove("stale");
    table.classList.remove("stale");
    conn.textContent = "Live: refreshed from /routes every " + refreshMs / 1000 + " s.";
    body.dataset.updates = String(Number(body.dataset.updates || 0) + 1);
  }

  function fail(err) {
    conn.classList.add("stale");
    table.classList.add("stale");
    conn.textContent = "Cannot refresh from /routes (" + err.message + ")" +
      (lastTime ? "; showing the snapshot of " + fmtTime(lastTime) : "") + ". Retrying every " + refreshMs / 1000 + " s.";
  }

  function tick() {
    fetch("routes", { cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (resp) {
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.json();
      })
      .then(render)
      .catch(fail)
      .then(function () { setTimeout(tick, refreshMs); });
  }
  tick();
})();
