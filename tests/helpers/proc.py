"""Run the real `companion` command line in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_DEFAULTS = "COMPANION_TEST_SHIPPED_DEFAULTS"


def companion_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPANION_")}
    env["COMPANION_DB_PATH"] = str(tmp_path / "companion.db")
    env["PYTHONPATH"] = str(ROOT)
    # Bursts stay on but short: each message waits this long for company before its turn (the
    # default 1.5 s would add that to every exchange of every wire test). Tests of bursts set their own.
    # COMPANION_TEST_SHIPPED_DEFAULTS=1 keeps the default as shipped, for a run of the whole wire
    # suite as a person would run the gateway (`pytest -m wire`; see docs).
    # Likewise the wait for Discord's guilds after READY (2 s as shipped, at every start of a gateway on
    # Discord): the fake Discord sends its one guild right after READY; no test is about that wait.
    if os.environ.get(SHIPPED_DEFAULTS) != "1":
        env["COMPANION_BURST_SECONDS"] = "0.2"
        env["COMPANION_DISCORD_GUILD_READY_SECONDS"] = "0.05"
    # The HTTP service is off unless a test turns it on (on a free port: tests and worktrees run side by side).
    env["COMPANION_HTTP_PORT"] = "off"
    env.update(extra)
    return env


def run_companion(
    args: list[str], env: dict[str, str], stdin: str = "", timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        input=stdin,
        env=env,
        cwd=cwd or env_cwd(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def env_cwd(env: dict[str, str]) -> Path:
    return Path(env["COMPANION_DB_PATH"]).parent


def spawn_companion(args: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bot", *args],
        env=env,
        cwd=env_cwd(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )
