// Pulsar Gateway console: one page, hash routes, no dependencies (docs/console.md). This
// script holds the machinery, the overview, Kafka and cluster pages; console-*.js the rest.
// Every list is read from the gateway's JSON (/console/api/..., /api/..., /cluster) with
// the browser's login; numbers refresh every POLL_MS; the last hour of rates, memory and
// group lag is kept here, in memory, bounded by HISTORY_POINTS per series.
"use strict";
(() => {
  const POLL_MS = 5000;
  const HOUR_MS = 3600 * 1000;
  const HISTORY_POINTS = 800;
  const MAX_LAG_GROUPS = 50;
  const state = {
    me: null,
    overview: null,
    history: [], // {t, counters, rss}
    lag: new Map(), // group -> [{t, lag}]
    page: null,
    filter: "",
    timer: null,
    browser: { partition: 0, offset: 0, limit: 20, format: "text" },
  };

  // --- small helpers ---------------------------------------------------------------------
  const $ = (sel, root = document) => root.querySelector(sel);
  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ESCAPES[c]);
  const enc = encodeURIComponent;
  const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const rate = (n) => (n === null || n === undefined ? "–" : n < 10 ? n.toFixed(2) : num(Math.round(n)));
  function bytes(n) {
    if (!n) return "0 B";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }
  const when = (ms) => (ms > 0 ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "–");

  class HttpError extends Error {
    constructor(status, reason) { super(reason); this.status = status; }
  }
  async function getJson(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
    if (!r.ok) {
      let reason = r.statusText;
      try { reason = (await r.json()).reason || reason; } catch (e) { /* not JSON */ }
      throw new HttpError(r.status, reason);
    }
    return r.json();
  }
  async function act(body) {
    const r = await fetch("/console/api/actions", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Console": "1" },
      body: JSON.stringify(body),
    });
    const data = await r.json().catch(() => ({}));
    if (!r.ok) throw new HttpError(r.status, data.reason || r.statusText);
    return data;
  }
  function toast(text, error = false) {
    const el = $("#toast");
    el.textContent = text;
    el.className = error ? "toast error" : "toast";
    el.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { el.hidden = true; }, 5000);
  }
  function table(headers, rows, empty = "Nothing to show.") {
    const head = headers.map((h) => {
      const [label, cls] = Array.isArray(h) ? h : [h, ""];
      return `<th class="${cls}">${esc(label)}</th>`;
    }).join("");
    const body = rows.length
      ? rows.map((cells) => `<tr>${cells.map((c) => (typeof c === "object" && c !== null
        ? `<td class="${c.cls || ""}">${c.html}</td>` : `<td>${esc(c)}</td>`)).join("")}</tr>`).join("")
      : `<tr><td colspan="${headers.length}" class="muted">${esc(empty)}</td></tr>`;
    return `<div class="tablewrap"><table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table></div>`;
  }
  const n = (value) => ({ cls: "num", html: esc(num(value)) });
  const link = (href, text) => ({ html: `<a href="${esc(href)}">${esc(text)}</a>` });
  const button = (label, data, cls = "") => {
    const attrs = Object.entries(data).map(([k, v]) => `data-${k}="${esc(v)}"`).join(" ");
    return `<button class="${cls}" ${attrs}>${esc(label)}</button>`;
  };
  const card = (label, value, cls = "") =>
    `<div class="card"><div class="label">${esc(label)}</div><div class="value ${cls}">${esc(value)}</div></div>`;

  // --- charts: inline SVG, drawn here ----------------------------------------------------
  function chart(series, unit = "") {
    const W = 640, H = 170, L = 56, B = 20, T = 8, R = 8;
    const now = Date.now();
    const x0 = now - HOUR_MS;
    let ymax = 0;
    for (const s of series) for (const [, v] of s.points) ymax = Math.max(ymax, v);
    ymax = ymax > 0 ? ymax * 1.1 : 1;
    const x = (t) => L + ((t - x0) / HOUR_MS) * (W - L - R);
    const y = (v) => T + (1 - v / ymax) * (H - T - B);
    const colors = ["#1f6feb", "#e36209", "#2e7d32", "#8250df"];
    let svg = `<svg class="chart" viewBox="0 0 ${W} ${H}" role="img">`;
    for (const frac of [0, 0.5, 1]) {
      const v = ymax * frac;
      svg += `<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#e6e9ef"/>`;
      svg += `<text x="${L - 4}" y="${y(v) + 3}" text-anchor="end">${esc(unit === "B" ? bytes(v) : rate(v))}</text>`;
    }
    for (const [label, t] of [["-60 min", x0], ["-30 min", now - HOUR_MS / 2], ["now", now]]) {
      svg += `<text x="${x(t)}" y="${H - 5}" text-anchor="${label === "now" ? "end" : "start"}">${label}</text>`;
    }
    series.forEach((s, i) => {
      const pts = s.points.filter(([t]) => t >= x0).map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
      if (pts.length) {
        const color = colors[i % colors.length];
        const [lx, ly] = pts[pts.length - 1].split(",");
        svg += `<polyline fill="none" stroke="${color}" stroke-width="1.6" points="${pts.join(" ")}"/>`;
        svg += `<circle cx="${lx}" cy="${ly}" r="2.5" fill="${color}"/>`;
      }
    });
    svg += "</svg>";
    const legend = series.map((s, i) => `<span><span class="swatch s${i}"></span>${esc(s.name)}</span>`).join("");
    return `<div class="legend">${legend}</div>${svg}`;
  }

  function keep(list, item) {
    list.push(item);
    const cutoff = Date.now() - HOUR_MS;
    while (list.length > HISTORY_POINTS || (list.length && list[0].t < cutoff)) list.shift();
  }

  // rates between consecutive overview samples, per counter
  function rates(key) {
    const h = state.history;
    const out = [];
    for (let i = 1; i < h.length; i += 1) {
      const dt = (h[i].t - h[i - 1].t) / 1000;
      if (dt > 0) out.push([h[i].t, Math.max(0, (h[i].counters[key] - h[i - 1].counters[key]) / dt)]);
    }
    return out;
  }
  const lastRate = (key) => { const r = rates(key); return r.length ? r[r.length - 1][1] : null; };

  async function pollOverview() {
    const o = await getJson("/console/api/overview");
    state.overview = o;
    keep(state.history, { t: o.time * 1000, counters: o.counters, rss: o.resident_bytes });
    return o;
  }

  // --- pages -----------------------------------------------------------------------------
  const pages = {};

  pages.overview = {
    title: "Overview",
    async update(el) {
      const o = state.overview || (await pollOverview());
      const health = o.health || {};
      const healthy = health.ok ? '<span class="ok">healthy</span>' : '<span class="bad">unhealthy</span>';
      const cards = [
        card("Kafka records in /s", rate(lastRate("kafka_records_in"))),
        card("Kafka records out /s", rate(lastRate("kafka_records_out"))),
        card("AMQP messages in /s", rate(lastRate("amqp_messages_in"))),
        card("AMQP messages out /s", rate(lastRate("amqp_messages_out"))),
        card("Kafka connections", num(o.connections.kafka)),
        card("AMQP connections", num(o.connections.amqp)),
        card("Memory (RSS)", bytes(o.resident_bytes)),
        card("Topics / groups / queues", `${num(o.totals.topics)} / ${num(o.totals.groups)} / ${num(o.totals.queues)}`),
      ].join("");
      const checks = Object.entries(health).filter(([k, v]) => k !== "ok" && typeof v !== "object")
        .map(([k, v]) => `<span class="tag">${esc(k)}: ${esc(typeof v === "object" ? JSON.stringify(v) : v)}</span>`).join(" ");
      const memory = state.history.map((s) => [s.t, s.rss]);
      el.innerHTML = `<h1>Overview</h1>
        <p>Broker and listeners: ${healthy} ${checks}</p>
        <p>Alarms: ${o.alarms.length ? o.alarms.map((a) => `<span class="bad">${esc(a)}</span>`).join(" · ")
          : '<span class="ok">none</span>'}</p>
        <div class="cards">${cards}</div>
        <div class="grid2">
          <div><h2>Rates, last hour</h2><div class="panel">${chart([
            { name: "Kafka in rec/s", points: rates("kafka_records_in") },
            { name: "Kafka out rec/s", points: rates("kafka_records_out") },
            { name: "AMQP in msg/s", points: rates("amqp_messages_in") },
            { name: "AMQP out msg/s", points: rates("amqp_messages_out") },
          ])}</div></div>
          <div><h2>Memory, last hour</h2><div class="panel">${chart([{ name: "RSS", points: memory }], "B")}</div></div>
        </div>
        <div class="grid2">
          <div><h2>Busiest topics</h2>${table(["Topic", ["Records in", "num"], ["Records out", "num"]],
            o.busiest_topics.map((t) => [link(`#/topics/${enc(t.name)}`, t.name), n(t.records_in), n(t.records_out)]),
            "No topics you may see.")}</div>
          <div><h2>Busiest queues</h2>${table(["Vhost", "Queue", ["Messages", "num"], ["Consumers", "num"]],
            o.busiest_queues.map((q) => [q.vhost, q.name, n(q.messages), n(q.consumers)]),
            "No queues you may see.")}</div>
        </div>`;
    },
  };

  // why a size may be missing, under the tables that show them
  const sizesNote = () => (state.me.topic_sizes
    ? "Sizes: bytes stored, from the broker's statistics (refreshed every few seconds; the embedded broker names only the partitions it has open)."
    : "Sizes: this backend cannot tell them (an external Pulsar without pulsar.admin_url).");

  pages.topics = {
    title: "Topics",
    mount(el) {
      const create = state.me.administrator ? button("Create topic…", { action: "create_topic" }, "primary") : "";
      el.innerHTML = `<h1>Kafka topics</h1>
        <div class="toolbar"><input id="filter" placeholder="Filter by name" value="${esc(state.filter)}"> ${create}</div>
        <div id="rows"></div>`;
      $("#filter", el).addEventListener("input", (e) => { state.filter = e.target.value; pages.topics.update(el); });
    },
    async update(el) {
      const topics = pages.topics.cache = await getJson("/console/api/topics");
      const f = state.filter.toLowerCase();
      const size = (b) => ({ cls: "num", html: esc(b === null || b === undefined ? "–" : bytes(b)) });
      const rows = topics.filter((t) => t.name.toLowerCase().includes(f)).map((t) => [
        link(`#/topics/${enc(t.name)}`, t.name), n(t.partitions), size(t.bytes), t.entry_format,
        Object.entries(t.configs).map(([k, v]) => `${k}=${v}`).join(", ") || "–",
        { html: state.me.administrator ? button("Delete", { action: "delete_topic", topic: t.name }) : "" },
      ]);
      $("#rows", el).innerHTML = `<p class="muted">${num(rows.length)} of ${num(topics.length)} topics</p>` +
        table(["Name", ["Partitions", "num"], ["Size", "num"], "Entry format", "Configs", ""], rows, "No topics you may see.") +
        `<p class="muted">${esc(sizesNote())}</p>`;
    },
  };

  pages.topic = {
    title: "Topic",
    mount(el, [name]) {
      const b = state.browser;
      el.innerHTML = `<h1>Topic <span id="topic-name">${esc(name)}</span></h1>
        <div id="info"></div>
        <h2>Messages</h2>
        <div class="toolbar">
          <label>Partition <input id="b-partition" type="number" min="0" value="${b.partition}"></label>
          <label>From offset <input id="b-offset" type="number" min="0" value="${b.offset}"></label>
          <label>Count <input id="b-limit" type="number" min="1" max="100" value="${b.limit}"></label>
          <label>Show as <select id="b-format">${["text", "json", "hex"].map((f) =>
            `<option ${f === b.format ? "selected" : ""}>${f}</option>`).join("")}</select></label>
          <button id="b-read" class="primary">Read</button>
          <button id="b-newest">Newest</button>
        </div>
        <div id="messages"><p class="muted">Reading…</p></div>`;
      const read = () => {
        b.partition = Number($("#b-partition").value) || 0;
        b.offset = Number($("#b-offset").value) || 0;
        b.limit = Number($("#b-limit").value) || 20;
        b.format = $("#b-format").value;
        browse(name);
      };
      $("#b-read", el).addEventListener("click", read);
      $("#b-newest", el).addEventListener("click", () => { // the last `count` records
        const partition = (pages.topic.data?.partitions || [])[Number($("#b-partition").value) || 0];
        const limit = Number($("#b-limit").value) || 20;
        if (partition && partition.high_watermark !== null) {
          $("#b-offset").value = Math.max(partition.log_start, partition.high_watermark - limit);
        }
        read();
      });
      $("#b-format", el).addEventListener("change", () => { b.format = $("#b-format").value; renderMessages(); });
      pages.topic.browsed = false;
    },
    async update(el, [name]) {
      const t = pages.topic.data = await getJson(`/console/api/topics/${enc(name)}`);
      const known = t.partitions.map((p) => p.bytes).filter((b) => b !== null && b !== undefined);
      const configs = Object.entries(t.configs).map(([k, v]) => `<span class="tag">${esc(k)}=${esc(v)}</span>`).join(" ") || "none";
      const del = state.me.administrator ? button("Delete topic", { action: "delete_topic", topic: t.name }, "danger") : "";
      $("#info", el).innerHTML = `<div class="cards">
          ${card("Partitions", num(t.partition_count))}${card("Entry format", t.entry_format)}
          ${card("Records", num(t.partitions.reduce((s, p) => s + (p.records || 0), 0)))}
          ${card("Size", known.length ? bytes(known.reduce((s, b) => s + b, 0)) : "–")}
        </div>
        <p>Topic id <code>${esc(t.topic_id)}</code> · configs: ${configs} ${del}</p>
        ${table([["Partition", "num"], ["Log start", "num"], ["High watermark", "num"], ["Records", "num"], ["Size", "num"]],
          t.partitions.map((p) => [n(p.partition), n(p.log_start), n(p.high_watermark),
            p.served_here === false ? "served by another member" : n(p.records),
            { cls: "num", html: esc(p.bytes === null || p.bytes === undefined ? "–" : bytes(p.bytes)) }]))}
        <p class="muted">${esc(sizesNote())}</p>`;
      if (!pages.topic.browsed) { // the first records, without asking, when they may be read
        pages.topic.browsed = true;
        if (t.may_read) browse(name);
        else $("#messages", el).innerHTML = '<p class="muted">Reading messages needs read on the topic.</p>';
      }
    },
  };

  let lastMessages = null;
  async function browse(name) {
    const b = state.browser;
    const out = $("#messages");
    try {
      lastMessages = await getJson(`/console/api/topics/${enc(name)}/messages?partition=${b.partition}&offset=${b.offset}&limit=${b.limit}`);
      renderMessages();
    } catch (e) {
      out.innerHTML = `<p class="bad">${esc(e.message)}</p>`;
    }
  }
  function decode(field, format) {
    if (field === null || field === undefined) return "<null>";
    const raw = atob(field.b64);
    const data = Uint8Array.from(raw, (c) => c.charCodeAt(0));
    const cut = field.size > data.length ? ` … (${num(field.size)} bytes)` : "";
    if (format === "hex") {
      const lines = [];
      for (let i = 0; i < data.length; i += 16) {
        const row = Array.from(data.slice(i, i + 16));
        lines.push(`${i.toString(16).padStart(6, "0")}  ${row.map((b) => b.toString(16).padStart(2, "0")).join(" ")}`);
      }
      return lines.join("\n") + cut;
    }
    const text = new TextDecoder("utf-8").decode(data);
    if (format === "json") {
      try { return JSON.stringify(JSON.parse(text), null, 2) + cut; } catch (e) { return text + cut; }
    }
    return text + cut;
  }
  function renderMessages() {
    const out = $("#messages");
    if (!out || !lastMessages) return;
    const m = lastMessages;
    const f = state.browser.format;
    const pre = (s) => ({ html: `<pre class="payload">${esc(s)}</pre>` });
    out.innerHTML = `<p class="muted">Partition ${num(m.partition)} from offset ${num(m.from)}
        (log ${num(m.log_start)} to ${num(m.high_watermark)}): ${num(m.records.length)} records</p>` +
      table([["Offset", "num"], "Timestamp", "Key", "Value", "Headers"], m.records.map((r) => [
        n(r.offset), when(r.timestamp), pre(decode(r.key, f)), pre(decode(r.value, f)),
        pre(r.headers.map(([k, v]) => `${k}: ${decode(v, f === "hex" ? "hex" : "text")}`).join("\n")),
      ]), "No records from this offset.");
  }

  pages.groups = {
    title: "Consumer groups",
    async update(el) {
      const groups = await getJson("/console/api/groups");
      el.innerHTML = `<h1>Consumer groups</h1>` + table(
        ["Group", "Protocol", "State", ["Members", "num"], ["Committed partitions", "num"]],
        groups.map((g) => [link(`#/groups/${enc(g.group)}`, g.group), g.kind, g.state, n(g.members), n(g.partitions)]),
        "No groups you may see.");
    },
  };

  pages.group = {
    title: "Consumer group",
    mount(el, [id]) {
      el.innerHTML = `<h1>Consumer group ${esc(id)}</h1><div id="group"></div><div id="reset"></div>`;
    },
    async update(el, [id]) {
      const g = await getJson(`/console/api/groups/${enc(id)}`);
      if (!state.lag.has(id) && state.lag.size >= MAX_LAG_GROUPS) state.lag.delete(state.lag.keys().next().value);
      const history = state.lag.get(id) || [];
      keep(history, { t: Date.now(), lag: g.lag });
      state.lag.set(id, history);
      const members = g.members.map((m) => [m.member_id, m.client_id, m.client_host,
        Object.entries(m.assignment).map(([t, ps]) => `${t}: ${ps.join(",")}`).join("; ") || "–"]);
      $("#group", el).innerHTML = `<div class="cards">${card("State", g.state)}${card("Protocol", g.kind)}
          ${card("Members", num(g.members.length))}${card("Total lag", num(g.lag), g.lag ? "warn" : "ok")}</div>
        <h2>Lag, last hour</h2><div class="panel">${chart([{ name: "lag (records)", points: history.map((s) => [s.t, s.lag]) }])}</div>
        <h2>Members</h2>${table(["Member", "Client id", "Host", "Assignment"], members, "No active members.")}
        <h2>Offsets</h2>${table(["Topic", ["Partition", "num"], ["Committed", "num"], ["High watermark", "num"], ["Lag", "num"]],
          g.offsets.map((o) => [link(`#/topics/${enc(o.topic)}`, o.topic), n(o.partition), n(o.committed), n(o.high_watermark), n(o.lag)]),
          "No committed offsets.")}`;
      if (state.me.administrator && !$("#reset button", el)) {
        const topics = [...new Set(g.offsets.map((o) => o.topic))];
        $("#reset", el).innerHTML = topics.length
          ? `<h2>Reset offsets</h2><div class="toolbar">${topics.map((t) =>
            button(`Reset ${t}…`, { action: "reset_offsets", group: id, topic: t })).join(" ")}</div>` : "";
      }
    },
  };

  pages.cluster = {
    title: "Cluster",
    async update(el) {
      if (!state.me.may_monitor) {
        el.innerHTML = `<h1>Cluster</h1><p class="muted">The cluster view needs an administrator or describe on the cluster.</p>`;
        return;
      }
      const c = await getJson("/cluster");
      const counts = c.owned_by_member || {};
      const kinds = Object.keys(counts);
      const owners = c.owners || {};
      const ownerRows = [];
      for (const kind of kinds) {
        for (const [key, member] of Object.entries(owners[kind] || {}).slice(0, 200)) ownerRows.push([kind, key, member]);
      }
      el.innerHTML = `<h1>Cluster</h1>
        <div class="cards">${card("Clustered", c.enabled ? "yes" : "no (one gateway)")}${card("This member", c.me)}
          ${card("Serving", c.serving ? "yes" : "no", c.serving ? "ok" : "bad")}${card("Epoch", num(c.epoch))}</div>
        <h2>Members</h2>${table(["Member", ["Node", "num"], "Kafka", "AMQP", ["HTTP port", "num"], ["Lease age (s)", "num"], ["Epoch", "num"], ""],
          (c.members || []).map((m) => [m.member_id, n(m.node_id), m.kafka, m.amqp, n(m.http_port),
            { cls: "num", html: esc((m.lease_age_seconds ?? 0).toFixed(1)) }, n(m.epoch), m.me ? "this one" : ""]))}
        <h2>Owned per member</h2>${table(["Member", ...kinds.map((k) => [k, "num"])],
          (c.members || []).map((m) => [m.member_id, ...kinds.map((k) => n((counts[k] || {})[m.member_id] || 0))]))}
        <h2>Owners</h2>${table(["Kind", "Key", "Member"], ownerRows, "Nothing owned yet.")}`;
    },
  };

  // --- actions ---------------------------------------------------------------------------
  function confirmDialog(text, fields = []) {
    const dialog = $("#confirm");
    $("#confirm-text").textContent = text;
    $("#confirm-fields").innerHTML = fields.map((f) => `<label for="f-${f.name}">${esc(f.label)}</label>` + (f.options
      ? `<select id="f-${f.name}">${f.options.map((o) => `<option>${esc(o)}</option>`).join("")}</select>`
      : `<input id="f-${f.name}" type="${f.type || "text"}" value="${esc(f.value ?? "")}">`)).join("");
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => {
        if (dialog.returnValue !== "ok") { resolve(null); return; }
        const values = {};
        for (const f of fields) values[f.name] = $(`#f-${f.name}`).value;
        resolve(values);
      }, { once: true });
      dialog.returnValue = "";
      dialog.showModal();
    });
  }

  const actions = {
    async create_topic() {
      const v = await confirmDialog("Create a Kafka topic", [
        { name: "topic", label: "Name" }, { name: "partitions", label: "Partitions", type: "number", value: 1 }]);
      return v && act({ action: "create_topic", topic: v.topic, partitions: Number(v.partitions) || 1 });
    },
    async delete_topic(d) {
      const v = await confirmDialog(`Delete topic "${d.topic}" and all its records? This cannot be undone.`);
      const done = v && await act({ action: "delete_topic", topic: d.topic });
      if (done && location.hash.startsWith("#/topics/")) location.hash = "#/topics";
      return done;
    },
    async reset_offsets(d) {
      const v = await confirmDialog(`Reset group "${d.group}" on topic "${d.topic}" (the group must have no active member)`, [
        { name: "to", label: "To", options: ["earliest", "latest", "timestamp"] },
        { name: "time", label: "Timestamp (for 'timestamp'; UTC)", type: "datetime-local" }]);
      if (!v) return null;
      const timestamp = v.time ? Date.parse(`${v.time}Z`) : 0;
      return act({ action: "reset_offsets", group: d.group, topic: d.topic, to: v.to, timestamp });
    },
    async purge_queue(d) {
      const v = await confirmDialog(`Purge every ready message of queue "${d.queue}" in vhost "${d.vhost}"?`);
      return v && act({ action: "purge_queue", vhost: d.vhost, queue: d.queue });
    },
    async delete_queue(d) {
      const v = await confirmDialog(`Delete queue "${d.queue}" in vhost "${d.vhost}" with its messages?`);
      return v && act({ action: "delete_queue", vhost: d.vhost, queue: d.queue });
    },
    async close_connection(d) {
      const v = await confirmDialog(`Close connection ${d.name}?`);
      return v && act({ action: "close_connection", name: d.name });
    },
  };

  document.addEventListener("click", async (event) => {
    const target = event.target.closest("button[data-action]");
    if (!target) return;
    event.preventDefault();
    const run = actions[target.dataset.action];
    if (!run) return;
    try {
      const done = await run(target.dataset);
      if (done) {
        toast(`Done: ${JSON.stringify(done)}`);
        refresh();
      }
    } catch (e) {
      toast(`Refused: ${e.message}`, true);
    }
  });

  // --- routing and polling ---------------------------------------------------------------
  // [path pattern, page name]; the other scripts (console-*.js) add theirs
  const routes = [
    [/^\/?$/, "overview"], [/^\/topics$/, "topics"], [/^\/topics\/(.+)$/, "topic"],
    [/^\/groups$/, "groups"], [/^\/groups\/(.+)$/, "group"], [/^\/cluster$/, "cluster"],
  ];

  function current() {
    const path = location.hash.replace(/^#/, "") || "/";
    for (const [re, name] of routes) {
      const m = path.match(re);
      if (m) return { name, args: m.slice(1).map(decodeURIComponent) };
    }
    return { name: "overview", args: [] };
  }

  // Each visit renders into a view of its own: a read that finishes after the user moved
  // on writes into a view no longer on the page.
  async function refresh() {
    const page = state.page;
    const el = page.view;
    if (page.busy) return; // one read of a page at a time
    page.busy = true;
    try {
      await pages[page.name].update(el, page.args);
      const stale = $("#page-error", el);
      if (stale) stale.remove();
    } catch (e) {
      if (e.status === 404) page.gone = true; // asked again only when navigated to
      const note = e.status === 404 ? "Not found, or not yours to see." : e.message;
      if (!pages[page.name].mount) el.innerHTML = `<h1>${esc(pages[page.name].title)}</h1>`;
      let box = $("#page-error", el);
      if (!box) {
        el.insertAdjacentHTML("beforeend", '<p id="page-error" class="bad"></p>');
        box = $("#page-error", el);
      }
      box.textContent = note;
    } finally {
      page.busy = false;
    }
  }

  async function navigate() {
    const page = current();
    if (page.name === "topic" && state.browser.topic !== page.args[0]) {
      Object.assign(state.browser, { topic: page.args[0], partition: 0, offset: 0 });
    }
    const { name, args } = page;
    document.title = `${pages[name].title} · Pulsar Gateway`;
    for (const a of document.querySelectorAll("#nav a")) {
      const nav = pages[name].nav || (name === "overview" ? "" : name.replace(/^(topic|group)$/, "$1s"));
      a.classList.toggle("active", a.getAttribute("href") === `#/${nav}`);
    }
    const root = $("#page");
    root.innerHTML = "";
    delete root.dataset.loaded;
    page.view = document.createElement("div");
    root.appendChild(page.view);
    state.page = page;
    lastMessages = null;
    if (pages[name].mount) pages[name].mount(page.view, args);
    await refresh();
    if (state.page === page) root.dataset.loaded = name;
  }

  async function tick() {
    try { await pollOverview(); } catch (e) { /* the page's own read shows the failure */ }
    // a page being typed into or asked about waits for the next tick
    const open = document.querySelector("dialog[open]");
    const typing = document.activeElement && ["INPUT", "SELECT"].includes(document.activeElement.tagName);
    const page = state.page;
    if (!open && !typing && page && !page.gone && state.page === page) await refresh();
  }

  async function start() {
    state.me = await getJson("/console/api/me");
    $("#who").textContent = `${state.me.user}${state.me.administrator ? " (administrator)" : ""}`;
    for (const a of document.querySelectorAll("#nav a[data-needs]")) {
      if (!state.me[a.dataset.needs]) a.hidden = true;
    }
    await pollOverview();
    window.addEventListener("hashchange", navigate);
    await navigate();
    setTimeout(tick, 1500); // a second sample soon: rates need two
    state.timer = setInterval(tick, POLL_MS);
  }

  // The page scripts loaded after this one (console-*.js) register their pages, routes and
  // actions here; the console starts once they all ran.
  window.PulsarConsole = {
    state, pages, routes, actions, refresh, confirmDialog, HOUR_MS,
    $, esc, enc, num, rate, bytes, when, getJson, act, toast, table, n, link, button, card, chart, keep,
  };
  document.addEventListener("DOMContentLoaded", () => start().catch((e) => {
    $("#page").innerHTML = `<p class="bad">The console could not start: ${esc(e.message)}</p>`;
  }));
})();
