"""Vhost -> namespace: every vhost its own namespace, a legal Pulsar name, and reversible
(docs/pulsar-mapping.md, 'Vhosts and namespaces')."""

from __future__ import annotations

import re

import pytest

from pulsar_gateway.storage.amqp.vhost_names import escape, namespace_of, unescape, vhost_of

# Pulsar's NamedEntity rule for tenant, namespace and topic names
PULSAR_NAME = re.compile(r"^[-=:.\w]+$")

VHOSTS = [
    "/",
    "default",
    "Default",
    "=64efault",
    "%2F",
    "=2F",
    "",
    "=",
    ".",
    "..",
    "...",
    "a/b",
    "a=2Fb",
    "__gateway",
    "production",
    "prod.eu-1",
    "vh with spaces",
    "ünïcode/ホスト",
    "x" * 255,
    "tab\tand\nnewline",
]


def test_every_vhost_has_a_namespace_of_its_own() -> None:
    namespaces = [namespace_of(vhost) for vhost in VHOSTS]
    assert len(set(namespaces)) == len(VHOSTS), dict(zip(VHOSTS, namespaces, strict=True))


@pytest.mark.parametrize("vhost", VHOSTS)
def test_namespace_is_legal_and_reversible(vhost: str) -> None:
    namespace = namespace_of(vhost)
    assert PULSAR_NAME.match(namespace), namespace
    assert namespace not in (".", "..")
    assert vhost_of(namespace) == vhost


def test_the_documented_examples() -> None:
    assert namespace_of("/") == "default"  # where KoP and AoP users look for it
    assert namespace_of("default") == "=64efault"
    assert namespace_of("prod.eu-1") == "prod.eu-1"  # plain names keep their earlier namespace
    assert namespace_of("a/b") == "a=2Fb"
    assert namespace_of("") == "="
    assert namespace_of(".") == "=2E"


@pytest.mark.parametrize("text", ["=", "=2f", "a=2", "a b", "=FF"])
def test_unescape_refuses_what_escape_cannot_write(text: str) -> None:
    with pytest.raises(ValueError):
        unescape(text)


def test_escape_round_trips_any_text() -> None:
    for name in VHOSTS:
        assert unescape(escape(name)) == name
