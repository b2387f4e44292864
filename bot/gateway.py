"""`companion run`: settings, storage, core, scheduler and every configured adapter, supervised and stopped cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from bot.bootstrap import build_metrics, build_web_service, core_link, open_companion, web_chat
from bot.instance import RUN, InstanceLock
from bot.scheduler import Job, SchedulerService
from bot.settings import Settings
from core.ports import NO_METRICS, BaseChatAdapter, Metrics

if TYPE_CHECKING:
    from adapters.web.service import WebService
    from core.turn.companion import Companion

log = logging.getLogger(__name__)

EXIT_LOST = 1
EXIT_REFUSED = 2  # the CLI's exit code for configuration errors

NOTHING_CONFIGURED = (
    "companion: no chat platform is configured and the web service is off (COMPANION_HTTP_PORT). Set "
    "COMPANION_TELEGRAM_TOKEN (Telegram) or COMPANION_DISCORD_TOKEN (Discord), and COMPANION_ALLOWED_USERS "
    "(for example telegram:123456) for who may talk with it; or use `companion chat` to talk in this terminal."
)
WEB_ALONE = "no chat platform is configured: serving the web chat alone at %s (sign in with `companion web-login`)"


def build_adapters(
    settings: Settings,
    companion: Companion,
    on_fatal: Callable[[str], None] | None = None,
    metrics: Metrics = NO_METRICS,
) -> list[BaseChatAdapter]:
    """The Telegram and Discord adapters (the web chat is added beside the HTTP service). Each
    platform library is imported only when its adapter is configured; every adapter takes the same
    CoreLink. `on_fatal(line)`: the platform refused the configuration while running (a
    revoked token); the gateway stops."""
    adapters: list[BaseChatAdapter] = []
    link = core_link(companion, metrics)
    # By the time an adapter closes, the core's stop has finished or cut off every turn; what the
    # adapter still waits for then (a reply's last steps) is bounded by the same grace.
    if settings.telegram_token:
        from adapters.telegram import TelegramAdapter

        adapters.append(
            TelegramAdapter(
                settings.telegram_token.get_secret_value(),
                link,
                base_url=settings.telegram_base_url,
                on_fatal=on_fatal,
                stop_grace=settings.stop_grace,
            )
        )
    if settings.discord_token:
        from adapters.discord import DiscordAdapter

        adapters.append(
            DiscordAdapter(
                settings.discord_token.get_secret_value(),
                link,
                api_base=settings.discord_api_base,
                gateway_url=settings.discord_gateway_url,
                on_fatal=on_fatal,
                stop_grace=settings.stop_grace,
                outage_limit=settings.discord_outage_seconds or None,
            )
        )
    return adapters


def scheduled_jobs(settings: Settings, companion) -> list[Job]:
    """What the gateway runs on a schedule, at the intervals the settings give."""
    jobs = [
        Job("expiry-sweep", settings.expiry_sweep_seconds, companion.sweep),
        Job("capture", settings.capture_seconds, companion.capture.run_once),
    ]
    if companion.outbox is not None:
        jobs.append(Job("outbox", settings.outbox_tick_seconds, companion.outbox.dispatch_due))
        jobs.append(Job("outbox-prune", settings.outbox_prune_seconds, companion.outbox.prune))
    if companion.proactive is not None:
        jobs.append(Job("proactive", settings.proactive_tick_seconds, companion.proactive.tick))
    return jobs


async def run_gateway(settings: Settings, stop: asyncio.Event | None = None) -> int:
    """Run until the stop signal, or until an adapter's `wait_lost()` or the scheduler's
    `wait_failed()` ends, whichever comes first; everything is closed in reverse order.

    With COMPANION_HTTP_PORT on, the HTTP service (sign-in, probes, metrics, the web chat) listens
    before the adapters start and closes after them; with no platform configured it serves alone.

    Returns:
        The exit code: 0 stopped by a signal; 2 a platform refused the configuration while
        running (a token rejected: fixed by a person, as at start-up); 1 a platform connection
        lost for good or the schedule failed, for the supervisor (Docker, systemd) to start the
        process again. The 1 and 2 cases print one line on stderr.
    """
    web = settings.http_port is not None
    if not (settings.telegram_token or settings.discord_token or web):
        print(NOTHING_CONFIGURED, file=sys.stderr)
        return EXIT_REFUSED
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread, or not POSIX
            loop.add_signal_handler(sig, stop.set)
    async with AsyncExitStack() as stack:
        # Before the store opens: a second gateway would answer every message again.
        stack.enter_context(InstanceLock(settings.db_path, RUN))
        chats = frozenset(
            name
            for name, token in (("telegram", settings.telegram_token), ("discord", settings.discord_token))
            if token
        )
        platforms = chats | {"web"} if web else chats
        metrics = build_metrics(settings)  # None: the service is off, and nothing is counted
        counters: Metrics = metrics or NO_METRICS
        companion = await stack.enter_async_context(open_companion(settings, platforms, metrics=counters, web=web))
        scheduler = SchedulerService(scheduled_jobs(settings, companion), stop_grace=settings.stop_grace)
        await scheduler.start()
        stack.push_async_callback(scheduler.aclose)  # a start that fails half-way still stops it
        fatal: list[str] = []

        def on_fatal(line: str) -> None:
            fatal.append(line)
            stop.set()

        adapters = build_adapters(settings, companion, on_fatal, counters)
        service = None
        if web:
            # The web chat is an adapter like the others (started, stopped and closed with them);
            # its pages are the HTTP service's.
            chat = web_chat(companion, stop_grace=settings.stop_grace, metrics=counters)
            adapters.append(chat)
            service = build_web_service(settings, companion, [(a.name, a.ready) for a in adapters], metrics, chat)
            # Listening before the adapters start (probes answer during a slow start), closed after them.
            await service.start()
            stack.push_async_callback(service.aclose)
            if not chats:
                log.warning(WEB_ALONE, service.url)
        # Closed together, last; safe to call even if a start never finished.
        stack.push_async_callback(_close_all, adapters)
        tasks: list[asyncio.Task[Any]] = []
        stack.push_async_callback(_finish_tasks, tasks)
        for adapter in adapters:
            if not await _unless_stopped(adapter.start(), stop):
                log.info("stopped while adapter %s was starting", adapter.name)
                await _stop(settings, adapters, scheduler, companion, service)
                return 0
            log.info("adapter %s started", adapter.name)
        # Watched from here on: a connection lost while the rest starts is seen as soon as this waits.
        watches = [asyncio.create_task(adapter.wait_lost(), name=f"watch-{adapter.name}") for adapter in adapters]
        watches.append(asyncio.create_task(_scheduler_failure(scheduler), name="watch-scheduler"))
        tasks.extend(watches)
        # Turns the last process died in, answered now that replies can be sent.
        tasks.append(asyncio.create_task(companion.answer_open_turns(), name="answer-open-turns"))
        if companion.outbox is not None:
            companion.outbox.dispatch_in_background()  # what the last process left
        log.info("gateway running")
        lost = await _first_loss(watches, stop)
        log.info("stopping")
        await _stop(settings, adapters, scheduler, companion, service)
    if fatal:  # before `lost`: a refused token also ends the connection
        print(f"companion: {fatal[0]}", file=sys.stderr)
        return EXIT_REFUSED
    if lost is not None:
        print(f"companion: {lost}; exiting so that a supervisor (Docker, systemd) starts it again", file=sys.stderr)
        return EXIT_LOST
    return 0


async def _stop(
    settings: Settings,
    adapters: list[BaseChatAdapter],
    scheduler: SchedulerService,
    companion: Companion,
    service: WebService | None = None,
) -> None:
    """One stop, the same for every platform, in the order things depend on each other: intake
    stops (no update fetched, no event taken, no scheduled run begun, no state-changing request
    taken); the turns in flight and the scheduled run going finish within COMPANION_STOP_GRACE,
    with a bounded flush of the deliveries they wrote; then the connections close, the HTTP
    service's last. What is cut off is answered or sent at the next start."""
    if service is not None:
        await service.stop_intake()
    for adapter in adapters:
        try:
            await adapter.stop_intake()
        except Exception as exc:  # noqa: BLE001 - the others still stop
            log.warning("adapter %s did not stop taking messages cleanly (%s)", adapter.name, type(exc).__name__)
    log.info("intake stopped; %d conversations still answering", companion.answering)
    await asyncio.gather(scheduler.aclose(), companion.stop(settings.stop_grace))
    await _close_all(adapters)
    if service is not None:
        await service.aclose()


