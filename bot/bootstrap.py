"""The composition root: the one place that knows both the core and the adapters.

Four sections: the core (`build_companion`, `open_companion`, `core_entry`), the web service, the
gateway's platforms and scheduled jobs (`open_gateway`), and the command line's tasks (the terminal
chat, the report, web sign-in, backup and restore). bot/gateway.py and bot/cli.py reach the core
only through what this module hands them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.instance import (
    CHAT,
    LOCK_LOST,
    RUN,
    DatabaseInstanceLock,
    FileInstanceLock,
    InstanceLock,
    PlatformConnectionLock,
    Role,
    holding,
)
from bot.scheduler import Job, once_across
from bot.settings import ConfigError, Settings
from core.commands.services import CommandServices, CommandSettings
from core.delivery.handoff import HandOff
from core.delivery.outbox import Outbox
from core.delivery.streams import StreamPacing
from core.delivery.typing import TypingService
from core.memory.capture import CaptureService
from core.memory.context import ContextAssembler, ContextBudget, Persona
from core.memory.operations import default_tools
from core.memory.tools import ToolRegistry, ToolStores, ToolSupport
from core.ports.chat import BaseIntake, Platform
from core.ports.clock import Clock, SystemClock
from core.ports.metrics import NO_METRICS, Metrics
from core.ports.model import BaseProvider, Transcriber
from core.ports.tools import ToolServers
from core.privacy.transition import TransitionLine
from core.privacy.valve import ModeValve
from core.proactive.manners import Manners
from core.proactive.service import ProactiveConfig, ProactiveService
from core.turn.analytics import render_report
from core.turn.commanding import CommandRunner
from core.turn.companion import Companion
from core.turn.config import CompanionConfig, Parts
from core.turn.controls import OwnerControls, OwnerReads
from core.turn.entry import CoreEntry
from core.turn.gate import Gate
from core.turn.lanes import Lanes
from core.turn.media import MediaReader
from core.turn.people import People
from core.turn.preview import NormalPreview
from core.turn.recovery import Recovery
from core.turn.responder import Responder
from core.turn.transcript import Transcripts
from core.values.addresses import is_wildcard
from core.values.edge import EdgeSettings
from core.values.errors import StoreError
from core.values.retry import Sleep

if TYPE_CHECKING:
    from adapters.storage.backup import BackupResult
    from adapters.storage.claims import JobSlots
    from adapters.storage.move import MoveResult
    from adapters.storage.postgres.gateway_lock import GatewayLock
    from adapters.storage.stores import Stores
    from adapters.telegram import TelegramIntake, WebhookSetup
    from adapters.web.chat import WebIntake, WebPlatform
    from adapters.web.metrics import PrometheusMetrics
    from adapters.web.service import WebService
    from adapters.web.site import WebCore

log = logging.getLogger(__name__)

MCP_KILL_SECONDS = 5.0
# A shared database: how often a process takes over the conversations of processes that died or stopped. A killed
# process is dead at once (its connection, and so its key, are gone); a wedged one after its heartbeat is 10 s
# old (adapters/storage/postgres/processes.py): its chats are taken over within that, plus this.
TAKE_OVER_SECONDS = 2.0  # a stdio server still running this long after SIGTERM at a stop is killed


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


def companion_config(
    settings: Settings, platforms: frozenset[str] | None = None, *, web: bool = False
) -> CompanionConfig:
    """`web`: the HTTP service runs in this process, so its signed-in user is the owner."""
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
        web_owner=web,
        timezone=settings.timezone,
        budget=ContextBudget(total_tokens=settings.context_tokens),
        allow_private_export=settings.allow_private_export,
        vision=settings.llm_vision,
        tools=settings.llm_tools,
        transition=settings.transition,
        artifact_retention_seconds=settings.artifact_retention_days * 86400 or None,
        platforms=platforms,
        # A shared database: Discord's events reach only the process holding its gateway (bot/gateway.py).
        standby=frozenset({"discord"}) if settings.shared_database and settings.discord_token else frozenset(),
        burst_seconds=settings.burst_seconds,
        stop_grace=settings.stop_grace,
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
async def open_companion(
    settings: Settings, stores: Stores, platforms: frozenset[str], *, metrics: Metrics = NO_METRICS, web: bool = False
) -> AsyncIterator[Companion]:
    """Provider and core on the opened `stores`, started in order and closed in reverse, also on
    failure. `platforms`: what this process serves (its crash recovery touches only those);
    `metrics`: the operator's counters; `web`: the HTTP service runs beside it (its user is the owner)."""
    async with AsyncExitStack() as stack:
        provider = build_provider(settings)
        stack.push_async_callback(provider.aclose)
        if settings.llm_base_url and not settings.llm_tools:
            log.warning(
                "COMPANION_LLM_TOOLS=false: the model is offered no tools; memory works through "
                "/remember, /recall and /forget"
            )
        outbox = None
        if platforms - {"terminal"}:  # the terminal prints its replies; nothing to deliver later
            outbox = Outbox(
                stores.outbox,
                SystemClock(),
                base_delay=settings.outbox_retry_seconds,
                max_delay=settings.outbox_max_retry_seconds,
                platforms=platforms - {"terminal"},
                metrics=metrics,
                pacing=stream_pacing(settings.stream_edit_seconds),
                holds=stores.claims.holds if stores.claims is not None else None,
            )
        transcriber = build_transcriber(settings)
        if transcriber is not None:
            stack.push_async_callback(transcriber.aclose)
        companion = build_companion(
            stores,
            provider,
            companion_config(settings, platforms, web=web),
            servers=await open_tool_servers(settings, stack),
            outbox=outbox,
            transcriber=transcriber,
            metrics=metrics,
        )
        await companion.start()
        yield companion


