// Pulsar Gateway console, migration pages: the progress of `pulsar-gateway migrate` runs and
// the reports of `pulsar-gateway parity`, as the tools left them in the gateway's data
// directory (/console/api/migrations, /console/api/parity/<id>). Registered with console.js.
"use strict";
(() => {
  const C = window.PulsarConsole;
  const { pages, routes, state, getJson, table, n, link, card, chart, keep, esc, enc, num, rate, when } = C;
  routes.push([/^\/migrations$/, "migrations"], [/^\/parity\/(.+)$/, "parity"]);
  const copied = new Map(); // migration name -> [{t, done}], the last hour
  const MAX_RUNS_CHARTED = 4;
  const PROBLEMS = [
    ["missing", "Lost"], ["extra", "Extra"], ["duplicate", "Duplicated"], ["order_break", "Reordered"],
    ["key_mismatch", "Key differs"], ["value_mismatch", "Value differs"], ["header_mismatch", "Headers differ"],
    ["timestamp_drift", "Timestamp drift"],
  ];
  const STATES = { done: "ok", failed: "bad", stopped: "bad", unreadable: "bad" };
  const stateCell = (s) => ({ html: `<span class="${STATES[s] || "warn"}">${esc(s)}</span>` });
  const verdictCell = (v) => ({ html: `<span class="${v === "pass" ? "ok" : "bad"}">${v === "pass" ? "parity" : "NO PARITY"}</span>` });
  const stamp = (t) => t.replace(/^(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d).*$/, "$1-$2-$3 $4:$5:$6 UTC");
  const ago = (s) => (s === null || s === undefined ? "–" : s < 90 ? `${Math.round(s)} s ago` : `${Math.round(s / 60)} min ago`);
  function bar(done, total) {
    const pct = total ? Math.min(100, (100 * done) / total) : 100;
    // an SVG bar: the page's Content-Security-Policy allows no inline style attribute
    return { html: `<svg class="bar" viewBox="0 0 100 6" preserveAspectRatio="none"><rect width="100" height="6" fill="#e6e9ef"/>
      <rect width="${pct.toFixed(2)}" height="6" fill="${done >= total ? "#2e7d32" : "#1f6feb"}"/></svg>
      <span class="muted">${esc(num(done))} / ${esc(num(total))} (${pct.toFixed(pct < 100 ? 1 : 0)}%)</span>` };
  }
  // records per second between the last two samples of a run, or its average when it ended
  function currentRate(run) {
    const h = copied.get(run.name) || [];
    if (run.state !== "copying" || h.length < 2) return run.records_per_second;
    const [a, b] = h.slice(-2);
    return b.t > a.t ? Math.max(0, (b.done - a.done) / ((b.t - a.t) / 1000)) : null;
  }
  function rates(name) {
    const h = copied.get(name) || [];
    const out = [];
    for (let i = 1; i < h.length; i += 1) {
      const dt = (h[i].t - h[i - 1].t) / 1000;
      if (dt > 0) out.push([h[i].t, Math.max(0, (h[i].done - h[i - 1].done) / dt)]);
    }
    return out;
  }

  pages.migrations = {
    title: "Migrations",
    async update(el) {
      if (!state.me.may_monitor) {
        el.innerHTML = `<h1>Migrations</h1><p class="muted">Migrations need an administrator or describe on the cluster.</p>`;
        return;
      }
      const m = await getJson("/console/api/migrations");
      const now = Date.now();
      for (const run of m.migrations) {
        if (run.done === undefined || run.done === null) continue;
        const h = copied.get(run.name) || [];
        const last = h[h.length - 1];
        if (!last || last.done !== run.done || run.state === "copying") keep(h, { t: now, done: run.done });
        copied.set(run.name, h);
      }
      const running = m.migrations.filter((r) => r.state === "copying" || r.state === "starting" || r.state === "groups");
      const charted = (running.length ? running : m.migrations).slice(0, MAX_RUNS_CHARTED);
      const left = (r) => {
        const speed = currentRate(r);
        if (r.state !== "copying" || !speed) return "–";
        const s = ((r.total || 0) - (r.done || 0)) / speed;
        return s < 90 ? `~${Math.ceil(s)} s` : s < 5400 ? `~${Math.ceil(s / 60)} min` : `~${(s / 3600).toFixed(1)} h`;
      };
      const runs = table(["Migration", "State", "Copied this run", ["Records/s", "num"], ["Time left", "num"], ["Partitions", "num"], ["Groups", "num"], "Updated", "Source → gateway"],
        m.migrations.map((r) => [r.name, stateCell(r.state), bar(r.done || 0, r.total || 0), { cls: "num", html: esc(rate(currentRate(r))) },
          { cls: "num", html: esc(left(r)) },
          { cls: "num", html: esc(`${num(r.partitions_finished)} / ${num(r.partition_count)}`) +
            (r.partitions_failed ? ` <span class="bad">${esc(num(r.partitions_failed))} failed</span>` : "") },
          n(r.groups), ago(r.updated_seconds_ago), `${r.source || "?"} → ${r.target || "?"}`]),
        "No migration has run against this gateway.");
      const errors = m.migrations.filter((r) => r.error).map((r) => `<p class="bad">${esc(r.name)}: ${esc(r.error)}</p>`).join("") +
        m.migrations.filter((r) => r.state === "stopped").map((r) => `<p class="warn">${esc(r.name)} stopped before its end (its process is
          gone): run <code>pulsar-gateway migrate --name ${esc(r.name)}</code> with the same topics again, it goes on where it stopped.</p>`).join("");
      const detail = m.migrations.filter((r) => r.partitions && r.partitions.length && r.state !== "done").slice(0, 4)
        .map((r) => `<h2>Partitions of ${esc(r.name)} (the unfinished first)</h2>` + table(["Topic", ["Partition", "num"], "Copied", "State"],
          r.partitions.map((p) => [p.topic, n(p.partition), bar(p.done, p.total),
            p.error ? { html: `<span class="bad">${esc(p.error)}</span>` } : p.finished ? stateCell("done") : stateCell("copying")]))).join("");
      const reports = table(["Time (UTC)", "Migration", "Verdict", ["Source records", "num"], ["Gateway records", "num"],
        ...PROBLEMS.slice(0, 4).map(([, label]) => [label, "num"]), ["Groups off", "num"], ""],
      m.parity.map((p) => [stamp(p.time).replace(" UTC", ""), p.migration, verdictCell(p.verdict),
        n(p.totals.source_records), n(p.totals.target_records), ...PROBLEMS.slice(0, 4).map(([k]) => n(p.totals[k])),
        n(p.groups_drifting), link(`#/parity/${enc(p.id)}`, "details")]),
      "No parity report yet: run pulsar-gateway parity.");
      el.innerHTML = `<h1>Migrations</h1>
        <p class="muted">What <code>pulsar-gateway migrate</code> and <code>parity</code> left in ${esc(m.directory || "the data directory")}.</p>
        <h2>Runs</h2>${runs}${errors}
        <h2>Copy rate, last hour</h2><div class="panel">${chart(charted.map((r) => ({ name: `${r.name} rec/s`, points: rates(r.name) })))}</div>
        ${detail}
        <h2>Parity reports</h2>${reports}`;
    },
  };

  function record(r) {
    if (!r) return { html: '<span class="muted">–</span>' };
    const headers = (r.headers || []).map(([k, v]) => `${k}=${v}`).join(", ");
    const text = `key: ${r.key}\nvalue: ${r.value}` + (headers ? `\nheaders: ${headers}` : "") + `\ntime: ${when(r.timestamp)}`;
    return { html: `<pre class="payload">${esc(text)}</pre>` };
  }

  pages.parity = {
    title: "Parity report",
    nav: "migrations",
    async update(el, [id]) {
      const p = await getJson(`/console/api/parity/${enc(id)}`);
      const t = p.totals;
      const html = state.me.administrator
        ? ` · <a id="parity-html" href="/console/reports/parity/${enc(p.id)}.html" target="_blank" rel="noopener">the HTML report</a>` : "";
      const kinds = PROBLEMS.filter(([k]) => t[k] || p.failing.some((f) => f[k]));
      el.innerHTML = `<h1>Parity report <span class="muted">${esc(stamp(p.time))}</span></h1>
        <p>Migration <b>${esc(p.migration)}</b>: ${esc(p.source)} → ${esc(p.target)}, ${esc(num(p.partitions))} partitions
          compared in ${esc(p.seconds)} s${html} · <a href="#/migrations">all migrations</a></p>
        <div class="cards">${card("Verdict", p.verdict === "pass" ? "parity" : "NO PARITY", p.verdict === "pass" ? "ok" : "bad")}
          ${card("Source records", num(t.source_records))}${card("Gateway records", num(t.target_records))}
          ${PROBLEMS.map(([k, label]) => card(label, num(t[k]), t[k] ? "bad" : "")).join("")}
          ${card("Groups off", num(p.groups_drifting), p.groups_drifting ? "bad" : "")}</div>
        <h2>Partitions that differ</h2>${table(["Topic", ["Partition", "num"], "Compared", ["Source", "num"], ["Gateway", "num"],
          ...kinds.map(([, label]) => [label, "num"])],
        p.failing.map((f) => [f.topic, n(f.partition), f.compared, n(f.source_records), n(f.target_records), ...kinds.map(([k]) => n(f[k]))]),
        "None: every partition holds the same records in the same order.")}
        <h2>Offending records (the first examples of each problem)</h2>${p.records_shown ? "" : '<p class="muted">Their contents are shown to administrators.</p>'}
        ${table(["Partition", "Problem", ["Source offset", "num"], ["Gateway offset", "num"], ...(p.records_shown ? ["Source record", "Gateway record"] : [])],
          p.offending.map((o) => [`${o.topic}-${o.partition}`, (PROBLEMS.find(([k]) => k === o.problem) || [0, o.problem])[1],
            n(o.source_offset), n(o.target_offset), ...(p.records_shown ? [record(o.source_record), record(o.target_record)] : [])]), "None.")}
        <h2>Consumer groups whose committed offsets drift</h2>${table(["Group", "Topic", ["Partition", "num"], ["Source committed", "num"],
          ["Expected", "num"], ["Gateway committed", "num"], ["Drift", "num"]],
          p.groups.map((g) => [g.group, g.topic, n(g.partition), n(g.source_committed), n(g.expected_target), n(g.target_committed), n(g.drift)]),
          "None.")}`;
    },
  };
})();
