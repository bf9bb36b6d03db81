"""Pulsar service URLs: `pulsar://host:port` and `pulsar+ssl://host:port`, possibly with
several hosts (`pulsar://a:6650,b:6650`), tried in order."""

from __future__ import annotations

from typing import NamedTuple

DEFAULT_PORT = 6650
DEFAULT_TLS_PORT = 6651


class BrokerUrl(NamedTuple):
    host: str
    port: int
    tls: bool

    def __str__(self) -> str:
        scheme = "pulsar+ssl" if self.tls else "pulsar"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"


def parse_service_url(url: str) -> list[BrokerUrl]:
    """Every broker a service URL names; ValueError for anything else."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme not in ("pulsar", "pulsar+ssl"):
        raise ValueError(f"not a pulsar:// or pulsar+ssl:// URL: {url!r}")
    tls = scheme == "pulsar+ssl"
    rest = rest.rstrip("/")
    brokers = []
    for part in rest.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon:
            host, port = part.strip(), ""
        host = host.strip("[]")
        if not host:
            raise ValueError(f"no host in {url!r}")
        try:
            number = int(port) if port else (DEFAULT_TLS_PORT if tls else DEFAULT_PORT)
        except ValueError:
            raise ValueError(f"bad port in {url!r}") from None
        if not 0 < number < 65536:
            raise ValueError(f"bad port in {url!r}")
        brokers.append(BrokerUrl(host, number, tls))
    return brokers


def parse_broker_url(url: str) -> BrokerUrl:
    """The one broker a lookup answer names."""
    brokers = parse_service_url(url)
    if len(brokers) != 1:
        raise ValueError(f"a lookup named several brokers: {url!r}")
    return brokers[0]
