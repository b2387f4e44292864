"""One way for the core tests to start a companion with an outbox on the shared store: a Telegram
user allowed, the platforms given served, the fake senders registered. Calling it again on the same
store is a restart."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from adapters.storage.stores import Stores
from bot.bootstrap import build_companion
from core.delivery.outbox import Outbox
from core.ports.clock import Clock
from core.ports.model import BaseProvider
from core.turn.companion import Companion
from core.turn.config import CompanionConfig

USER = "100"


async def boot_companion(
    stores: Stores,
    provider: BaseProvider,
    clock: Clock,
    passphrase_hash: str,
    senders: Iterable[Any],
    *,
    platforms: Iterable[str] = ("telegram",),
    outbox_options: dict[str, Any] | None = None,
    build_options: dict[str, Any] | None = None,
    **config: Any,
) -> Companion:
    """A started companion whose outbox sends through `senders` (each registered); `config` goes to
    CompanionConfig, `outbox_options` to the Outbox, `build_options` to build_companion."""
    options = {"rand": lambda: 1.0, **(outbox_options or {})}
    outbox = Outbox(stores.outbox, clock, **options)
    for sender in senders:
        outbox.register(sender)
    companion = build_companion(
        stores,
        provider,
        CompanionConfig(
            passphrase_hash=passphrase_hash,
            allowed_accounts=frozenset({f"telegram:{USER}"}),
            platforms=frozenset(platforms),
            **config,
        ),
        clock=clock,
        outbox=outbox,
        **(build_options or {}),
    )
    await companion.start()
    return companion