async def open_tool_servers(settings: Settings, stack: AsyncExitStack) -> ToolServers | None:
    """The MCP servers of COMPANION_MCP_CONFIG, started (each connects in the background) and closed by
    `stack` after the turns, every stdio server's process tree ended. None when it is unset:
    then neither adapters.mcp nor the `mcp` SDK is ever imported.

    Raises:
        ConfigError: the file cannot be used (one line naming the file, the server and the key).
    """
    if settings.mcp_config is None:
        return None
    import os

    from adapters.mcp.config import McpConfigError, load_mcp_config

    try:
        config = load_mcp_config(settings.mcp_config, os.environ)
    except McpConfigError as exc:
        raise ConfigError(f"COMPANION_MCP_CONFIG: {exc}") from None
    from adapters.mcp.hub import McpHub

    hub = McpHub(config)
    # Closed after the turns that may call them: SIGTERM at once, SIGKILL after a fifth of the stop
    # grace (5 s at most), so a stubborn server keeps the whole stop near COMPANION_STOP_GRACE.
    stack.push_async_callback(hub.aclose, min(MCP_KILL_SECONDS, settings.stop_grace / 5))
    await hub.start()
    return hub


def build_companion(
    stores: Stores,
    provider: BaseProvider,
    config: CompanionConfig | None = None,
    *,
    clock: Clock | None = None,
    tools: ToolRegistry | None = None,
    servers: ToolServers | None = None,
    outbox: Outbox | None = None,
    transcriber: Transcriber | None = None,
    burst_sleep: Sleep = asyncio.sleep,
    metrics: Metrics = NO_METRICS,
    edge: EdgeSettings | None = None,
) -> Companion:
    """Every part of the companion, built once and handed to what needs it: the only place that
    wires the core together (the gateway, `companion chat`, the tests and the benches all use it).
    Each part is given the query classes of `stores` its ports name (core/ports/store/): mypy
    checks every port against its class here.
    `edge`: the settings every platform shares (default: the shipped ones, with the config's stop grace).
    `servers`: the MCP servers whose tools join the built-in ones (None: none configured)."""
    config = config or CompanionConfig()
    tools = tools or default_tools(servers)
    clock = clock or SystemClock()
    typing = TypingService(edge or EdgeSettings(stop_grace=config.stop_grace))
    valve = ModeValve(
        stores.modes,
        stores.passphrase_attempts,
        clock,
        passphrase_hash=config.passphrase_hash,
        default_expiry=config.default_expiry,
        idle_seconds=config.private_idle_seconds,
        # An interval that ends cancels a send of its replies still running and withdraws what they showed.
        ended=outbox.interval_ended if outbox is not None else None,
    )
    context = ContextAssembler(stores.timeline, config.persona, config.budget, clock)
    lanes: Lanes[tuple[str, str]] = Lanes()
    # One answer to "does the model server take tools?", shared by the responder and /help.
    tool_support = ToolSupport(enabled=config.tools)
    tool_stores = ToolStores(stores.memory, stores.timeline, stores.links)
    responder = Responder(
        stores.timeline,
        stores.memory,
        stores.proactive,
        tool_stores,
        provider,
        clock,
        valve,
        context,
        tools,
        lanes,
        outbox=outbox,
        platforms=config.platforms,
        timezone=config.timezone,
        max_tool_rounds=config.max_tool_rounds,
        metrics=metrics,
        tool_support=tool_support,
    )
    people = People(
        stores.timeline,
        stores.links,
        stores.chats,
        clock,
        allowed_accounts=config.allowed_accounts,
        owner_accounts=config.owner_accounts,
        # The web chat's user is the signed-in owner: with the HTTP service on, or the web served here.
        web_owner=config.web_owner or (config.platforms is not None and "web" in config.platforms),
    )
    services = CommandServices(
        clock,
        valve,
        TransitionLine(provider, config.transition),
        log=stores.timeline,
        segments=stores.modes,
        forgetting=stores.lifetime,
        bindings=stores.bindings,
        nudges=stores.proactive,
        export=stores.lifetime,
        links=stores.links,
        link_attempts=stores.link_attempts,
        memory=tool_stores,
        settings=CommandSettings(
            timezone=config.timezone,
            allow_private_export=config.allow_private_export,
            artifact_retention_seconds=config.artifact_retention_seconds,
            platforms=config.platforms,
            manners=config.proactive.manners,
        ),
        outbox=outbox,
        accounts_changed=people.accounts_changed,
        tools=tool_support,
        registry=tools,
    )
    recovery = Recovery(
        stores.modes,
        stores.timeline,
        stores.lifetime,
        clock,
        valve,
        responder,
        platforms=config.platforms,
        outbox=outbox,
        claims=stores.claims,
        standby=config.standby,
    )
    parts = Parts(
        provider=provider,
        clock=clock,
        valve=valve,
        context=context,
        capture=CaptureService(stores.memory, provider, clock, config.timezone),
        people=people,
        recovery=recovery,
        responder=responder,
        commands=CommandRunner(services, responder),
        media=MediaReader(vision=config.vision, transcriber=transcriber),
        lanes=lanes,
        gate=Gate(valve, recovery),
        handoff=HandOff(outbox, typing),
        typing=typing,
        inbox=stores.timeline,
        timeline=stores.timeline,
        quotes=stores.quotes,
        edits=stores.quotes,
        state=stores.modes,
        preview=NormalPreview(stores.timeline, stores.modes, provider, responder, lanes, people),
        transcripts=Transcripts(stores.timeline, valve, lanes),
        owner_reads=OwnerReads(
            conversations=stores.timeline,
            intervals=stores.modes,
            memory=stores.memory,
            pads=stores.timeline,
            prefs=stores.proactive,
            decisions=stores.proactive,
            bindings=stores.bindings,
        ),
        outbox=outbox,
        # Proactive messages go out through the outbox only: none where nothing delivers (the terminal).
        proactive=(
            ProactiveService(
                stores.proactive,
                provider,
                clock,
                outbox,
                context,
                config.proactive,
                metrics=metrics,
                holds=stores.claims.holds if stores.claims is not None else None,
            )
            if outbox is not None
            else None
        ),
    )
    return Companion(parts, config, burst_sleep=burst_sleep)


