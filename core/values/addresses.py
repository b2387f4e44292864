"""Host names and addresses: what the HTTP service may listen on and what a Host header may name.

Standard library only, so that the settings and the container's health check read
COMPANION_HTTP_HOST and COMPANION_HTTP_ALLOWED_HOSTS without loading the web server.
"""

from __future__ import annotations

import ipaddress
import re

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def is_loopback(host: str) -> bool:
    """Whether `host` (an address, or `localhost`) is reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """0.0.0.0 or ::, which listen on every address."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def is_host_name(value: str) -> bool:
    """An IP address, or a DNS name of letters, digits and hyphens."""
    try:
        ipaddress.ip_address(value.strip("[]"))
        return True
    except ValueError:
        pass
    labels = value.lower().rstrip(".").split(".")
    return 0 < len(value) <= 253 and all(_LABEL.match(label) for label in labels)


def split_host_port(item: str) -> tuple[str | None, int | None]:
    """`name`, `name:port`, `[v6]`, `[v6]:port` or a bare IPv6 address; (None, None) when it
    cannot be read. The name comes back lower case, without brackets."""
    if item.startswith("["):
        name, bracket, rest = item[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None, None
        port = rest[1:]
    elif item.count(":") == 1:
        name, _, port = item.partition(":")
    else:
        name, port = item, ""
    if not port:
        return name.lower(), None
    if not port.isdigit():
        return None, None
    return name.lower(), int(port)