async def _scheduler_failure(scheduler: SchedulerService) -> str:
    return f"scheduler: {await scheduler.wait_failed()}"


async def _first_loss(watches: list[asyncio.Task[str]], stop: asyncio.Event) -> str | None:
    """Wait for the stop signal or the first watch to end; the line of what was lost, if anything was."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({stopping, *watches}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await _finish_tasks([stopping])
    for watch in watches:
        if watch in done and not watch.cancelled():
            failure = watch.exception()
            # A watch that itself failed is a loss too: nothing watches that part any more.
            return watch.result() if failure is None else f"{watch.get_name()}: failed ({type(failure).__name__})"
    return None


async def _close_all(adapters: list[BaseChatAdapter]) -> None:
    """Close the connections (safe to call twice: the stop closes them, the exit stack again)."""
    results = await asyncio.gather(*(adapter.aclose() for adapter in adapters), return_exceptions=True)
    for adapter, result in zip(adapters, results, strict=True):
        if isinstance(result, Exception):
            log.warning("adapter %s did not close cleanly (%s)", adapter.name, type(result).__name__)


async def _finish_tasks(tasks: Sequence[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _unless_stopped(coro, stop: asyncio.Event) -> bool:
    """Run `coro` unless a stop signal comes first (a slow start must not delay SIGTERM)."""
    work = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if work in done:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        work.result()  # a failed start raises here, with its one-line message
        return True
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    return False
