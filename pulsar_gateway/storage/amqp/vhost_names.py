"""AMQP names -> Pulsar names: one reversible escaping, and one namespace per vhost.

`escape` keeps `[A-Za-z0-9._-]` and writes every other byte of the UTF-8 name as `=XX`
(upper-case hex), so `=` itself is `=3D`: no two names escape alike, and any escaped name
is legal in a Pulsar namespace or topic name (Pulsar allows `[-=:.\\w]`).

A vhost's namespace (below `amqp.tenant`) is its escaped name, except:

- vhost `/` is `default`, the namespace KoP and AoP users expect it in;
- so vhost `default` may not be `default`: its first character is escaped as well
  (`=64efault`). Likewise `.` and `..` (`=2E`, `=2E.`), which Pulsar's REST paths would
  read as path steps, and the empty name, which is `=`.

The extra escapes produce text `escape` never does (it never escapes `d` or `.`, and
never writes a lone `=`), so the mapping stays collision-free, and `vhost_of` undoes it.
docs/pulsar-mapping.md, 'Vhosts and namespaces', says what changed for existing data.
"""

from __future__ import annotations

import re

DEFAULT_VHOST = "/"
DEFAULT_NAMESPACE = "default"
EMPTY_NAME = "="  # the empty vhost name's namespace: a `=` with no hex after it
_PATH_STEPS = (".", "..")

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_ESCAPED = re.compile(r"=([0-9A-F]{2})")


def escape(name: str) -> str:
    """A Pulsar-safe, reversible name: anything outside [A-Za-z0-9._-] as =XX octets."""
    return _UNSAFE.sub(lambda m: "".join(f"={b:02X}" for b in m.group().encode()), name)


def unescape(text: str) -> str:
    """The name `escape` made `text` from; ValueError for text it cannot have made."""
    if _UNSAFE.search(_ESCAPED.sub("", text)):
        raise ValueError(f"'{text}' is not an escaped name")
    raw = bytearray()
    position = 0
    for match in _ESCAPED.finditer(text):
        raw += text[position : match.start()].encode()
        raw.append(int(match.group(1), 16))
        position = match.end()
    raw += text[position:].encode()
    return raw.decode()


def namespace_of(vhost: str) -> str:
    """The namespace name (without the tenant) that holds the vhost's queues."""
    if vhost == DEFAULT_VHOST:
        return DEFAULT_NAMESPACE
    escaped = escape(vhost)
    if not escaped:
        return EMPTY_NAME
    if escaped == DEFAULT_NAMESPACE or escaped in _PATH_STEPS:
        return f"={ord(escaped[0]):02X}{escaped[1:]}"
    return escaped


def vhost_of(namespace: str) -> str:
    """The vhost whose namespace is `namespace`: the inverse of `namespace_of`."""
    if namespace == DEFAULT_NAMESPACE:
        return DEFAULT_VHOST
    if namespace == EMPTY_NAME:
        return ""
    return unescape(namespace)
