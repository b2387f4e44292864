"""Which listed tools are offered, server by server: the one rule the hub and the doctor's probe share."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from adapters.mcp.config import NAME, ServerConfig

TAKEN = "its name is taken by a built-in tool or an earlier server's tool"
UNCALLABLE = "its name is not one a model may call"


@dataclass(frozen=True, slots=True)
class LeftOut:
    server: str
    tool: str  # as shown: the name, or its length when it is not a name a model may call
    why: str


def shown(name: str) -> str:
    """A tool's name as our log and the doctor may show it: a server's text is shown only when it is a plain name."""
    return name if NAME.match(name) else f"<{len(name)} characters>"


def arrange(
    listed: Sequence[tuple[ServerConfig, Sequence[str]]], builtin: Collection[str]
) -> tuple[list[list[str]], list[LeftOut]]:
    """Of each server's listed tools (already filtered by include/exclude, in the configuration's
    order): the names it may offer, and those left out. A name a model may not call is left out, as
    is one a built-in tool or an earlier server's tool already has (the first keeps it)."""
    taken = set(builtin)
    offered: list[list[str]] = []
    left_out: list[LeftOut] = []
    for server, names in listed:
        mine: list[str] = []
        for name in names:
            if not NAME.match(name):
                left_out.append(LeftOut(server.name, shown(name), UNCALLABLE))
            elif name in taken:
                left_out.append(LeftOut(server.name, name, TAKEN))
            else:
                taken.add(name)
                mine.append(name)
        offered.append(mine)
    return offered, left_out
