"""No private text in logs at any level, DEBUG included."""

from __future__ import annotations

import logging

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


def library_record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args or None, None)


def test_a_library_line_keeps_its_words_and_numbers_but_never_a_string_it_was_given():
    from bot.logs import FORMAT, OneLineFormatter

    formatter = OneLineFormatter(FORMAT)
    # python-telegram-bot's line for a batch of updates it cannot parse, and discord.py's rate limit.
    batch = [{"update_id": 7, "message": {"chat": {"id": 1}, "text": CANARY}}]
    unparsed = library_record("telegram.ext.ExtBot", logging.CRITICAL, "Received data was %r", batch)
    limited = library_record(
        "discord.http", logging.WARNING, "%s %s responded with %d, retry in %.2f s", "GET", CANARY, 429, 1.5
    )

    assert formatter.format(unparsed).endswith("telegram.ext.ExtBot: Received data was '<withheld>'")
    assert formatter.format(limited).endswith("discord.http: <withheld> <withheld> responded with 429, retry in 1.50 s")


def test_a_library_line_is_its_first_line_with_every_quoted_string_withheld():
    from bot.logs import FORMAT, OneLineFormatter

    # asyncio's default exception handler writes the handle (and its arguments) into the message itself.
    record = library_record(
        "asyncio",
        logging.ERROR,
        f"Exception in callback deliver('{CANARY}')\nhandle: <Handle deliver('{CANARY}')>",
    )
    line = OneLineFormatter(FORMAT).format(record)
    assert line.endswith("asyncio: Exception in callback deliver(<withheld>)")


def test_a_library_line_whose_placeholder_wants_a_withheld_string_shows_its_words_alone():
    from bot.logs import FORMAT, OneLineFormatter

    record = library_record("telegram.ext.Application", logging.ERROR, "update %(update)d of %(text)s", {"update": "x"})
    assert OneLineFormatter(FORMAT).format(record).endswith("telegram.ext.Application: update %(update)d of %(text)s")


def test_our_own_lines_are_shown_whole():
    from bot.logs import FORMAT, OneLineFormatter

    record = library_record(
        "adapters.telegram.adapter", logging.INFO, "telegram: update %s (%s, %d bytes)", 7, "message", 90
    )
    assert (
        OneLineFormatter(FORMAT)
        .format(record)
        .endswith("adapters.telegram.adapter: telegram: update 7 (message, 90 bytes)")
    )
