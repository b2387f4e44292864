"""A port for a subprocess that must be told its port before it binds it."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Where the kernel takes the ports of connections' own ends and of listeners on port 0 (Linux's default).
_EPHEMERAL = (32768, 60999)
_LOWEST = 20000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(part) for part in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return _EPHEMERAL
    return low, high


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the kernel's ephemeral range: a port from that range (a bind to port 0)
    could be taken, before the subprocess binds it, by the own end of any connection the other tests open meanwhile
    (which failed a gateway's start as "address already in use")."""
    low, _ = _ephemeral_range()
    for _ in range(100):
        port = random.randrange(_LOWEST, low) if low > _LOWEST + 1000 else 0
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise RuntimeError("no free port below the ephemeral range on 127.0.0.1")