def normal_preview(companion: Companion) -> NormalPreview:
    """What normal mode sees (`/context`), one of the companion's own parts."""
    return companion.parts.preview


def transcripts(companion: Companion) -> Transcripts:
    """Chat histories as each conversation's current mode reads them (the web chat's)."""
    return companion.parts.transcripts


def web_chat(companion: Companion, entry: CoreEntry, edge: EdgeSettings) -> WebPlatform:
    """The web chat as a platform on the core's entry; the HTTP service's chat routes call its intake."""
    from adapters.web.chat import web_platform

    return web_platform(entry, edge, transcripts=transcripts(companion).read)


def owner_controls(companion: Companion) -> OwnerControls:
    """What the owner's memory, settings and privacy pages read and change, from the companion's parts."""
    from adapters.web.chat import KEY, USER

    parts = companion.parts
    return OwnerControls(
        parts.owner_reads,
        parts.clock,
        parts.valve,
        parts.people,
        parts.lanes,
        parts.commands,
        companion.config.proactive.manners,
        home=KEY,
        home_user=USER,
    )


def web_core(companion: Companion, chat: WebIntake) -> WebCore:
    """What the web chat's pages need of the core."""
    from adapters.web.site import WebCore

    return WebCore(chat, transcripts(companion), normal_preview(companion), owner_controls(companion), companion.clock)


def edge_settings(settings: Settings) -> EdgeSettings:
    """What every platform shares (retries, the stop, typing), with the shipped defaults; the stop
    grace is COMPANION_STOP_GRACE."""
    return EdgeSettings(stop_grace=settings.stop_grace)


