"""Host names: what the service may listen on and which Host and Origin headers it answers.

Standard library only, so that the settings can check COMPANION_HTTP_HOST and
COMPANION_HTTP_ALLOWED_HOSTS without loading the web server.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

# A browser leaves out the port of its scheme's default from both Origin and Host.
_DEFAULT_PORTS = {"http": 80, "https": 443}
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


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The Host names the service answers to, each `name` or `name:port` (COMPANION_HTTP_ALLOWED_HOSTS).

    A Host header matches when its name equals an entry's name exactly (case aside) and, where
    the entry names a port, its port too: the defence against DNS rebinding, where a page of
    another site reaches this service under that site's name."""

    entries: frozenset[tuple[str, int | None]]

    @classmethod
    def parse(cls, items: frozenset[str] | set[str] | list[str]) -> AllowedHosts:
        entries = set()
        for item in items:
            name, port = split_host_port(item.strip())
            if name:
                entries.add((name.rstrip("."), port))
        return cls(frozenset(entries))

    @classmethod
    def default(cls, bound_host: str) -> AllowedHosts:
        """Unset: the bound host and localhost."""
        return cls.parse([bound_host if ":" not in bound_host else f"[{bound_host}]", "localhost"])

    def allows_host(self, header: str | None) -> bool:
        """Whether a Host header names this service."""
        if not header:
            return False
        name, port = split_host_port(header.strip())
        if not name:
            return False
        name = name.rstrip(".")
        return any(name == allowed and (want is None or want == port) for allowed, want in self.entries)

    def allows_origin(self, origin: str, host_header: str | None) -> bool:
        """Whether an Origin header (`scheme://host[:port]`) is this request's own origin: http or
        https, and the very host and port its Host header names (an absent port is the scheme's
        default on both sides), the Host being one this service answers to. A page on another port
        of the same host is another origin; `null` never is this one."""
        if not self.allows_host(host_header) or host_header is None:
            return False
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            return False
        if parts.scheme not in _DEFAULT_PORTS or not parts.netloc or parts.path not in ("", "/"):
            return False
        if parts.query or parts.fragment or "@" in parts.netloc:
            return False
        default = _DEFAULT_PORTS[parts.scheme]
        origin_name, origin_port = split_host_port(parts.netloc)
        host_name, host_port = split_host_port(host_header.strip())
        if not origin_name or not host_name:
            return False
        return (origin_name.rstrip("."), origin_port or default) == (host_name.rstrip("."), host_port or default)

    @property
    def first(self) -> str:
        """One allowed name, for a link (`localhost` when it is one)."""
        names = sorted(name for name, _ in self.entries)
        return "localhost" if "localhost" in names else names[0]
