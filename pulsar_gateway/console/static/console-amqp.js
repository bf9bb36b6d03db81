// Pulsar Gateway console, AMQP pages: queues (with rates), exchanges, connections and
// channels, from the management API (/api/...). Registered with console.js.
"use strict";
(() => {
  const { pages, routes, state, getJson, table, n, button, when, esc } = window.PulsarConsole;
  routes.push([/^\/queues$/, "queues"], [/^\/exchanges$/, "exchanges"], [/^\/connections$/, "connections"]);

  pages.queues = {
    title: "Queues",
    async update(el) {
      const queues = await getJson("/api/queues");
      const admin = state.me.administrator;
      el.innerHTML = `<h1>AMQP queues</h1>` + table(
        ["Vhost", "Name", ["Ready", "num"], ["Unacked", "num"], ["Total", "num"], ["Consumers", "num"], "Features", ""],
        queues.map((q) => [q.vhost, q.name, n(q.messages_ready), n(q.messages_unacknowledged), n(q.messages), n(q.consumers),
          [q.durable ? "durable" : "transient", q.exclusive ? "exclusive" : "", q.auto_delete ? "auto-delete" : ""].filter(Boolean).join(" "),
          { html: admin ? button("Purge", { action: "purge_queue", vhost: q.vhost, queue: q.name }) + " " +
            button("Delete", { action: "delete_queue", vhost: q.vhost, queue: q.name }) : "" }]),
        "No queues you may see.");
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
