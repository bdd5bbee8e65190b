// shellbox operator console. Plain script, no build step, no inline code
// (the Content-Security-Policy forbids it). Everything that came from a
// command, a model or a tenant is untrusted: it is only ever set as text
// (textContent, never parsed as markup), and control, bidi and invisible
// characters are shown as visible marks.
"use strict";

(function () {
  const $ = (sel) => document.querySelector(sel);
  let csrf = "";
  let me = null;
  let timer = null;
  let tailTimer = null;
  let auditTimer = null;
  let usageTimer = null;
  let usageData = null;
  let tail = null; // {tenant, session, id}
  let overview = null;

  // Characters that could move the cursor, recolour a terminal, reorder
  // text (Trojan Source) or hide: C0/C1 controls but \n and \t, bidi
  // embeddings, overrides and isolates, zero-width and soft-hyphen marks.
  const SUSPECT = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u00AD\u061C\u180E\u200B-\u200F\u2028-\u202E\u2060-\u2069\uFEFF]/g;

  function mark(c) {
    const cp = c.codePointAt(0);
    if (cp < 0x100) return "\\x" + cp.toString(16).padStart(2, "0");
    return "\\u" + cp.toString(16).padStart(4, "0");
  }

  // setText fills el with s as text, suspect characters as visible marks.
  // It returns whether s held any.
  function setText(el, s) {
    el.textContent = "";
    s = String(s == null ? "" : s);
    let last = 0, found = false;
    for (const m of s.matchAll(SUSPECT)) {
      found = true;
      if (m.index > last) el.appendChild(document.createTextNode(s.slice(last, m.index)));
      const span = document.createElement("span");
      span.className = "hidden-char";
      span.title = "hidden or control character U+" + m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
      span.textContent = mark(m[0]);
      el.appendChild(span);
      last = m.index + m[0].length;
    }
    if (last < s.length) el.appendChild(document.createTextNode(s.slice(last)));
    return found;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) setText(e, text);
    return e;
  }

  function dur(ms) {
    if (!(ms >= 0)) return "—";
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + "s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + "m " + (s % 60) + "s";
    const h = Math.floor(m / 60);
    if (h < 48) return h + "h " + (m % 60) + "m";
    return Math.floor(h / 24) + "d " + (h % 24) + "h";
  }
  const t0 = (s) => (s ? Date.parse(s) : NaN);
  const ago = (s, now) => (s ? dur(now - t0(s)) + " ago" : "—");

  async function api(method, path, body) {
    const opts = { method, credentials: "same-origin", headers: {} };
    if (method !== "GET") {
      opts.headers["X-CSRF-Token"] = csrf;
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body || {});
    }
    const r = await fetch(path, opts);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    if (r.status === 401 && path !== "/ui/api/login") {
      showLogin("");
      throw new Error("not logged in");
    }
    if (!r.ok) {
      const msg = data && data.error ? data.error.message : "HTTP " + r.status;
      const err = new Error(msg);
      err.status = r.status;
      throw err;
    }
    return data;
  }

  function showLogin(msg) {
    stopTimers();
    me = null;
    $("#app").hidden = true;
    $("#logout").hidden = true;
    $("#whoami").textContent = "";
    $("#login").hidden = false;
    setText($("#login-error"), msg || "");
    $("#token").focus();
  }

  function stopTimers() {
    clearInterval(timer); clearInterval(tailTimer); clearInterval(auditTimer); clearInterval(usageTimer);
    timer = tailTimer = auditTimer = usageTimer = null;
  }

  function showApp(who) {
    me = who;
    csrf = who.csrf;
    $("#login").hidden = true;
    $("#app").hidden = false;
    $("#logout").hidden = false;
    setText($("#whoami"), who.operator ? "operator · all tenants (" + who.tenants.join(", ") + ")" : "tenant " + who.tenant);
    refresh();
    timer = setInterval(refresh, 1000);
    $("#audit-section").hidden = !who.audit;
    if (who.audit) {
      loadAudit();
      auditTimer = setInterval(loadAudit, 5000);
    }
    // Usage changes once per sampling interval (10 s by default).
    $("#usage-section").hidden = !who.usage;
    if (who.usage) {
      loadUsage();
      usageTimer = setInterval(loadUsage, 10000);
    }
  }

  async function refresh() {
    try {
      overview = await api("GET", "/ui/api/overview");
      $("#banner").hidden = true;
      render(overview);
    } catch (e) {
      if (me) { $("#banner").hidden = false; setText($("#banner"), "refresh failed: " + e.message); }
    }
  }

  function dl(pairs) {
    const d = document.createElement("dl");
    for (const [k, v, cls] of pairs) {
      d.appendChild(el("dt", "", k));
      const dd = el("dd", "", String(v));
      if (cls) { const b = el("span", "badge " + cls, String(v)); dd.textContent = ""; dd.appendChild(b); }
      d.appendChild(dd);
    }
    return d;
  }

  const sum = (o) => Object.values(o || {}).reduce((a, b) => a + b, 0);

  function render(ov) {
    const now = t0(ov.now);
    const h = ov.health;
    $("#health").replaceChildren(dl([
      ["status", h.draining ? "draining" : h.ready ? "ready" : "not ready", h.ready ? "ok" : "bad"],
      ["version", h.version],
      ["uptime", dur(now - t0(h.started))],
    ]));
    if (h.readyError) $("#health").appendChild(el("p", "error", h.readyError));
    for (const w of h.warnings || []) $("#health").appendChild(el("p", "error", "warning: " + w));
    const m = ov.metrics;
    $("#m-calls").replaceChildren(dl([
      ["total", sum(m.toolCalls)], ["ok", m.toolCalls.ok || 0], ["error", m.toolCalls.error || 0],
      ["limited", m.toolCalls.limited || 0], ["in flight", m.callsInFlight],
    ]));
    $("#m-decisions").replaceChildren(dl([
      ["allow", m.decisions.allow || 0], ["deny", m.decisions.deny || 0],
      ["approved", m.decisions.approved || 0], ["denied", m.decisions.denied || 0],
      ["kills", sum(m.kills)],
    ]));
    const nowPairs = [["sessions", ov.sessions.length], ["running tasks", m.runningTasks],
      ["pending approvals", ov.approvals.filter((a) => a.state === "pending").length]];
    if (m.errors) nowPairs.push(["request errors", sum(m.errors)]);
    $("#m-now").replaceChildren(dl(nowPairs));
    renderApprovals(ov, now);
    renderSessions(ov, now);
    renderTasks(ov, now);
  }

  // Approvals keep their DOM node while pending, so a reason being typed
  // survives the refresh.
  function renderApprovals(ov, now) {
    const box = $("#approvals");
    const pending = ov.approvals.filter((a) => a.state === "pending");
    const keep = new Set(pending.map((a) => a.tenant + "/" + a.id));
    for (const n of Array.from(box.children)) if (!keep.has(n.dataset.key)) n.remove();
    for (const a of pending) {
      const key = a.tenant + "/" + a.id;
      let n = box.querySelector('[data-key="' + CSS.escape(key) + '"]');
      if (!n) { n = approvalCard(a); box.appendChild(n); }
      setText(n.querySelector(".deadline"), a.deadline ? "expires in " + dur(t0(a.deadline) - now) : "");
    }
    $("#approvals-empty").hidden = pending.length > 0;
    setText($("#pending-count"), pending.length ? String(pending.length) : "");
    const decided = $("#decided");
    decided.replaceChildren();
    for (const a of ov.approvals.filter((x) => x.state !== "pending")) {
      const d = el("div", "approval decided");
      d.dataset.id = a.id;
      const meta = el("div", "meta");
      meta.appendChild(el("span", "badge " + a.state, a.state));
      meta.appendChild(document.createTextNode(" "));
      meta.appendChild(el("span", "", a.tenant + "/" + a.session + " · " + a.tool + (a.background ? " · background" : "") + " · rule " + a.rule +
        (a.approver ? " · by " + a.approver : "") + (a.decisionReason ? " · “" + a.decisionReason + "”" : "")));
      d.appendChild(meta);
      d.appendChild(el("div", "cmd", a.command));
      decided.appendChild(d);
    }
  }

  function field(name, value, cls) {
    const f = el("div", "field");
    f.appendChild(el("b", "", name));
    const v = el("span", cls || "");
    const hidden = setText(v, value || "—");
    f.appendChild(v);
    return [f, hidden];
  }

  // runs says how an approved call runs: in the background no timeout
  // ends it, and a granted permission lasts as long as the task.
  function runs(a) {
    const perms = (a.permissions || []).length ? "; the permissions granted last until the " +
      (a.background ? "task" : "call") + " ends" : "";
    if (a.background) return "in the background: no timeout ends it" + perms;
    return "in the foreground, timeout " + (a.timeoutMs >= 1000 ? dur(a.timeoutMs) : a.timeoutMs > 0 ? a.timeoutMs + "ms" : "the default") + perms;
  }

  function approvalCard(a) {
    const n = el("div", "approval pending");
    n.dataset.key = a.tenant + "/" + a.id;
    n.dataset.id = a.id;
    const meta = el("div", "meta");
    meta.appendChild(el("span", "badge pending", "pending"));
    meta.appendChild(document.createTextNode(" "));
    meta.appendChild(el("span", "", a.tenant + "/" + a.session + " · " + a.tool + " · " + a.id + " · "));
    meta.appendChild(el("span", "deadline"));
    n.appendChild(meta);
    const cmd = el("div", "cmd");
    const hidden = setText(cmd, a.command);
    n.appendChild(cmd);
    if (hidden) n.appendChild(el("div", "warning", "This command holds control, bidi or invisible characters (marked): what runs may not be what it looks like."));
    for (const [name, v, cls] of [["Runs", runs(a), a.background ? "runs background" : "runs"],
      ["Justification", a.justification, "just"], ["Rule", a.rule, "rule"],
      ["Rule's reason", a.reason, "reason"], ["Workdir", a.workdir, "cmd"],
      ["Permissions", (a.permissions || []).join(", "), "perms"]]) {
      if (!v && (name === "Workdir" || name === "Permissions")) continue;
      const [f, h] = field(name, v, cls);
      n.appendChild(f);
      if (h) n.appendChild(el("div", "warning", name + " holds hidden characters (marked)."));
    }
    const actions = el("div", "actions");
    const reason = document.createElement("input");
    reason.placeholder = "reason (optional; the model sees it on deny)";
    reason.className = "reason";
    reason.maxLength = 1024;
    const ok = el("button", "approve", "Approve");
    const no = el("button", "deny", "Deny");
    const status = el("span", "muted status");
    const decide = async (verb) => {
      ok.disabled = no.disabled = true;
      try {
        await api("POST", "/ui/api/approvals/" + encodeURIComponent(a.tenant) + "/" + encodeURIComponent(a.id) + "/" + verb, { reason: reason.value });
        setText(status, verb === "approve" ? "approved" : "denied");
        refresh();
      } catch (e) {
        setText(status, e.message);
        ok.disabled = no.disabled = false;
      }
    };
    ok.addEventListener("click", () => decide("approve"));
    no.addEventListener("click", () => decide("deny"));
    actions.append(reason, ok, no, status);
    n.appendChild(actions);
    return n;
  }

  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      if (c instanceof Node) { const td = document.createElement("td"); td.appendChild(c); tr.appendChild(td); continue; }
      const [text, cls] = Array.isArray(c) ? c : [c, ""];
      tr.appendChild(el("td", cls, text));
    }
    return tr;
  }

  function renderSessions(ov, now) {
    const tb = $("#sessions tbody");
    tb.replaceChildren();
    let noIdle = false;
    for (const s of ov.sessions) {
      const last = t0(s.lastCall) || 0;
      if (!last) noIdle = true;
      const state = el("span", "badge " + (s.state === "running" ? "running" : ""), s.state || "?");
      const tr = row([s.tenant, s.id, s.image || "(local: none)", s.runtime || "—", state,
        s.created ? dur(now - t0(s.created)) : "—", last ? dur(now - last) : "—", ago(s.lastCall, now)]);
      tr.dataset.tenant = s.tenant;
      tr.dataset.session = s.id;
      tb.appendChild(tr);
    }
    const notes = [];
    if (!ov.sessions.length) notes.push("No sessions.");
    if (noIdle) notes.push("Idle is the time since the last tool call through this server; “—”: none since it started (the backend does not report when a sandbox was last used).");
    for (const [t, e] of Object.entries(ov.errors || {})) notes.push("tenant " + t + ": " + e);
    setText($("#sessions-note"), notes.join(" "));
  }

  function renderTasks(ov, now) {
    const tb = $("#tasks tbody");
    tb.replaceChildren();
    for (const t of ov.tasks) {
      const st = t.status || {};
      let label = st.state || "?";
      if (st.state === "completed") label += " (exit " + st.exitCode + ")";
      if (st.signal) label += " (" + st.signal + ")";
      const btn = el("button", "small tail", ov.peek ? "Watch output" : "Status only");
      btn.disabled = !ov.peek;
      btn.addEventListener("click", () => openTail(t));
      const tr = row([t.tenant, t.session, t.id, [t.command, "cmd"], el("span", "badge " + st.state, label), ago(t.started, now), btn]);
      tr.dataset.task = t.id;
      tr.dataset.tenant = t.tenant;
      tb.appendChild(tr);
    }
    const notes = [];
    if (!ov.tasks.length) notes.push("No background tasks started through this server.");
    if (!ov.peek) notes.push("This backend cannot read a task's output without consuming the model's bash_output cursor, so only status is shown.");
    setText($("#tasks-note"), notes.join(" "));
  }

  function openTail(t) {
    tail = { tenant: t.tenant, session: t.session, id: t.id };
    setText($("#tail-title"), t.tenant + "/" + t.session + " " + t.id);
    $("#tail-panel").hidden = false;
    clearInterval(tailTimer);
    loadTail();
    tailTimer = setInterval(loadTail, 1000);
  }

  async function loadTail() {
    if (!tail) return;
    const t = tail;
    try {
      const p = await api("GET", "/ui/api/tasks/" + [t.tenant, t.session, t.id].map(encodeURIComponent).join("/"));
      if (tail !== t) return;
      const st = p.status || {};
      const s = $("#tail-status");
      s.className = "badge " + st.state;
      setText(s, st.state + (st.state === "completed" ? " (exit " + st.exitCode + ")" : "") + (st.signal ? " (" + st.signal + ")" : ""));
      const out = $("#tail-stdout"), err = $("#tail-stderr");
      const stick = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      setText(out, (p.stdout || "").replace(/\r\n/g, "\n"));
      setText(err, (p.stderr || "").replace(/\r\n/g, "\n"));
      if (stick) out.scrollTop = out.scrollHeight;
      if (st.state && st.state !== "running") { clearInterval(tailTimer); tailTimer = null; }
    } catch (e) {
      setText($("#tail-status"), e.message);
    }
  }

  async function loadAudit() {
    try {
      const r = await api("GET", "/ui/api/audit?n=200");
      const tb = $("#audit tbody");
      tb.replaceChildren();
      const recs = r.records.slice().reverse(); // newest first
      for (const a of recs) {
        tb.appendChild(row([new Date(a.time).toISOString().replace("T", " ").slice(0, 19), a.tenant + "/" + a.session, a.tool,
          el("span", "badge " + a.decision, a.decision), a.rule, a.approver || "", [a.command, "cmd"], a.reason || ""]));
      }
      setText($("#audit-note"), recs.length ? "Newest first, last " + recs.length + " decisions." : "No decisions recorded yet.");
    } catch (e) {
      if (e.status === 501) { clearInterval(auditTimer); auditTimer = null; }
      setText($("#audit-note"), e.message);
    }
  }

  // Usage: GET /ui/api/usage over the chosen range (whole UTC hours, the
  // store's unit), the tenants' sums, the sessions, and a chart of one
  // figure per tenant over time drawn as SVG here (no library: the
  // console works offline and loads nothing from elsewhere).
  const FIGURES = {
    cpu: { label: "CPU-seconds", of: (f) => f.cpuSeconds, fmt: (v) => v.toFixed(3) },
    hours: { label: "sandbox-hours", of: (f) => f.sandboxSeconds / 3600, fmt: (v) => v.toFixed(4) },
    mem: { label: "memory GiB-seconds", of: (f) => f.memoryGiBSeconds, fmt: (v) => v.toFixed(3) },
    calls: { label: "tool calls", of: (f) => f.calls || 0, fmt: (v) => String(v) },
    suspended: { label: "suspended hours", of: (f) => (f.suspendedSeconds || 0) / 3600, fmt: (v) => v.toFixed(4) },
    egress: { label: "egress MiB", of: (f) => ((f.egressSentBytes || 0) + (f.egressReceivedBytes || 0)) / 1048576, fmt: (v) => v.toFixed(3) },
  };
  const mib = (b) => (b > 0 ? (b / 1048576).toFixed(1) + " MiB" : "—");
  // size is a byte count as KiB under a MiB (egress, small spills), else
  // as mib does.
  const size = (b) => (b > 0 && b < 1048576 ? (b / 1024).toFixed(1) + " KiB" : mib(b));
  const PALETTE = ["#0969da", "#1a7f37", "#bf3989", "#9a6700", "#8250df", "#cf222e", "#1b7c83", "#57606a"];

  // usageCells are a figures' cells: [text, class] pairs, each figure's
  // class naming it (the browser test reads them).
  function usageCells(f) {
    return [[FIGURES.cpu.fmt(FIGURES.cpu.of(f)), "num u-cpu"], [FIGURES.hours.fmt(FIGURES.hours.of(f)), "num u-hours"],
      [FIGURES.mem.fmt(FIGURES.mem.of(f)), "num u-mem"], [mib(f.memoryPeakBytes), "num u-peak"],
      [String(f.calls || 0), "num u-calls"], [(f.callSeconds || 0).toFixed(1) + "s", "num u-callsec"],
      [((f.suspendedSeconds || 0) / 3600).toFixed(4), "num u-suspended"],
      [size(f.workspaceBytes || 0), "num u-ws"], [size(f.workspacePeakBytes || 0), "num u-wspeak"],
      [size(f.spillBytes || 0), "num u-spill"], [String(f.egressRequests || 0), "num u-egreq"],
      [size(f.egressSentBytes || 0), "num u-egsent"], [size(f.egressReceivedBytes || 0), "num u-egrecv"]];
  }

  function usageRange() {
    const hours = Number($("#usage-range").value) || 24;
    const to = new Date(Math.ceil(Date.now() / 3600000) * 3600000);
    const from = new Date(to.getTime() - hours * 3600000);
    return { from: from.toISOString().replace(/\.\d+Z$/, "Z"), to: to.toISOString().replace(/\.\d+Z$/, "Z") };
  }

  async function loadUsage() {
    const rg = usageRange();
    const q = "from=" + encodeURIComponent(rg.from) + "&to=" + encodeURIComponent(rg.to);
    $("#usage-csv").href = "/ui/api/usage?format=csv&" + q;
    try {
      usageData = await api("GET", "/ui/api/usage?" + q);
      $("#usage-body").hidden = false;
      renderUsage(usageData);
    } catch (e) {
      if (e.status === 501) {
        clearInterval(usageTimer); usageTimer = null;
        $("#usage-body").hidden = true;
        $("#usage-csv").hidden = true;
      }
      setText($("#usage-note"), e.message);
    }
  }

  function renderUsage(u) {
    const tenants = Object.keys(u.tenants).sort();
    const tb = $("#usage-tenants tbody");
    tb.replaceChildren();
    for (const t of tenants) {
      const tr = row([t, [String(u.tenantSessions[t] || 0), "num u-sessions"]].concat(usageCells(u.tenants[t])));
      tr.dataset.tenant = t;
      tb.appendChild(tr);
    }
    const sb = $("#usage-sessions tbody");
    sb.replaceChildren();
    for (const s of u.sessions) {
      const tr = row([s.tenant, s.session, new Date(s.from).toISOString().replace("T", " ").slice(0, 16)].concat(usageCells(s), [s.final ? "yes" : "running"]));
      tr.dataset.tenant = s.tenant;
      tr.dataset.session = s.session;
      sb.appendChild(tr);
    }
    const notes = [];
    if (!tenants.length) notes.push("No use measured in this range.");
    if (u.sessionsTotal > u.sessions.length) notes.push("The " + u.sessions.length + " sessions that used the most CPU of " + u.sessionsTotal + " are listed; the tenants' sums and the CSV count all.");
    notes.push("Figures from the sandboxes' cgroups and workspace file systems, read every sampling interval; spills and egress as they happen; hours are UTC.");
    setText($("#usage-note"), notes.join(" "));
    drawChart(u, tenants);
  }

  // drawChart draws the chosen figure per tenant, stacked, one bar per
  // hour (per day past 7 days) of the range.
  function drawChart(u, tenants) {
    const svg = $("#usage-chart");
    const NS = svg.namespaceURI;
    const mk = (tag, attrs, text) => {
      const e = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
      if (text !== undefined) e.textContent = text;
      return e;
    };
    const fig = FIGURES[$("#usage-metric").value] || FIGURES.cpu;
    const from = t0(u.from), to = t0(u.to);
    const step = to - from > 7 * 86400000 ? 86400000 : 3600000;
    const n = Math.max(1, Math.ceil((to - from) / step));
    const stacks = []; // per slot: tenant → value
    for (let i = 0; i < n; i++) stacks.push({});
    for (const p of u.series) {
      const i = Math.floor((t0(p.hour) - from) / step);
      if (i < 0 || i >= n) continue;
      stacks[i][p.tenant] = (stacks[i][p.tenant] || 0) + fig.of(p);
    }
    let top = 0;
    for (const st of stacks) top = Math.max(top, Object.values(st).reduce((a, b) => a + b, 0));
    const W = 960, H = 240, L = 64, R = 8, T = 12, B = 44;
    const pw = W - L - R, ph = H - T - B, bw = pw / n;
    const y = (v) => T + ph - (top > 0 ? (v / top) * ph : 0);
    const kids = [];
    kids.push(mk("line", { x1: L, y1: T + ph, x2: W - R, y2: T + ph, class: "axis" }));
    kids.push(mk("line", { x1: L, y1: T, x2: L, y2: T + ph, class: "axis" }));
    kids.push(mk("text", { x: L - 6, y: T + 10, "text-anchor": "end", class: "tick" }, fig.fmt(top)));
    kids.push(mk("text", { x: L - 6, y: T + ph, "text-anchor": "end", class: "tick" }, "0"));
    kids.push(mk("text", { x: 4, y: T + ph / 2, class: "tick" }, fig.label));
    const label = (ms) => new Date(ms).toISOString().replace("T", " ").slice(step === 3600000 ? 5 : 0, step === 3600000 ? 16 : 10);
    kids.push(mk("text", { x: L, y: H - B + 16, class: "tick" }, label(from)));
    kids.push(mk("text", { x: W - R, y: H - B + 16, "text-anchor": "end", class: "tick" }, label(to) + " UTC"));
    stacks.forEach((st, i) => {
      let base = 0;
      tenants.forEach((t, k) => {
        const v = st[t] || 0;
        if (v <= 0) return;
        const r = mk("rect", { x: (L + i * bw + 0.5).toFixed(2), y: y(base + v).toFixed(2), width: Math.max(1, bw - 1).toFixed(2),
          height: Math.max(0.5, y(base) - y(base + v)).toFixed(2), fill: PALETTE[k % PALETTE.length], class: "bar" });
        r.dataset.tenant = t;
        r.dataset.at = new Date(from + i * step).toISOString();
        r.dataset.v = String(v);
        r.appendChild(mk("title", {}, t + " · " + label(from + i * step) + " UTC · " + fig.fmt(v) + " " + fig.label));
        kids.push(r);
        base += v;
      });
    });
    let lx = L;
    tenants.forEach((t, k) => {
      kids.push(mk("rect", { x: lx, y: H - 16, width: 10, height: 10, fill: PALETTE[k % PALETTE.length] }));
      kids.push(mk("text", { x: lx + 14, y: H - 7, class: "tick" }, t));
      lx += 24 + 7 * t.length;
    });
    if (!tenants.length) kids.push(mk("text", { x: L + pw / 2, y: T + ph / 2, "text-anchor": "middle", class: "tick" }, "no use in this range"));
    svg.replaceChildren(...kids);
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("#login-form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const tok = $("#token").value.trim();
      $("#token").value = "";
      try {
        showApp(await api("POST", "/ui/api/login", { token: tok }));
      } catch (e) {
        setText($("#login-error"), e.message);
      }
    });
    $("#logout").addEventListener("click", async () => {
      try { await api("POST", "/ui/api/logout"); } catch (e) { /* gone anyway */ }
      showLogin("Logged out.");
    });
    $("#tail-close").addEventListener("click", () => {
      tail = null; clearInterval(tailTimer); tailTimer = null; $("#tail-panel").hidden = true;
    });
    $("#audit-refresh").addEventListener("click", loadAudit);
    $("#usage-refresh").addEventListener("click", loadUsage);
    $("#usage-range").addEventListener("change", loadUsage);
    $("#usage-metric").addEventListener("change", () => { if (usageData) renderUsage(usageData); });
    try {
      showApp(await api("GET", "/ui/api/me"));
    } catch (e) {
      showLogin("");
    }
  });
})();
