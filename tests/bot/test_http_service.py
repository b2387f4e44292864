"""The HTTP service of `companion run`, whole: real gateways (in this process and as subprocesses), real
python-telegram-bot against the fake Bot API, httpx against the service, `companion web-login`."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from bot.gateway import WEB_ALONE, run_gateway
from bot.settings import load_settings
from core.privacy.secrets import hash_passphrase
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env, run_companion, spawn_companion
from tests.helpers.web import sign_in_blocking

USER = 5550123987
CANARY = "METRICS-WIRE-CANARY"
LABELS = re.compile(r"\{([^}]*)\}")
ALLOWED_LABELS = {"platform", "outcome", "kind", "state", "reason", "write", "le"}
UPDATES = 'companion_updates_received_total{platform="telegram"}'


@contextlib.asynccontextmanager
async def gateway_with_service(tmp_path: Path) -> AsyncIterator[tuple[FakeTelegramServer, httpx.AsyncClient]]:
    """`companion run` in this process with Telegram (on the fake Bot API), a fake model server and
    the HTTP service on a free port."""
    port = free_port()
    async with FakeTelegramServer() as telegram, FakeOpenAIServer() as model:
        settings = load_settings(
            _env_file=None,
            telegram_token=telegram.token,
            telegram_base_url=telegram.base_url,
            llm_base_url=model.base_url,
            allowed_users=f"telegram:{USER}",
            private_passphrase_hash=hash_passphrase("sesame"),
            db_path=tmp_path / "companion.db",
            http_port=port,
            burst_seconds=0,
        )
        stop = asyncio.Event()
        run = asyncio.create_task(run_gateway(settings, stop))
        try:
            await telegram.wait_for_polling()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                yield telegram, client
        finally:
            stop.set()
            assert await asyncio.wait_for(run, 30) == 0


async def say(telegram: FakeTelegramServer, text: str) -> str:
    before = len(telegram.sent)
    telegram.send_text(USER, USER, text)
    return (await telegram.wait_for_sent(before + 1))[before].text


async def settled(db_path: Path) -> None:
    """Until no delivery is pending (each sent and marked), then a moment for what follows a mark."""
    async with asyncio.timeout(20):
        while True:
            with sqlite3.connect(db_path) as db:
                if db.execute("SELECT count(*) FROM deliveries WHERE status = 'pending'").fetchone()[0] == 0:
                    break
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)


async def metrics_lines(client: httpx.AsyncClient) -> dict[str, str]:
    """The samples of /metrics, by series (the `# HELP` and `# TYPE` lines aside)."""
    text = (await client.get("/metrics")).text
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.rsplit(" ", 1) for line in samples)


async def test_private_turns_leave_the_metrics_unchanged_but_for_the_updates_every_mode_counts_alike(tmp_path):
    async with gateway_with_service(tmp_path) as (telegram, client):
        await say(telegram, "hello")
        await say(telegram, "/private sesame")
        await settled(tmp_path / "companion.db")
        before = await metrics_lines(client)
        assert float(before['companion_turns_total{outcome="ok"}']) == 1  # a normal turn is counted
        assert float(before['companion_deliveries_total{kind="reply",state="sent"}']) >= 1
        for n in range(3):
            await say(telegram, f"{CANARY} {n}")
        await settled(tmp_path / "companion.db")
        after = await metrics_lines(client)
        assert float(after[UPDATES]) == float(before[UPDATES]) + 3  # counted at intake, as any update is
        assert {k: v for k, v in after.items() if k != UPDATES} == {k: v for k, v in before.items() if k != UPDATES}
        await say(telegram, "/normal")
        await say(telegram, "and back")
        await settled(tmp_path / "companion.db")
        normal = await metrics_lines(client)
        assert float(normal['companion_turns_total{outcome="ok"}']) == 2
        text = (await client.get("/metrics")).text
    assert CANARY not in text and str(USER) not in text
    for labels in LABELS.findall(text):
        names = {pair.split("=", 1)[0] for pair in labels.split(",")}
        assert names <= ALLOWED_LABELS, names  # no id and no mode label
        values = [pair.split("=", 1)[1] for pair in labels.split(",") if not pair.startswith("le=")]
        assert not any(ch.isdigit() for value in values for ch in value), labels


async def test_readyz_names_telegram_and_the_database_as_ready_while_the_gateway_runs(tmp_path):
    async with gateway_with_service(tmp_path) as (_telegram, client):
        answer = await client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json()["parts"] == {"http": "ok", "database": "ok", "telegram": "ok", "web": "ok"}


# --- `companion run` and `companion web-login` as subprocesses ---------------------------------------------


def wait_for_http(process: subprocess.Popen, url: str, timeout: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise AssertionError(f"companion run exited with {process.returncode}: {process.stderr.read()}")
        try:
            return httpx.get(url, timeout=2)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def stop(process: subprocess.Popen) -> tuple[int, str]:
    """SIGINT, then its exit code and stderr (its pipes closed)."""
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    return process.returncode, stderr


def test_run_with_no_platform_serves_the_web_alone_says_so_and_web_login_signs_in_once(tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = companion_env(tmp_path, COMPANION_HTTP_PORT=str(port), COMPANION_LOG_LEVEL="INFO")
    with spawn_companion(["run"], env) as process:
        try:
            assert wait_for_http(process, f"{base}/livez").json() == {"status": "alive"}
            ready = httpx.get(f"{base}/readyz")
            assert ready.status_code == 200 and ready.json()["parts"] == {"http": "ok", "database": "ok", "web": "ok"}
            login = run_companion(["web-login"], env)  # beside the running gateway: no lock in the way
            assert login.returncode == 0, login.stderr
            link = login.stdout.strip()
            assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/login#[A-Za-z0-9_-]{{43}}", link)
            code = link.split("#", 1)[1]
            with httpx.Client(base_url=base) as browser:
                assert sign_in_blocking(browser, code).status_code == 200
                chat = browser.get("/")
                assert chat.status_code == 200 and 'id="send-form"' in chat.text  # the web chat's page
            with httpx.Client(base_url=base) as another:
                assert sign_in_blocking(another, code).status_code == 401  # used up
        finally:
            exit_code, stderr = stop(process)
    assert exit_code == 0
    assert (WEB_ALONE % base) in stderr
    assert code not in stderr and "Traceback" not in stderr
    assert "GET /login 200" in stderr and "POST /login 200" in stderr and "POST /login 401" in stderr


def test_run_with_nothing_configured_and_the_service_off_says_what_to_set(tmp_path):
    result = run_companion(["run"], companion_env(tmp_path, COMPANION_HTTP_PORT="off"))
    assert result.returncode == 2
    assert "COMPANION_TELEGRAM_TOKEN" in result.stderr and "COMPANION_HTTP_PORT" in result.stderr


def test_web_login_with_the_service_off_says_so_in_one_line(tmp_path):
    result = run_companion(["web-login"], companion_env(tmp_path, COMPANION_HTTP_PORT="0"))
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("companion: COMPANION_HTTP_PORT: ")


def test_web_login_names_an_allowed_host_when_listening_everywhere_and_takes_an_address(tmp_path):
    env = companion_env(
        tmp_path,
        COMPANION_HTTP_HOST="0.0.0.0",  # noqa: S104 - the setting under test
        COMPANION_HTTP_PORT="8123",
        COMPANION_HTTP_ALLOWED_HOSTS="companion.example.com",
    )
    assert run_companion(["web-login"], env).stdout.startswith("http://companion.example.com:8123/login#")
    proxied = run_companion(["web-login", "--url", "https://companion.example.com/"], env)
    assert proxied.stdout.startswith("https://companion.example.com/login#")


def test_listening_beyond_loopback_without_allowed_hosts_refuses_to_start_in_one_line(tmp_path):
    env = companion_env(tmp_path, COMPANION_HTTP_HOST="0.0.0.0", COMPANION_HTTP_PORT="8123")  # noqa: S104 - under test
    result = run_companion(["run"], env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("companion: COMPANION_HTTP_ALLOWED_HOSTS: ")
    assert not (tmp_path / "companion.db").exists()


def test_a_port_in_use_stops_run_with_one_line_naming_it(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_companion(["run"], companion_env(tmp_path, COMPANION_HTTP_PORT=str(port)))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"companion: COMPANION_HTTP_PORT: cannot listen on http://127.0.0.1:{port}"
    )


def test_the_docker_healthcheck_asks_livez_without_curl(tmp_path):
    port = free_port()
    env = companion_env(tmp_path, COMPANION_HTTP_PORT=str(port))
    check = [sys.executable, "-m", "bot.healthcheck"]
    assert subprocess.run(check, env=env, capture_output=True, timeout=30).returncode == 1  # nothing listens
    with spawn_companion(["run"], env) as process:
        try:
            wait_for_http(process, f"http://127.0.0.1:{port}/livez")
            assert subprocess.run(check, env=env, capture_output=True, timeout=30).returncode == 0
        finally:
            assert stop(process)[0] == 0
    off = {**env, "COMPANION_HTTP_PORT": "off"}
    assert subprocess.run(check, env=off, capture_output=True, timeout=30).returncode == 0
