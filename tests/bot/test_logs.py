"""No private text in logs at any level, DEBUG included."""

from __future__ import annotations

import pytest

from core.privacy.secrets import hash_passphrase
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.proc import companion_env, run_companion

CANARY = "LOG-CANARY-5150"


@pytest.mark.wire
def test_no_private_text_reaches_the_logs_at_debug(tmp_path):
    with FakeOpenAIServer.run_in_thread() as server:
        server.responder = lambda body: f"echo {body['messages'][-1].get('content', '')[:40]}"
        env = companion_env(
            tmp_path,
            COMPANION_LLM_BASE_URL=server.base_url,
            COMPANION_LOG_LEVEL="DEBUG",
            COMPANION_PRIVATE_PASSPHRASE_HASH=hash_passphrase("pw"),
            COMPANION_ALLOW_PRIVATE_EXPORT="true",
            COMPANION_CONTEXT_TOKENS="300",
        )
        lines = ["normal talk"] + ["/private pw 1h"] + [f"{CANARY} number {i} " + "x" * 80 for i in range(12)]
        lines += ["/export", "/export confirm", "/mode", "/normal", f"/recall {CANARY}", "normal again"]
        result = run_companion(["chat"], env, stdin="\n".join(lines) + "\n", cwd=tmp_path)
        report = run_companion(["report"], env)
        bk = run_companion(["backup", str(tmp_path / "bk") + "/"], env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert CANARY in result.stdout  # the private thread itself answered
    assert "DEBUG" in result.stderr and "conversation" in result.stderr  # logging was on, by ids and sizes
    for output in (result.stderr, report.stdout, report.stderr, bk.stdout, bk.stderr):
        assert CANARY not in output
        assert "pw 1h" not in output


def test_a_logged_exception_is_one_line_naming_its_type_without_its_message_or_traceback():
    import logging
    import sys

    from bot.logs import FORMAT, OneLineFormatter

    try:
        raise ValueError(f"payload {CANARY}")
    except ValueError:
        record = logging.LogRecord("discord.client", logging.ERROR, __file__, 1, "reconnecting", None, sys.exc_info())
    line = OneLineFormatter(FORMAT).format(record)
    assert line.endswith("discord.client: reconnecting (ValueError)")
    assert "\n" not in line and CANARY not in line and "Traceback" not in line