def core_entry(companion: Companion, metrics: Metrics = NO_METRICS, edge: EdgeSettings | None = None) -> CoreEntry:
    """The core's entry every platform's intake hands events to (core.ports.ChatCore), on the
    companion's hand-off and typing indicator; every inbound event is counted in `metrics`, whatever its mode."""
    parts = companion.parts
    return CoreEntry(companion, parts.handoff, parts.typing, metrics=metrics, edge=edge, state=parts.state)


def build_metrics(settings: Settings) -> PrometheusMetrics | None:
    """The operator's counters, served at GET /metrics: only with the HTTP service on."""
    if settings.http_port is None:
        return None
    from adapters.web.metrics import PrometheusMetrics

    return PrometheusMetrics()


def build_web_service(
    settings: Settings,
    companion: Companion,
    stores: Stores,
    checks: Sequence[tuple[str, Callable[[], str | None]]],
    metrics: PrometheusMetrics | None,
    chat: WebIntake | None = None,
    *,
    telegram: TelegramIntake | None = None,
    discord_gateway: GatewayLock | None = None,
) -> WebService:
    """The HTTP service of `companion run` on the companion's database (`stores`): sign-in, the operator
    endpoints (`checks`: each configured adapter's `ready()`), the web chat's pages (`chat`; without
    it, a signed-in landing page), and Telegram's webhook route when COMPANION_TELEGRAM_WEBHOOK_URL is set
    (its deliveries stored by `telegram`'s `accept`; its URL's host answered to)."""
    from adapters.web.auth import WebAuth
    from adapters.web.hosts import AllowedHosts
    from adapters.web.operators import DatabaseProbe, Operators
    from adapters.web.pages import install_landing, install_site
    from adapters.web.service import WebService

    if settings.http_port is None:
        raise TypeError("the HTTP service needs COMPANION_HTTP_PORT")
    queries = stores.web
    allowed = (
        AllowedHosts.parse(settings.http_allowed_host_set)
        if settings.http_allowed_host_set
        else AllowedHosts.default(settings.http_host)
    )
    routes = [install_site(web_core(companion, chat)) if chat is not None else install_landing]
    numbers: list[tuple[str, Callable[[], int]]] = []
    webhook_path, webhook_host = settings.telegram_webhook_path, settings.telegram_webhook_host
    if telegram is not None and webhook_path is not None and webhook_host is not None:
        from adapters.web.webhook import WebhookRoute

        secret = settings.telegram_webhook_secret
        if secret is None:
            raise TypeError("the webhook needs COMPANION_TELEGRAM_WEBHOOK_SECRET")
        # Telegram's deliveries come through the reverse proxy under the URL's host name.
        allowed = AllowedHosts(allowed.entries | AllowedHosts.parse([webhook_host]).entries)
        refused = metrics.webhook_refused if metrics is not None else (lambda: None)
        routes.insert(
            0, WebhookRoute(webhook_path, secret.get_secret_value(), telegram.accept, refused=refused).install
        )
        numbers.append(("inbox", lambda: telegram.inbox_depth))
        if metrics is not None:
            metrics.watch_inbox(lambda: telegram.inbox_depth)
    shared = None
    if (claims := stores.claims) is not None:
        # A shared database: what this process holds, on /readyz and /metrics (the Discord gateway among it).
        gateway = discord_gateway

        def shared() -> dict[str, object]:
            holds_gateway = gateway is not None and gateway.held
            return {"process": claims.process_id, "conversations_held": claims.held, "discord_gateway": holds_gateway}

        if metrics is not None:
            metrics.watch_claims(lambda: claims.held, lambda: claims.taken_over)
            if gateway is not None:
                metrics.watch_gateway(lambda: gateway.held, lambda: gateway.taken)
    operators = Operators(
        DatabaseProbe(queries.probe_write, metrics=metrics or NO_METRICS), checks, metrics, numbers, shared
    )
    return WebService(
        settings.http_host,
        settings.http_port,
        allowed,
        WebAuth(queries, SystemClock()),
        routes=[operators.install, *routes],
    )


def telegram_webhook(settings: Settings, stores: Stores) -> WebhookSetup | None:
    """COMPANION_TELEGRAM_WEBHOOK_URL's webhook on the store's inbox (None: long polling, the default).
    Alone on its database, this process sets the webhook at the start and removes it at a clean stop; on a shared
    database the first live process sets it and the last one removes it."""
    if settings.telegram_webhook_url is None or settings.telegram_webhook_secret is None:
        return None
    from adapters.telegram import WebhookSetup
    from adapters.telegram.intake import ALLOWED_UPDATES

    url, secret = settings.telegram_webhook_url, settings.telegram_webhook_secret.get_secret_value()
    if (claims := stores.claims) is None:
        return WebhookSetup(url, secret, stores.inbox, allowed_updates=ALLOWED_UPDATES)
    return WebhookSetup(
        url,
        secret,
        stores.inbox,
        allowed_updates=ALLOWED_UPDATES,
        removes_at_stop=claims.last_alive,
        sets_at_start=claims.first_alive,
        shared=True,
    )


