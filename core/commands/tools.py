"""/tools: the tools the model is offered in this conversation's mode now, built-in and served, and
the servers that are down."""

from __future__ import annotations

from core.commands.call import CommandCall
from core.values import copy
from core.values.model import Reply
from core.values.modes import with_notice


async def tools_command(call: CommandCall) -> Reply:
    services = call.services
    state = call.state
    mode = "private mode" if state.is_private else "normal mode"
    registry = services.registry
    lines: list[str] = []
    if not services.tools.enabled_for(private=state.is_private):
        lines.append(copy.TOOLS_OFF_NOTE)
    elif registry is not None:
        # The set a turn of this mode is offered, chosen by the same call the responder makes.
        offered = registry.tools_for(call.turn.conversation, state)
        built_in = ", ".join(t.name for t in offered if t.server is None) or "none"
        lines.append(f"The tools I can use here in {mode}: {built_in}.")
        by_server: dict[str, list[str]] = {}
        for tool in offered:
            if tool.server is not None:
                by_server.setdefault(tool.server, []).append(tool.name)
        lines += [f"From {server}: {', '.join(names)}." for server, names in by_server.items()]
    servers = registry.servers if registry is not None else None
    if servers is not None:
        states = servers.states()
        if state.is_private and states:
            lines.append(copy.SERVED_TOOLS_IN_PRIVATE)
        lines += [f"Server {s.name} is not reachable now: {s.detail or 'starting'}." for s in states if not s.up]
    return Reply(with_notice(state, "\n".join(lines)))
