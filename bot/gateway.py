"""`companion run`: what bot/bootstrap.py assembles (core, platforms, scheduled jobs, HTTP service), started in
order, supervised, and stopped cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

from bot.bootstrap import Assembly, instance_lock, open_gateway, registered_process
from bot.instance import LOCK_LOST, RUN, DatabaseInstanceLock, PlatformConnectionLock, holding
from bot.scheduler import SchedulerService
from bot.settings import Settings
from core.ports.chat import BaseIntake, Platform
from core.values.errors import CompanionError

log = logging.getLogger(__name__)

EXIT_LOST = 1
EXIT_REFUSED = 2  # the CLI's exit code for configuration errors

NOTHING_CONFIGURED = (
    "companion: no chat platform is configured and the web service is off (COMPANION_HTTP_PORT). Set "
    "COMPANION_TELEGRAM_TOKEN (Telegram) or COMPANION_DISCORD_TOKEN (Discord), and COMPANION_ALLOWED_USERS "
    "(for example telegram:123456) for who may talk with it; or use `companion chat` to talk in this terminal."
)
SHARED_TELEGRAM = "COMPANION_SHARED_DATABASE: Telegram needs COMPANION_TELEGRAM_WEBHOOK_URL (one poller per token)"
# What a process holding the Discord gateway says when the lock's connection dropped: another may connect now.
GATEWAY_LOST = "the database connection holding the Discord gateway dropped (PostgreSQL restarted?)"
WEB_ALONE = "no chat platform is configured: serving the web chat alone at %s (sign in with `companion web-login`)"


async def run_gateway(settings: Settings, stop: asyncio.Event | None = None) -> int:
    """Run until the stop signal, or until an adapter's `wait_lost()`, the scheduler's
    `wait_failed()` or the instance lock's `lost()` (PostgreSQL's, its connection dropped) ends,
    whichever comes first; everything is closed in reverse order.

    With COMPANION_HTTP_PORT on, the HTTP service (sign-in, probes, metrics, the web chat) listens
    before the platforms start and closes after them; with no platform configured it serves alone.

    Returns:
        The exit code: 0 stopped by a signal; 2 a platform refused the configuration while
        running (a token rejected: fixed by a person, as at start-up); 1 a platform connection
        lost for good, the schedule failed or the instance lock lost, for the supervisor (Docker, systemd) to start the
        process again. The 1 and 2 cases print one line on stderr.
    """
    web = settings.http_port is not None
    if not (settings.telegram_token or settings.discord_token or web):
        print(NOTHING_CONFIGURED, file=sys.stderr)
        return EXIT_REFUSED
    if settings.shared_database and (refused := shared_refusal(settings)):
        print(f"companion: {refused}", file=sys.stderr)
        return EXIT_REFUSED
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread, or not POSIX
            loop.add_signal_handler(sig, stop.set)
    fatal: list[str] = []

    def on_fatal(line: str) -> None:
        fatal.append(line)
        stop.set()

    async with AsyncExitStack() as stack:
        # Before the store opens: a second gateway would answer every message again.
        lock = await stack.enter_async_context(holding(instance_lock(settings, RUN)))
        gateway = await stack.enter_async_context(open_gateway(settings, on_fatal, registered_process(lock)))
        scheduler = SchedulerService(gateway.jobs, stop_grace=settings.stop_grace)
        await scheduler.start()
        stack.push_async_callback(scheduler.aclose)  # a start that fails half-way still stops it
        service = gateway.service
        if service is not None:
            # Listening before the platforms start (probes answer during a slow start), closed after them.
            await service.start()
            stack.push_async_callback(service.aclose)
            if not gateway.chats:
                log.warning(WEB_ALONE, service.url)
        intakes = gateway.intakes
        gateway_lock = gateway.discord_gateway
        if gateway_lock is not None:
            stack.push_async_callback(gateway_lock.aclose)  # released once Discord's connection closed
        # Closed together, last; safe to call even if a start never finished.
        stack.push_async_callback(_close_all, intakes)
        tasks: list[asyncio.Task[Any]] = []
        stack.push_async_callback(_finish_tasks, tasks)
        # A shared database: Discord starts once this process holds its gateway (`_hold_gateway`).
        standing_by = [p for p in gateway.platforms if gateway_lock is not None and p.name == "discord"]
        for platform in gateway.platforms:
            if platform in standing_by:
                continue
            if not await _unless_stopped(platform.intake.start(), stop):
                log.info("stopped while platform %s was starting", platform.name)
                await _stop(settings, gateway, scheduler)
                return 0
            gateway.entry.attach(platform)  # no await since its start: no answer could come before
            log.info("platform %s started", platform.name)
        # Watched from here on: a connection lost while the rest starts is seen as soon as this waits.
        watches = [
            asyncio.create_task(p.intake.wait_lost(), name=f"watch-{p.name}")
            for p in gateway.platforms
            if p not in standing_by
        ]
        holding_gateway = None
        if standing_by and gateway_lock is not None:
            holding_gateway = asyncio.create_task(
                _hold_gateway(standing_by[0], gateway_lock, gateway, tasks, on_fatal), name="discord-gateway"
            )
            watches.append(holding_gateway)
        watches.append(asyncio.create_task(_scheduler_failure(scheduler), name="watch-scheduler"))
        watches.append(asyncio.create_task(_lock_lost(lock), name="watch-instance-lock"))
        tasks.extend(watches)
        # Turns the last process died in, answered now that replies can be sent; what it left, sent.
        tasks.append(gateway.answer_what_was_left())
        log.info("gateway running")
        lost = await _first_loss(watches, stop)
        log.info("stopping")
        if holding_gateway is not None:  # no gateway taken, nor a start going on, while stopping
            await _finish_tasks([holding_gateway])
        await _stop(settings, gateway, scheduler)
    if fatal:  # before `lost`: a refused token also ends the connection
        print(f"companion: {fatal[0]}", file=sys.stderr)
        return EXIT_REFUSED
    if lost is not None:
        print(f"companion: {lost}; exiting so that a supervisor (Docker, systemd) starts it again", file=sys.stderr)
        return EXIT_LOST
    return 0


def shared_refusal(settings: Settings) -> str | None:
    """What several gateways on one database cannot serve yet (issue 33), in one line; None: nothing."""
    if settings.telegram_token and settings.telegram_webhook_url is None:
        # Long polling allows one poller per token: the gateways need Telegram's webhook in front of them.
        return SHARED_TELEGRAM
    return None


async def _hold_gateway(
    platform: Platform,
    lock: PlatformConnectionLock,
    gateway: Assembly,
    tasks: list[asyncio.Task[Any]],
    on_fatal: Callable[[str], None],
) -> str:
    """A shared database: wait for the Discord gateway's lock, then take over the Discord conversations of the
    process that held it (their recovery: a private interval it left lands in normal mode), connect (the
    catch-up answers what was sent meanwhile) and serve; returns the line of what was lost."""
    await lock.acquire()
    taken = await gateway.companion.serve(platform.name, settle=lock.settle)
    if not lock.held:
        return GATEWAY_LOST
    try:
        await platform.intake.start()
    except CompanionError as exc:  # refused at start, as alone (a token Discord rejects): its one line, exit 2
        on_fatal(str(exc))
        return str(exc)
    gateway.entry.attach(platform)
    log.info("platform %s started (holding its gateway; %d conversations taken over)", platform.name, taken)
    # The turns the last holder was cut off in, and what it left to send, now that Discord can send.
    tasks.append(gateway.answer_what_was_left())
    connection = asyncio.ensure_future(platform.intake.wait_lost())
    held = asyncio.ensure_future(lock.lost())
    try:
        await asyncio.wait([connection, held], return_when=asyncio.FIRST_COMPLETED)
    finally:
        await _finish_tasks([connection, held])
    # Without the lock another process may connect: stop, so that two gateways never run.
    return connection.result() if connection.done() and not connection.cancelled() else GATEWAY_LOST


async def _stop(settings: Settings, gateway: Assembly, scheduler: SchedulerService) -> None:
    """One stop, the same for every platform, in the order things depend on each other: intake
    stops (no update fetched, no event taken, no scheduled run begun, no state-changing request
    taken); the turns in flight and the scheduled run going finish within COMPANION_STOP_GRACE,
    with a bounded flush of the deliveries they wrote; then the connections close, the HTTP
    service's last. What is cut off is answered or sent at the next start."""
    service = gateway.service
    if service is not None:
        await service.stop_intake()
    intakes = gateway.intakes
    for intake in intakes:
        try:
            await intake.stop_intake()
        except Exception as exc:  # noqa: BLE001 - the others still stop
            log.warning("adapter %s did not stop taking messages cleanly (%s)", intake.name, type(exc).__name__)
    log.info("intake stopped; %d conversations still answering", gateway.companion.answering)
    await asyncio.gather(scheduler.aclose(), gateway.entry.stop(settings.stop_grace))
    for platform in gateway.platforms:
        gateway.entry.detach(platform)
    await _close_all(intakes)
    if service is not None:
        await service.aclose()


async def _scheduler_failure(scheduler: SchedulerService) -> str:
    return f"scheduler: {await scheduler.wait_failed()}"


async def _lock_lost(lock: DatabaseInstanceLock) -> str:
    # Without the lock a second gateway could start and answer every message again: stop, and let the next
    # start apply crash semantics (PostgreSQL restarted, or the lock's connection ended).
    await lock.lost()
    return LOCK_LOST


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


async def _close_all(intakes: list[BaseIntake]) -> None:
    """Close the connections (safe to call twice: the stop closes them, the exit stack again)."""
    results = await asyncio.gather(*(intake.aclose() for intake in intakes), return_exceptions=True)
    for intake, result in zip(intakes, results, strict=True):
        if isinstance(result, Exception):
            log.warning("adapter %s did not close cleanly (%s)", intake.name, type(result).__name__)


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
