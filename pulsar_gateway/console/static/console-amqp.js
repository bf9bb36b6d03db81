// Pulsar Gateway console, AMQP pages: queues (with rates), exchanges, connections and
// channels, from the management API (/api/...). Registered with console.js.
"use strict";
(() => {
  const { pages, routes, state, getJson, table, n, button, when, esc, rate, chart, keep } = window.PulsarConsole;
  routes.push([/^\/queues$/, "queues"], [/^\/exchanges$/, "exchanges"], [/^\/connections$/, "connections"],
    [/^\/channels$/, "channels"]);

  // Rates: the API gives each queue's counters (message_stats, since its engine started);
  // the page keeps the previous reading per queue and the last hour of the totals.
  const COUNTERS = [["publish", "Publish"], ["deliver_get", "Deliver"], ["ack", "Ack"]];
  const previous = new Map(); // "vhost\0name" -> {t, stats}
  const totals = []; // {t, publish, deliver_get, ack}: sums over the queues shown
  function queueRates(queues, t) {
    const rates = new Map();
    const sum = { t, publish: 0, deliver_get: 0, ack: 0 };
    for (const q of queues) {
      const key = `${q.vhost}\0${q.name}`;
      const stats = q.message_stats || {};
      const before = previous.get(key);
      const dt = before ? (t - before.t) / 1000 : 0;
      const reset = !before || COUNTERS.some(([k]) => (stats[k] || 0) < (before.stats[k] || 0));
      rates.set(key, dt > 0 && !reset
        ? Object.fromEntries(COUNTERS.map(([k]) => [k, ((stats[k] || 0) - (before.stats[k] || 0)) / dt])) : null);
      previous.set(key, { t, stats });
      for (const [k] of COUNTERS) sum[k] += stats[k] || 0;
    }
    keep(totals, sum);
    return rates;
  }
  function totalSeries(k) {
    const out = [];
    for (let i = 1; i < totals.length; i += 1) {
      const dt = (totals[i].t - totals[i - 1].t) / 1000;
      if (dt > 0) out.push([totals[i].t, Math.max(0, (totals[i][k] - totals[i - 1][k]) / dt)]);
    }
    return out;
  }

  pages.queues = {
    title: "Queues",
    async update(el) {
      const queues = await getJson("/api/queues");
      const rates = queueRates(queues, Date.now());
      const admin = state.me.administrator;
      const r = (q, k) => {
        const found = rates.get(`${q.vhost}\0${q.name}`);
        return { cls: `num rate-${k}`, html: esc(found ? rate(found[k]) : "–") };
      };
      el.innerHTML = `<h1>AMQP queues</h1>
        <h2>Message rates, last hour (the queues listed)</h2>
        <div class="panel">${chart(COUNTERS.map(([k, label]) => ({ name: `${label} msg/s`, points: totalSeries(k) })))}</div>
        <h2>Queues</h2>` + table(
        ["Vhost", "Name", ["Ready", "num"], ["Unacked", "num"], ["Total", "num"], ["Consumers", "num"],
          ...COUNTERS.map(([, label]) => [`${label} /s`, "num"]), "Features", ""],
        queues.map((q) => [q.vhost, q.name, n(q.messages_ready), n(q.messages_unacknowledged), n(q.messages), n(q.consumers),
          ...COUNTERS.map(([k]) => r(q, k)),
          [q.durable ? "durable" : "transient", q.exclusive ? "exclusive" : "", q.auto_delete ? "auto-delete" : ""].filter(Boolean).join(" "),
          { html: admin ? button("Purge", { action: "purge_queue", vhost: q.vhost, queue: q.name }) + " " +
            button("Delete", { action: "delete_queue", vhost: q.vhost, queue: q.name }) : "" }]),
        "No queues you may see.");
    },
  };

  pages.channels = {
    title: "Channels",
    async update(el) {
      const channels = await getJson("/api/channels");
      const mode = (c) => [c.confirm ? "confirm" : "", c.transactional ? "transactional" : ""].filter(Boolean).join(", ") || "–";
      el.innerHTML = `<h1>AMQP channels</h1>` + table(
        ["Connection", ["Channel", "num"], "User", "Vhost", ["Prefetch", "num"], ["Global prefetch", "num"],
          ["Unacked", "num"], ["Consumers", "num"], "Mode", "State"],
        channels.map((c) => [c.connection_details.name, n(c.number), c.user, c.vhost, n(c.prefetch_count),
          n(c.global_prefetch_count), n(c.messages_unacknowledged), n(c.consumer_count), mode(c),
          { html: `<span class="${c.state === "running" ? "ok" : "warn"}">${esc(c.state)}</span>` }]),
        "No channels you may see.");
    },
  };

  pages.exchanges = {
    title: "Exchanges",
    async update(el) {
      const [vhosts, exchanges, bindings] = await Promise.all([
        getJson("/api/vhosts"), getJson("/api/exchanges"), getJson("/api/bindings")]);
      el.innerHTML = `<h1>AMQP vhosts, exchanges and bindings</h1>
        <h2>Vhosts</h2>${table(["Name", ["Messages", "num"], ["Ready", "num"], ["Unacked", "num"]],
          vhosts.map((v) => [v.name, n(v.messages), n(v.messages_ready), n(v.messages_unacknowledged)]), "No vhosts open.")}
        <h2>Exchanges</h2>${table(["Vhost", "Name", "Type", "Features"],
          exchanges.map((x) => [x.vhost, x.name || "(default)", x.type,
            [x.durable ? "durable" : "transient", x.internal ? "internal" : "", x.auto_delete ? "auto-delete" : ""].filter(Boolean).join(" ")]))}
        <h2>Bindings</h2>${table(["Vhost", "Source", "Destination", "Type", "Routing key"],
          bindings.map((b) => [b.vhost, b.source || "(default)", b.destination, b.destination_type, b.routing_key]))}`;
    },
  };

  pages.connections = {
    title: "Connections",
    async update(el) {
      const conns = await getJson("/api/connections");
      el.innerHTML = `<h1>AMQP connections</h1>` + table(
        ["Name", "User", "Vhost", ["Channels", "num"], "State", "TLS", "Connected", ""],
        conns.map((c) => [c.name, c.user, c.vhost, n(c.channels), c.state, c.ssl ? "yes" : "no", when(c.connected_at),
          { html: state.me.administrator || c.user === state.me.user ? button("Close", { action: "close_connection", name: c.name }) : "" }]),
        "No connections you may see.");
    },
  };
})();
