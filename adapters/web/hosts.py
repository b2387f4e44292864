"""Which Host and Origin headers the service answers (what a host name is: core/values/addresses.py)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

# Re-exported: what a host name is moved to the values, where bot/settings.py reads it too.
from core.values.addresses import is_host_name as is_host_name
from core.values.addresses import is_loopback as is_loopback
from core.values.addresses import is_wildcard as is_wildcard
from core.values.addresses import split_host_port

# A browser leaves out the port of its scheme's default from both Origin and Host.
_DEFAULT_PORTS = {"http": 80, "https": 443}


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
