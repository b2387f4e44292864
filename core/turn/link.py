"""CoreLink: what every chat adapter needs from the core, built once by the wiring (bot/)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.delivery.outbox import Outbox
from core.ports import AdapterStateStore, MessageHandler, Metrics
from core.values.model import InboundMessage, Reply

# (platform, old chat id, new chat id): a platform moved a chat (a Telegram group upgraded to a
# supergroup); the conversation follows (Companion.chat_moved).
ChatMoved = Callable[[str, str, str], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class CoreLink:
    """The core as a chat adapter sees it; every adapter takes one, whatever its platform.

    Attributes:
        handle: the turn handler (Companion.handle); it receives InboundMessage, never a
            platform object, and returns the reply (or None: the companion stays silent).
        commands: (name, description) of the chat commands, for the platform's command menu.
        is_allowed: whether a message's sender may talk with the companion, for what an adapter
            reads on its own (DMs caught up after a restart); None: the core decides each turn.
        chat_moved: called when the platform moved a chat; None: nothing follows it.
        outbox: where replies are handed over and sent from; None: replies are sent directly.
        state: the adapter-state store (offsets, cursors; never message content); None: nothing
            is kept across a restart.
    """

    handle: MessageHandler
    commands: tuple[tuple[str, str], ...] = ()
    is_allowed: Callable[[InboundMessage], bool] | None = None
    chat_moved: ChatMoved | None = None
    outbox: Outbox | None = None
    state: AdapterStateStore | None = None


def counted(handle: MessageHandler, metrics: Metrics) -> MessageHandler:
    """`handle`, counting every inbound event at intake, before anything knows its mode (so the
    count moves alike for every mode)."""

    async def handle_counted(message: InboundMessage) -> Reply | None:
        metrics.update_received(message.platform)
        return await handle(message)

    return handle_counted