@asynccontextmanager
async def gateway_stores(settings: Settings, process_id: int | None) -> AsyncIterator[Stores]:
    """The gateway's stores, opened; on a shared database serving Telegram's webhook, its transit folder checked
    before the companion starts (a refused process takes nothing over)."""
    async with open_settings_stores(settings, process_id) as stores:
        await bind_transit_folder(settings, stores)
        yield stores


async def bind_transit_folder(settings: Settings, stores: Stores) -> None:
    """A shared database serving Telegram's webhook: this process's transit key folder must be the one every live
    process uses (adapters/storage/inbox.py `bind_transit_folder`), or the start is refused in one line."""
    claims = stores.claims
    if claims is None or settings.telegram_token is None or settings.telegram_webhook_url is None:
        return
    await stores.inbox.bind_transit_folder(others_alive=bool(await claims.others_alive()))


def stream_pacing(edit_seconds: float | None) -> StreamPacing | None:
    """How replies are shown while written (COMPANION_STREAM_EDIT_SECONDS; None: sent whole)."""
    return None if edit_seconds is None else StreamPacing(edit_seconds=edit_seconds)


# --- the gateway: its platforms and scheduled jobs ------------------------------------------------


def scheduled_jobs(settings: Settings, companion: Companion, slots: JobSlots | None = None) -> list[Job]:
    """What the gateway runs on a schedule, at the intervals the settings give; with `slots` (a shared database)
    capture and the outbox's prune run once across the processes, and the rest in each."""
    # Once across the processes of a shared database: what touches every conversation alike.
    once = [Job("capture", settings.capture_seconds, companion.capture.run_once)]
    # In every process: the expiry sweep (each shreds the keys of its own COMPANION_KEY_DIR, and deleting twice
    # deletes nothing more), and what each sends only for the conversations it holds (the outbox, proactive).
    every: list[Job] = []
    every.append(Job("expiry-sweep", settings.expiry_sweep_seconds, companion.sweep))
    if companion.outbox is not None:
        every.append(Job("outbox", settings.outbox_tick_seconds, companion.outbox.dispatch_due))
        once.append(Job("outbox-prune", settings.outbox_prune_seconds, companion.outbox.prune))
    if companion.proactive is not None:
        every.append(Job("proactive", settings.proactive_tick_seconds, companion.proactive.tick))
    if slots is not None:
        once = [once_across(job, slots.take) for job in once]
    jobs = [*every, *once]
    if settings.shared_database:
        # The conversations of a process that died or stopped, taken over within this tick of its death.
        jobs.append(Job("take-over", TAKE_OVER_SECONDS, companion.take_over_dead))
    return jobs


def registered_process(lock: DatabaseInstanceLock) -> int | None:
    """The id a shared database's instance lock registered this process under; None for a process alone."""
    process_id = getattr(lock, "process_id", None)
    return process_id if isinstance(process_id, int) else None


@dataclass(frozen=True, slots=True)
class Assembly:
    """What `companion run` supervises, built and not yet started (bot/gateway.py starts and stops it).

    Attributes:
        companion: the core, started (crash semantics applied).
        entry: the core's entry, which the platforms' intakes hand their events to.
        platforms: the platforms of three parts, attached to `entry` once their intake started.
        jobs: the scheduled jobs.
        service: the HTTP service (None: COMPANION_HTTP_PORT is off).
        chats: the chat platforms configured (Telegram, Discord), without the web chat.
        discord_gateway: a shared database's lock of the Discord gateway (None: Discord starts with the rest):
            the Discord platform starts only once this process holds it (bot/gateway.py).
    """

    companion: Companion
    entry: CoreEntry
    platforms: list[Platform]
    jobs: list[Job]
    service: WebService | None
    chats: frozenset[str]
    discord_gateway: PlatformConnectionLock | None = None

    @property
    def intakes(self) -> list[BaseIntake]:
        """Everything that takes events, in start order."""
        return [platform.intake for platform in self.platforms]

    def answer_what_was_left(self) -> asyncio.Task[int]:
        """Once the platforms can send: the turns the last process was cut off in are answered, and
        the deliveries it left are sent (both in the background; a stop waits for the sends)."""
        task = asyncio.get_running_loop().create_task(self.companion.answer_open_turns(), name="answer-open-turns")
        if self.companion.outbox is not None:
            self.companion.outbox.dispatch_in_background()
        return task


