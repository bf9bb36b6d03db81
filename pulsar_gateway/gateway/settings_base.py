"""What every settings section shares: the base model (unknown keys refused, values
checked on assignment, no infinite or NaN numbers) and the listener-address rules."""

from __future__ import annotations

import ipaddress
import re

from pydantic import BaseModel, ConfigDict


def is_loopback_host(host: str) -> bool:
    """A listener address only this machine reaches: `localhost` or a loopback IP. Any other
    name counts as reachable from elsewhere (it is not resolved here)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens
_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def is_host(host: str) -> bool:
    """An address a listener can bind: an IP address (IPv6 with its zone) or a host name;
    not a URL, a port, a list or a blank."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        numeric = host.replace(".", "").isdigit()  # 999.1.1.1 is no IP and no name
        return len(host) <= 253 and not numeric and _HOST_NAME.fullmatch(host) is not None


def is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_unspecified
    except ValueError:
        return False


class Section(BaseModel):
    # a duration or size of `inf` or `nan` would pass `gt=0` and mean nothing useful (a
    # timeout that never fires): refused like any other bad value, by name
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
