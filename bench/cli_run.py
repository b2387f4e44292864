"""3. The one-message CLI run, `printf 'hello\\n' | companion chat`: wall time and peak RSS, cold
(creating the database) and warm, against `python -c pass` in the same run; and what it imports."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._common import child_env, median
from bench._proc import console_script, import_report, run_child

WALL_BUDGET_S = 0.25  # the house budget (DEVELOPERS.md)
RSS_BUDGET_MIB = 40.0
FORBIDDEN = ("telegram", "discord", "apscheduler", "httpx")


def _cli_env(**extra: str) -> dict[str, str]:
    """The children's environment, with Python's bytecode cache allowed: an installed `companion`
    runs from its cached `.pyc` files, and a PYTHONDONTWRITEBYTECODE inherited from a developer's or
    a CI shell would make every run compile the project's modules again (about 0.2 s). The first
    run, which creates the warm database, writes the caches."""
    env = child_env(**extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _shim(script: str) -> str | None:
    """Another `companion` on the PATH, such as pyenv's shim, which a shell may find first."""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "companion"
        if candidate.is_file() and os.access(candidate, os.X_OK) and candidate.resolve() != Path(script).resolve():
            return str(candidate)
    return None


def _summary(runs: list[dict]) -> dict:
    return {
        "wall_median_s": round(median([r["wall_s"] for r in runs]), 4),
        "rss_median_mib": round(median([r["rss_mib"] for r in runs]), 2),
        "rss_max_mib": round(max(r["rss_mib"] for r in runs), 2),
        "runs": len(runs),
        "failed": [{"rc": r["rc"], "stderr": r["stderr"][-400:]} for r in runs if r["rc"] != 0],
    }


def _imports(tmp: Path) -> dict:
    """`python -X importtime -m bot chat` once: what it imports, slowest first."""
    env = _cli_env(COMPANION_DB_PATH=str(tmp / "imports" / "companion.db"))
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bot", "chat"],
        input=b"hello\n",
        capture_output=True,
        env=env,
        cwd=tmp,
        timeout=60,
    )
    report = import_report(proc.stderr.decode(errors="replace"), FORBIDDEN)
    report.pop("packages")
    report["rc"] = proc.returncode
    report["ok"] = proc.returncode == 0 and not report["forbidden_imported"]
    return report


def run(quick: bool = False) -> dict:
    repeats = 2 if quick else 5
    script = console_script()
    if script is None:
        return {"status": "skipped", "note": "no `companion` entry point installed", "ok": False}
    shim = _shim(script)
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp_name:
        tmp = Path(tmp_name)  # also the working directory: no stray .env is read
        warm_db = tmp / "warm" / "companion.db"
        warm_env = _cli_env(COMPANION_DB_PATH=str(warm_db))
        chat = [script, "chat"]
        created = run_child(chat, b"hello\n", warm_env, tmp)  # creates the warm database
        runs: dict[str, list[dict]] = {"baseline": [], "cold": [], "warm": [], "shim_warm": []}
        for i in range(repeats):
            # Interleaved, so load from elsewhere on the machine falls on every kind alike.
            runs["baseline"].append(run_child([sys.executable, "-c", "pass"], b"", child_env(), tmp))
            cold_env = _cli_env(COMPANION_DB_PATH=str(tmp / f"cold-{i}" / "companion.db"))
            runs["cold"].append(run_child(chat, b"hello\n", cold_env, tmp))
            runs["warm"].append(run_child(chat, b"hello\n", warm_env, tmp))
            if shim:
                runs["shim_warm"].append(run_child([shim, "chat"], b"hello\n", warm_env, tmp))
        imports = _imports(tmp)
    replied = created["rc"] == 0 and created["stdout"].strip() != ""
    result: dict = {
        "entry_point": script,
        "first_reply_chars": len(created["stdout"].strip()),
        "replied": replied,
        "baseline": _summary(runs["baseline"]),
        "cold": _summary(runs["cold"]),
        "warm": _summary(runs["warm"]),
        "wall_budget_s": WALL_BUDGET_S,
        "rss_budget_mib": RSS_BUDGET_MIB,
        "imports": imports,
    }
    if runs["shim_warm"]:
        result["shim"] = shim
        result["shim_warm"] = _summary(runs["shim_warm"])
    for kind in ("cold", "warm"):
        summary = result[kind]
        summary["wall_ratio"] = round(summary["wall_median_s"] / result["baseline"]["wall_median_s"], 2)
        summary["rss_ratio"] = round(summary["rss_median_mib"] / result["baseline"]["rss_median_mib"], 2)
        summary["ok"] = (
            not summary["failed"]
            and summary["wall_median_s"] < WALL_BUDGET_S
            and summary["rss_max_mib"] < RSS_BUDGET_MIB
        )
    result["ok"] = replied and result["cold"]["ok"] and result["warm"]["ok"] and imports["ok"]
    return result