@asynccontextmanager
async def open_gateway(
    settings: Settings, on_fatal: Callable[[str], None], process_id: int | None = None
) -> AsyncIterator[Assembly]:
    """Store, provider and core opened (closed in reverse, also on failure), and every configured
    platform, job and the HTTP service built around them. `on_fatal(line)`: a platform refused the
    configuration while running (a revoked token). `process_id`: this process's registration on a shared
    database (its claims), None alone."""
    web = settings.http_port is not None
    chats = frozenset(
        name for name, token in (("telegram", settings.telegram_token), ("discord", settings.discord_token)) if token
    )
    metrics = build_metrics(settings)  # None: the service is off, and nothing is counted
    counters: Metrics = metrics or NO_METRICS
    async with (
        gateway_stores(settings, process_id) as stores,
        open_companion(settings, stores, chats | {"web"} if web else chats, metrics=counters, web=web) as companion,
    ):
        edge = edge_settings(settings)
        entry = core_entry(companion, counters, edge)
        # The platforms of three parts, each built on `entry` by its package's builder
        # (`<app>_platform(entry, edge, ...)`); the terminal is `companion chat`'s.
        platforms: list[Platform] = []
        telegram_intake: TelegramIntake | None = None  # its `accept` stores the webhook's deliveries
        if settings.telegram_token:
            from adapters.telegram import TelegramIntake, telegram_platform

            token = settings.telegram_token.get_secret_value()
            platforms.append(
                telegram_platform(
                    entry,
                    edge,
                    token=token,
                    base_url=settings.telegram_base_url,
                    on_fatal=on_fatal,
                    webhook=telegram_webhook(settings, stores),
                )
            )
            if isinstance(platforms[-1].intake, TelegramIntake):
                telegram_intake = platforms[-1].intake
        if settings.discord_token:
            from adapters.discord import discord_platform

            platforms.append(
                discord_platform(
                    entry,
                    edge,
                    token=settings.discord_token.get_secret_value(),
                    api_base=settings.discord_api_base,
                    gateway_url=settings.discord_gateway_url,
                    on_fatal=on_fatal,
                    outage_limit=settings.discord_outage_seconds or None,
                    guild_ready_timeout=settings.discord_guild_ready_seconds,
                )
            )
        gateway_lock = None
        if settings.shared_database and settings.discord_token and settings.database_url:
            from adapters.storage.postgres.gateway_lock import GatewayLock

            # One gateway connection per bot: held by one process at a time, taken over when it ends.
            gateway_lock = GatewayLock(settings.database_url.get_secret_value())
        service = None
        if web:
            # The web chat is a platform like the others (started, attached, stopped and closed with
            # them); its pages are the HTTP service's.
            chat = web_chat(companion, entry, edge)
            platforms.append(chat)
            intakes: list[BaseIntake] = [platform.intake for platform in platforms]
            service = build_web_service(
                settings,
                companion,
                stores,
                [(i.name, standby_ready(i, gateway_lock)) for i in intakes],
                metrics,
                chat.intake,
                telegram=telegram_intake,
                discord_gateway=gateway_lock,
            )
        jobs = scheduled_jobs(settings, companion, stores.job_slots)
        yield Assembly(companion, entry, platforms, jobs, service, chats, gateway_lock)


def standby_ready(intake: BaseIntake, gateway_lock: GatewayLock | None) -> Callable[[], str | None]:
    """The intake's readiness for /readyz; Discord's, while another process holds its gateway, is that of a
    process standing by (ready: its other platforms serve, and it takes the gateway when the holder ends)."""
    if gateway_lock is None or intake.name != "discord":
        return intake.ready
    return lambda: intake.ready() if gateway_lock.held else None


# --- the command line's tasks ------------------------------------------------------------------


