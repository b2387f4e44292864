"""One process per database: real `companion run` and `companion chat` processes sharing one SQLite file."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from bot.instance import CHAT, RUN, InstanceLock, InstanceLockError, lock_path
from core.values import copy
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.proc import companion_env, run_companion, spawn_companion
from tests.helpers.telegram_gateway import polling, say, stop

USER = 111
PASS = "instance-sesame"
CANARY = "canary-3c51 said while the second one knocked"


@pytest.fixture(scope="module")
def pass_hash() -> str:
    from core.privacy.secrets import hash_passphrase

    return hash_passphrase(PASS)


def shared_env(tmp_path: Path, telegram: FakeTelegramServer, model: FakeOpenAIServer, pass_hash: str) -> dict[str, str]:
    """What `companion run` and `companion chat` both read: one database, one model, one passphrase."""
    return companion_env(
        tmp_path,
        COMPANION_TELEGRAM_TOKEN=telegram.token,
        COMPANION_TELEGRAM_BASE_URL=telegram.base_url,
        COMPANION_LLM_BASE_URL=model.base_url,
        COMPANION_ALLOWED_USERS=f"telegram:{USER}",
        COMPANION_PRIVATE_PASSPHRASE_HASH=pass_hash,
        COMPANION_PRIVATE_IDLE_MINUTES="0",
    )


def database(tmp_path: Path) -> Path:
    return (tmp_path / "companion.db").resolve()


def refusal(role: str, holder: subprocess.Popen[str], tmp_path: Path) -> str:
    return (
        f"companion: another `companion {role}` is already using {database(tmp_path)} (pid {holder.pid}); stop it first"
    )


class Output:
    """A process's stdout read in a thread, so a test can wait for a line without blocking forever."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._reader.start()

    def _pump(self, stream: IO[str]) -> None:
        with stream:
            for line in stream:
                self._lines.put(line)
        self._lines.put(None)

    def join(self) -> None:
        self._reader.join(30)

    def until(self, needle: str, timeout: float = 30.0) -> str:
        """The first line from here on that holds `needle`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise TimeoutError(f"no line with {needle!r} in time") from None
            if line is None:
                raise AssertionError(f"the output ended before a line with {needle!r}")
            if needle in line:
                return line


def end_chat(process: subprocess.Popen[str], out: Output) -> tuple[int, str]:
    """End of input ends the chat; returns its exit code and stderr."""
    process.stdin.close()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    finally:
        out.join()
        with process.stderr:
            stderr = process.stderr.read()
    return process.returncode, stderr


# --- the lock itself, in one process ---------------------------------------------------


def test_a_held_lock_refuses_a_second_holder_with_the_holders_pid_and_is_free_after(tmp_path: Path) -> None:
    import os

    db = tmp_path / "companion.db"
    with InstanceLock(db, RUN):
        with pytest.raises(InstanceLockError) as caught, InstanceLock(db, RUN):
            pass
        assert str(caught.value) == (
            f"another `companion run` is already using {db.resolve()} (pid {os.getpid()}); stop it first"
        )
        assert caught.value.holder_pid == os.getpid()
        with InstanceLock(db, CHAT):  # the terminal chat has a lock of its own
            pass
    with InstanceLock(db, RUN):  # released on exit
        pass


def test_an_in_memory_database_takes_no_lock(tmp_path: Path) -> None:
    assert lock_path(":memory:", RUN) is None
    with InstanceLock(":memory:", RUN), InstanceLock(":memory:", RUN):
        pass
    assert lock_path(tmp_path / "companion.db", RUN) == (tmp_path / "companion.db.run.lock").resolve()


# --- real processes --------------------------------------------------------------------


@pytest.mark.wire
def test_a_second_companion_run_on_one_database_exits_2_and_every_message_is_answered_once(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path, pass_hash: str
) -> None:
    telegram, model = telegram_servers
    env = shared_env(tmp_path, telegram, model, pass_hash)
    first = spawn_companion(["run"], env)
    second = None
    try:
        polling(telegram, first)
        greeted = len(telegram.calls_of("getMe"))
        second = spawn_companion(["run"], env)
        second.wait(30)  # refused at start-up; were it polling, it would answer every message beside the first

        before, asked = len(telegram.sent), len(model.raw_requests)
        for text in ("hello", "are you there?"):
            assert say(telegram, first, text).startswith("fake reply")
        # The chat's turns run in order: by the answer to a later /mode (which asks no model),
        # a second answer to either message would have been sent.
        assert say(telegram, first, "/mode").startswith("You are in ")
        assert len(telegram.sent) == before + 3
        assert len(model.raw_requests) == asked + 2

        refused = run_companion(["restore", str(tmp_path / "any-backup.db")], env)  # refused before it looks
        assert (refused.returncode, refused.stderr.splitlines()) == (
            2,
            [
                f"companion: `companion run` is using {database(tmp_path)} (pid {first.pid}); "
                "stop it before `companion restore`"
            ],
        )
    finally:
        code, stderr = stop(first)
        if second is not None:
            second_code, second_stderr = stop(second)
    assert code == 0, stderr
    assert second_code == 2
    assert second_stderr.splitlines() == [refusal(RUN, first, tmp_path)]
    assert len(telegram.calls_of("getMe")) == greeted  # it never reached Telegram


@pytest.mark.wire
def test_a_second_companion_chat_is_refused_and_the_first_stays_private(tmp_path: Path, pass_hash: str) -> None:
    with FakeOpenAIServer.run_in_thread() as model:
        env = companion_env(
            tmp_path,
            COMPANION_LLM_BASE_URL=model.base_url,
            COMPANION_PRIVATE_PASSPHRASE_HASH=pass_hash,
            COMPANION_PRIVATE_IDLE_MINUTES="0",
        )
        first = spawn_companion(["chat"], env)
        out = Output(first.stdout)
        try:
            first.stdin.write(f"hello before\n/private {PASS}\n")
            first.stdin.flush()
            out.until("Private mode is on")

            asked = len(model.raw_requests)
            second = run_companion(["chat"], env, stdin="/mode\nhello from a second terminal\n", timeout=30)
            assert second.returncode == 2
            assert second.stderr.splitlines() == [refusal(CHAT, first, tmp_path)]
            assert second.stdout == ""
            assert len(model.raw_requests) == asked

            first.stdin.write(f"{CANARY}\n/mode\n")
            first.stdin.flush()
            assert out.until("You are in").startswith("You are in private mode.")
            (request,) = [raw.decode() for raw in model.raw_requests if CANARY.encode() in raw]
            assert copy.PRIVATE_SYSTEM_LINE in request  # it went out as a private turn
        finally:
            code, stderr = end_chat(first, out)
    assert code == 0, stderr


@pytest.mark.wire
def test_companion_chat_runs_beside_the_gateway_and_leaves_its_private_segment_open(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path, pass_hash: str
) -> None:
    telegram, model = telegram_servers
    env = shared_env(tmp_path, telegram, model, pass_hash)
    gateway = spawn_companion(["run"], env)
    try:
        polling(telegram, gateway)
        assert say(telegram, gateway, f"/private {PASS}").startswith("Private mode is on")

        chat = run_companion(["chat"], env, stdin="/mode\nhello from the terminal\n", timeout=30)
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.startswith("You are in normal mode.")
        assert "fake reply" in chat.stdout

        assert say(telegram, gateway, "/mode").startswith("You are in private mode.")
        say(telegram, gateway, CANARY)
        assert CANARY.encode() in model.raw_requests[-1]
        assert copy.PRIVATE_SYSTEM_LINE.encode() in model.raw_requests[-1]
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr


@pytest.mark.wire
def test_after_sigkill_of_a_gateway_the_lock_is_free_again(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path, pass_hash: str
) -> None:
    telegram, model = telegram_servers
    env = shared_env(tmp_path, telegram, model, pass_hash)
    killed = spawn_companion(["run"], env)
    try:
        polling(telegram, killed)
    finally:
        killed.kill()
        killed.communicate(timeout=30)
    assert database(tmp_path).with_name("companion.db.run.lock").exists()  # left behind, and not in the way

    restarted = spawn_companion(["run"], env)
    try:
        polling(telegram, restarted)
        assert say(telegram, restarted, "hello again").startswith("fake reply")
    finally:
        code, stderr = stop(restarted)
    assert code == 0, stderr


@pytest.mark.wire
def test_restore_is_refused_while_a_chat_holds_the_database(tmp_path: Path) -> None:
    env = companion_env(tmp_path)
    chat = spawn_companion(["chat"], env)
    out = Output(chat.stdout)
    try:
        chat.stdin.write("/mode\n")
        chat.stdin.flush()
        out.until("You are in")
        made = run_companion(["backup", str(tmp_path / "backups") + "/"], env)  # a backup is fine meanwhile
        assert made.returncode == 0, made.stderr
        (snapshot,) = (tmp_path / "backups").iterdir()

        refused = run_companion(["restore", str(snapshot)], env)
        assert refused.returncode == 2
        assert refused.stderr.splitlines() == [
            f"companion: `companion chat` is using {database(tmp_path)} (pid {chat.pid}); "
            "stop it before `companion restore`"
        ]
        assert refused.stdout == ""
    finally:
        code, stderr = end_chat(chat, out)
    assert code == 0, stderr
    restored = run_companion(["restore", str(snapshot)], env)
    assert restored.returncode == 0, restored.stderr
