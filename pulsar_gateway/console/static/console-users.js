// Pulsar Gateway console, users page: users and their rights (/console/api/users), and for
// an administrator the changes `pulsar-gateway users` makes (add, password, remove, grant,
// revoke), each through a confirmation dialog. Registered with console.js.
"use strict";
(() => {
  const { pages, routes, actions, state, getJson, act, table, button, esc, confirmDialog } = window.PulsarConsole;
  routes.push([/^\/users$/, "users"]);
  let listing = { resources: [], operations: {} };

  // one ACL rule as Kafka's tools print it: ALLOW topic PREFIXED team-a/ read (from a host)
  const ruleText = (a) => `${a.permission} ${a.resource} ${a.pattern} ${a.name}: ${a.operation}` +
    (a.host === "*" ? "" : ` from ${a.host}`);
  const ruleData = (a) => ({ rresource: a.resource, rpattern: a.pattern, rname: a.name,
    roperation: a.operation, rpermission: a.permission, rhost: a.host });

  pages.users = {
    title: "Users",
    async update(el) {
      const u = listing = await getJson("/console/api/users");
      const edit = u.editable;
      const rows = u.users.map((r) => {
        const mine = edit && r.source === "users store";
        const grants = r.acls.map((a) => `<span class="tag">${esc(ruleText(a))}</span>` + (mine
          ? " " + button("Revoke", { action: "revoke", user: r.user, text: ruleText(a), ...ruleData(a) }, "small")
          : "")).join("<br>") || "–";
        const superuser = r.superuser ? "yes" + (mine
          ? " " + button("Revoke", { action: "revoke", user: r.user, resource: "superuser", pattern: "", text: "superuser" }, "small") : "") : "no";
        const tools = mine ? [
          button("Set password…", { action: "set_password", user: r.user }),
          button("Grant…", { action: "grant", user: r.user }),
          button("Remove…", { action: "remove_user", user: r.user }),
        ].join(" ") : "";
        return [r.user, r.source, { html: superuser }, { html: grants }, { html: tools }];
      });
      el.innerHTML = `<h1>Users and rights</h1>
        ${edit ? `<div class="toolbar">${button("Add user…", { action: "create_user" }, "primary")}</div>`
          : '<p class="muted">Read-only here: an administrator changes users and rights (or <code>pulsar-gateway users</code>).</p>'}
        ${table(["User", "Source", "Superuser", "ACL rules", ""], rows, "No users you may see.")}
        <p class="muted">Operations: namespace or topic ${esc((u.operations.topic || []).join(", "))}; group
          ${esc((u.operations.group || []).join(", "))}; cluster ${esc((u.operations.cluster || []).join(", "))};
          transactional id ${esc((u.operations.transactional_id || []).join(", "))}; and <code>admin</code>
          (create, delete, alter) or <code>all</code>. A grant adds ALLOW rules for every host; deny and
          host rules come from Kafka's CreateAcls or <code>pulsar-gateway users grant --deny --host</code>.</p>`;
    },
  };

  const password = [
    { name: "password", label: "Password", type: "password" },
    { name: "again", label: "Password again", type: "password" },
  ];
  function samePasswords(v) {
    if (v.password !== v.again) throw new Error("the passwords differ");
    return v.password;
  }

  Object.assign(actions, {
    async create_user() {
      const v = await confirmDialog("Add a user (it may log in to Kafka SASL, AMQP and this console)",
        [{ name: "user", label: "Name" }, ...password]);
      return v && act({ action: "create_user", user: v.user, password: samePasswords(v) });
    },
    async set_password(d) {
      const v = await confirmDialog(`Set a new password for "${d.user}"`, password);
      return v && act({ action: "set_password", user: d.user, password: samePasswords(v) });
    },
    async remove_user(d) {
      const v = await confirmDialog(`Remove user "${d.user}" and its rights?`);
      return v && act({ action: "remove_user", user: d.user });
    },
    async grant(d) {
      const v = await confirmDialog(`Grant rights to "${d.user}"`, [
        { name: "resource", label: "On", options: listing.resources },
        { name: "pattern", label: "Pattern (namespace tenant/ns, tenant/* or *; topic, group or id: name, prefix* or *)" },
        { name: "operations", label: "Operations (comma separated)", value: "read,write,describe" },
      ]);
      if (!v) return null;
      const operations = v.operations.split(",").map((o) => o.trim()).filter(Boolean);
      return act({ action: "grant", user: d.user, resource: v.resource, pattern: v.pattern, operations });
    },
    async revoke(d) {
      const v = await confirmDialog(`Revoke "${d.text}" from "${d.user}"?`);
      if (!v) return null;
      if (d.resource === "superuser") return act({ action: "revoke", user: d.user, resource: "superuser", operations: [] });
      const rule = { resource: d.rresource, pattern: d.rpattern, name: d.rname, operation: d.roperation,
        permission: d.rpermission, host: d.rhost };
      return act({ action: "revoke", user: d.user, rule });
    },
  });
})();
