"""The memory commands: the same operations the model's tools run (core/memory/operations.py), with
the same checks, answered in words."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from core.commands.call import CommandCall, CommandHandler
from core.commands.modes import forget_private
from core.memory import operations
from core.memory.tools import ToolContext
from core.values import copy
from core.values.errors import PrivateWriteRefused
from core.values.model import Reply

MemoryOperation = Callable[[ToolContext, str], Awaitable[str]]


def memory_handler(operation: MemoryOperation) -> CommandHandler:
    """A memory command: the operation behind the tool of the same name."""

    async def handler(call: CommandCall) -> Reply:
        services = call.services
        conversation = call.turn.conversation
        timezone = await services.timezone_of(conversation)
        context = ToolContext(conversation, call.state, services.clock.now(), timezone, services.memory)
        try:
            return Reply(await operation(context, call.args))
        except PrivateWriteRefused:
            return Reply(copy.PRIVATE_REFUSES.format(command=call.name))
        except ValueError as exc:
            text = str(exc)
            return Reply(text if text.startswith("Usage") else f"{text[0].upper()}{text[1:]}. Nothing changed.")

    return handler


_forget_memory = memory_handler(operations.forget_command)


async def forget_command(call: CommandCall) -> Reply:
    """`/forget private` deletes every private interval of the conversation; else a memory entry."""
    if call.args.strip().lower() == "private":
        return await forget_private(call)
    return await _forget_memory(call)