async def run_terminal_chat(settings: Settings, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """`companion chat`: the terminal as a platform on the core's entry until end of input, then the
    work it started finishes (a summary fold) and today's capture runs (the gateway schedules it).

    Raises:
        StoreError: the instance lock was lost (PostgreSQL's connection holding it dropped): the chat ends.
    """
    from adapters.terminal import terminal_platform

    # Before the store opens: a second chat's start-up would close the first one's private segment.
    async with (
        holding(instance_lock(settings, CHAT)) as lock,
        open_settings_stores(settings) as stores,
        open_companion(settings, stores, frozenset({"terminal"})) as companion,
    ):
        edge = edge_settings(settings)
        entry = core_entry(companion, edge=edge)
        terminal = terminal_platform(entry, edge, stdin=stdin, stdout=stdout)
        entry.attach(terminal)  # it needs no connection: its answers print from the first line on
        await terminal.intake.start()
        # The end of input; or the instance lock lost (PostgreSQL's connection dropped): a second chat may start.
        lost = asyncio.ensure_future(lock.lost())
        ended = [asyncio.ensure_future(terminal.intake.wait_lost()), lost]
        await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
        for waiter in ended:
            waiter.cancel()
        await asyncio.gather(*ended, return_exceptions=True)
        await terminal.intake.aclose()
        await companion.drain()  # let a pending summary fold finish first
        entry.detach(terminal)
        if not lost.cancelled():
            raise StoreError(LOCK_LOST)
        await companion.capture.run_once()
    return 0


async def report(settings: Settings) -> str:
    """`companion report`: the structural report of normal turns and deliveries (counts, errors,
    latencies; no text)."""
    async with open_settings_stores(settings) as stores:
        rows = await stores.memory.report_rows()
        rows.update(await stores.outbox.report(time.time()))
        rows.update(await stores.proactive.report())
    return render_report(rows)


async def issue_web_login(settings: Settings, url: str | None) -> tuple[str, float]:
    """`companion web-login`: store a new sign-in code's hash and return the link that carries the
    code, with how many seconds it is valid. Takes no instance lock: it works beside a running
    `companion run` (one short write).

    Raises:
        ConfigError: the HTTP service is off, or `url` is not an address alone.
    """
    from adapters.web.auth import CODE_SECONDS, issue_login_code
    from adapters.web.hosts import AllowedHosts

    if settings.http_port is None:
        raise ConfigError("COMPANION_HTTP_PORT: the web service is off; set a port (the default is 8765) to sign in")
    if url is not None:
        if not re.fullmatch(r"https?://[^\s/?#]+/?", url):
            raise ConfigError("companion web-login --url: give the address alone, like https://companion.example.com")
        base = url.rstrip("/")
    else:
        host = settings.http_host
        if is_wildcard(host):  # listening everywhere: a name it answers to
            host = AllowedHosts.parse(settings.http_allowed_host_set).first
        base = f"http://{f'[{host}]' if ':' in host else host}:{settings.http_port}"
    async with open_settings_stores(settings) as stores:
        code = await issue_login_code(stores.web, time.time())
    # The code goes after `#`: a browser never sends the fragment, so no server log, proxy or Referer sees it.
    return f"{base}/login#{code}", CODE_SECONDS


def backup(settings: Settings, path: Path, *, folder: bool) -> BackupResult:
    """`companion backup`: a snapshot without any private row, old backups pruned (into the folder
    `path` when `folder`, else the file `path`).

    Raises:
        ConfigError: on PostgreSQL, whose backups are the operator's own (one line saying where to read how).
    """
    from adapters.storage.backup import backup as write_backup

    if settings.database_url is not None:
        raise ConfigError(BACKUP_ON_POSTGRES)
    return write_backup(settings.db_path, path, folder=folder, retention_days=settings.backup_retention_days)


BACKUP_ON_POSTGRES = (
    "companion backup is for the SQLite file; on PostgreSQL (COMPANION_DATABASE_URL) use the server's own base "
    "backups, WAL archives or pg_dump, and never put COMPANION_KEY_DIR in them (docs/operations.md, Backups on PostgreSQL)"
)
RESTORE_ON_POSTGRES = (
    "companion restore PATH is for the SQLite file; on PostgreSQL restore your own backup with the gateway "
    "stopped, then run `companion restore` without a PATH (docs/operations.md, Backups on PostgreSQL)"
)
RESTORE_NEEDS_PATH = "companion restore: name the backup file to restore (PATH)"


@dataclass(frozen=True, slots=True)
class Restored:
    """What `companion restore` did on PostgreSQL: counts only."""

    sign_ins: int
    segments: int
    artifacts: int
    keyless: int  # intervals whose key is not in COMPANION_KEY_DIR: masked (an open one closed `key_lost`)


def restore(settings: Settings, path: Path | None) -> Restored | None:
    """`companion restore`: replace the database with a backup, then bring it to this code's schema
    (private rows dropped and expiry applied). Nothing may serve from the database meanwhile: it
    takes both roles' locks. On PostgreSQL (no `path`: the operator restored their own backup) it
    makes what was restored safe to serve from (`restore_postgres`).

    Raises:
        ConfigError: a `path` on PostgreSQL, or none on SQLite.
    """
    if settings.database_url is not None:
        if path is not None:
            raise ConfigError(RESTORE_ON_POSTGRES)
        return asyncio.run(restore_postgres(settings))
    if path is None:
        raise ConfigError(RESTORE_NEEDS_PATH)
    from adapters.storage.backup import restore as restore_backup

    with (
        InstanceLock(settings.db_path, RUN, purpose="restore"),
        InstanceLock(settings.db_path, CHAT, purpose="restore"),
    ):
        restore_backup(path, settings.db_path)
        asyncio.run(_apply_migrations(settings))
    return None


async def restore_postgres(settings: Settings) -> Restored:
    """After the operator restored their own backup of the PostgreSQL database, with both instance locks held:
    the migrations applied, every web sign-in (sessions and codes) deleted, and expiry applied again through the
    sweep's own queries (crossing artifacts, then the private intervals whose expiry passed while the backup lay
    about, with everything hanging off them); then the key folder settled with the segments left (ModeQueries
    `reconcile_keys`, the start-up step of the interval keys)."""
    now = time.time()
    async with (
        holding(instance_lock(settings, RUN, purpose="restore")),
        holding(instance_lock(settings, CHAT, purpose="restore")),
        open_settings_stores(settings) as stores,
    ):
        sign_ins = await stores.web.delete_every_sign_in()
        artifacts = await stores.lifetime.delete_expired_artifacts(now)
        segments = await stores.modes.delete_expired_segments(now)
        # The key folder settled with the intervals left: orphan keys shredded, keyless intervals masked.
        keyless = (await stores.modes.reconcile_keys(now)).keyless
    log.info(
        "restore: %d sign-ins, %d expired segments, %d expired artifacts deleted; %d keyless intervals masked",
        sign_ins,
        segments,
        artifacts,
        keyless,
    )
    return Restored(sign_ins, segments, artifacts, keyless)


def move_to_postgres(settings: Settings, url: str | None) -> MoveResult:
    """`companion move-to-postgres`: the SQLite file's normal rows into an empty PostgreSQL database (`url`, else
    COMPANION_DATABASE_URL), its private intervals left behind. Nothing may serve from the file meanwhile: it
    takes both roles' locks (adapters/storage/move.py takes the target's)."""
    from adapters.storage.move import move_to_postgres as move

    chosen = url or (settings.database_url.get_secret_value() if settings.database_url else None)
    if not chosen:
        raise ConfigError(
            "name the PostgreSQL database: companion move-to-postgres postgresql://user:password@host/database "
            "(or set COMPANION_DATABASE_URL)"
        )
    with (
        InstanceLock(settings.db_path, RUN, purpose="move-to-postgres"),
        InstanceLock(settings.db_path, CHAT, purpose="move-to-postgres"),
    ):
        return asyncio.run(move(settings.db_path, chosen))


async def _apply_migrations(settings: Settings) -> None:
    async with open_settings_stores(settings):
        pass


# --- the engine the settings choose -------------------------------------------------------------


def open_settings_stores(settings: Settings, process_id: int | None = None) -> AbstractAsyncContextManager[Stores]:
    """The stores on the database the settings choose: PostgreSQL at COMPANION_DATABASE_URL (its keys in
    COMPANION_KEY_DIR) when set, else the SQLite file at COMPANION_DB_PATH; opened and migrated, closed after.
    `process_id`: this process's registration on a shared database (`registered_process`)."""
    from adapters.storage.stores import open_stores

    url = settings.database_url.get_secret_value() if settings.database_url is not None else None
    return open_stores(settings.db_path, url=url, key_dir=settings.key_dir, process_id=process_id)


def instance_lock(settings: Settings, role: Role, *, purpose: str | None = None) -> DatabaseInstanceLock:
    """One process of `role` (RUN, CHAT) per database, not taken yet: the lock file beside the SQLite file, or
    PostgreSQL's advisory lock (held on a connection of its own; `lost` completes if that connection drops); with
    COMPANION_SHARED_DATABASE, `companion run`'s is shared with the other gateways and registers this process.
    `purpose`: the command taking the role's lock when it is not the role's own (`restore`)."""
    if settings.database_url is None:
        return FileInstanceLock(settings.db_path, role, purpose=purpose)
    if settings.shared_database and role == RUN and purpose is None:
        # Several gateways on one database: the run key shared, and this process registered and beating.
        from adapters.storage.postgres.processes import SharedInstanceLock

        return SharedInstanceLock(settings.database_url.get_secret_value())
    from adapters.storage.postgres.instance import AdvisoryInstanceLock

    return AdvisoryInstanceLock(settings.database_url.get_secret_value(), role, purpose=purpose)
