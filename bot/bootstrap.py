"""The composition root: the one place that knows both the core and the adapters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from bot.settings import Settings
from core.memory.context import ContextBudget, Persona
from core.ports import BaseProvider, Transcriber
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig
from core.turn.companion import Companion, CompanionConfig


def build_provider(settings: Settings) -> BaseProvider:
    if settings.llm_base_url:
        from adapters.llm.openai_compat import OpenAICompatibleProvider

        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return OpenAICompatibleProvider(
            settings.llm_base_url,
            key,
            settings.llm_model,
            timeout=settings.llm_timeout,
            max_tokens=settings.llm_max_tokens,
        )
    from adapters.llm.offline import OfflineProvider

    return OfflineProvider()


def build_transcriber(settings: Settings) -> Transcriber | None:
    """Speech to text for voice notes, when COMPANION_STT_BASE_URL is set; None: voice is not set up."""
    if not settings.stt_base_url:
        return None
    from adapters.llm.transcribe import OpenAICompatibleTranscriber

    key = settings.stt_api_key.get_secret_value() if settings.stt_api_key else None
    return OpenAICompatibleTranscriber(settings.stt_base_url, key, settings.stt_model, timeout=settings.llm_timeout)


def companion_config(settings: Settings, platforms: frozenset[str] | None = None) -> CompanionConfig:
    persona = Persona(private_additions=settings.private_persona_text())
    if normal := settings.persona_text():
        persona = Persona(normal, persona.private_additions)
    return CompanionConfig(
        persona=persona,
        passphrase_hash=settings.private_passphrase_hash,
        default_expiry=settings.private_default_expiry,
        private_idle_seconds=settings.private_idle_minutes * 60 if settings.private_idle_minutes else None,
        allowed_accounts=settings.allowed_accounts,
        owner_accounts=settings.owner_accounts,
        timezone=settings.timezone,
        budget=ContextBudget(total_tokens=settings.context_tokens),
        allow_private_export=settings.allow_private_export,
        vision=settings.llm_vision,
        transition=settings.transition,
        artifact_retention_seconds=settings.artifact_retention_days * 86400 or None,
        platforms=platforms,
        burst_seconds=settings.burst_seconds,
        stop_grace=settings.llm_timeout,
        proactive=ProactiveConfig(
            Manners(
                timezone=settings.timezone,
                quiet_hours=settings.quiet_hours,
                budget=settings.nudges_per_day,
                cooldown=settings.nudge_cooldown_minutes * 60,
                active_within=settings.nudge_active_minutes * 60,
                backoff_after=settings.nudge_backoff_after,
            ),
            watch_after=settings.nudge_watch_after_minutes * 60,
            goal_every=settings.nudge_goal_every_hours * 3600,
            checkin_after=settings.nudge_checkin_after_hours * 3600,
        ),
    )


@asynccontextmanager
async def open_companion(settings: Settings, platforms: frozenset[str]) -> AsyncIterator[Companion]:
    """Store, provider and core, started in order and closed in reverse, also on failure.
    `platforms`: what this process serves (its crash recovery touches only those)."""
    from adapters.storage.sqlite import SqliteStore

    async with AsyncExitStack() as stack:
        store = SqliteStore(settings.db_path)
        await store.start()
        stack.push_async_callback(store.aclose)
        provider = build_provider(settings)
        stack.push_async_callback(provider.aclose)
        outbox = None
        if platforms - {"terminal"}:  # the terminal prints its replies; nothing to deliver later
            from adapters.storage.outbox import SqliteOutboxStore
            from core.delivery.outbox import Outbox
            from core.ports import SystemClock

            outbox = Outbox(
                SqliteOutboxStore(store),
                SystemClock(),
                base_delay=settings.outbox_retry_seconds,
                max_delay=settings.outbox_max_retry_seconds,
            )
        transcriber = build_transcriber(settings)
        if transcriber is not None:
            stack.push_async_callback(transcriber.aclose)
        companion = Companion(
            store, provider, companion_config(settings, platforms), outbox=outbox, transcriber=transcriber
        )
        await companion.start()
        stack.push_async_callback(companion.drain)
        yield companion
