"""A model server whose streams fail before their first event, through `companion run` (a real subprocess)
with the defaults as shipped (bursts 1.5 s, streaming one edit a second, tools on), on Telegram, Discord
and the web chat (issue 29, points 1 and 7).

Two such servers: llama-cpp-python's chatml-function-calling, which streams only without tools (with
tools and tool_choice "auto": 200 text/event-stream and a body that ends with no event), and one that
closes every stream right after its headers. Each turn is answered in words (never the apology), the
log says so once, and no later turn sends the failing streamed shape again. Words already shown are
still never asked for again: a stream broken after its first words ends as it always did.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.values import copy
from tests.bot.test_discord_streaming_wire import stream_env as discord_stream_env
from tests.bot.test_gateway_discord import FRIEND
from tests.bot.test_streaming_telegram_wire import USER, said_last, story, stream_env
from tests.bot.test_web_stream_wire import log_of, ready, spawn, until
from tests.helpers.fake_openai import FakeOpenAIServer, completion_json, stream_completion
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env
from tests.helpers.running import Running
from tests.helpers.web import signed_in_browser, stop_gateway
from tests.helpers.web_pages import EventStream
from tests.helpers.wire_platforms import shipped

pytestmark = pytest.mark.wire


def like_llama_cpp_python(model: FakeOpenAIServer) -> None:
    """llama-cpp-python 0.3.36 with chatml-function-calling, as measured: no event to a streamed request
    offering tools with tool_choice "auto", and no usage in the streams it does send."""
    model.streams_with_tools = False
    model.stream_usage = False


FAULTS: dict[str, Callable[[FakeOpenAIServer], None]] = {
    "streams-only-without-tools": like_llama_cpp_python,
    "closes-after-headers": lambda model: setattr(model, "stream_closed_after_headers", True),
}
BY_FAULT = pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
SAID = ("hello there", "and how are you?")
APOLOGIES = (copy.PROVIDER_FAILED, copy.PROVIDER_SERVER_FAILED, copy.MODEL_ANSWER_UNUSABLE)


def answered(body: dict[str, Any]) -> str:
    return f"answer to {said_last(body)}"


def shapes(model: FakeOpenAIServer) -> list[tuple[bool, bool]]:
    """Each request of a turn the server got: (streamed, offering tools)."""
    return [(body.get("stream") is True, bool(body.get("tools"))) for body in model.requests]


def assert_answered_once_unstreamed(model: FakeOpenAIServer, replies: list[str], log: str) -> None:
    """Both turns answered in words; the first streamed with tools once, then the same request
    unstreamed; the second never streamed; one warning, naming what to set."""
    assert replies == [f"answer to {said}" for said in SAID]
    assert not any(apology in reply for reply in replies for apology in APOLOGIES)
    assert shapes(model) == [(True, True), (False, True), (False, True)]
    warnings = [line for line in log.splitlines() if "does not stream" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0]
    assert "COMPANION_LLM_TOOLS=false" in warnings[0] and "COMPANION_STREAM_EDIT_SECONDS=off" in warnings[0]
    assert "answer to" not in log  # nothing a model wrote reaches the log


# --- Telegram ------------------------------------------------------------------------------------------------


@BY_FAULT
def test_a_telegram_turn_on_a_server_whose_streams_fail_is_answered_and_that_shape_is_not_streamed_again(
    tmp_path: Path, telegram_servers, fault: str
) -> None:
    telegram, model = telegram_servers
    FAULTS[fault](model)
    model.responder = answered
    with Running(stream_env(tmp_path, telegram, model)) as gateway:
        gateway.wait_running()
        for count, said in enumerate(SAID, 1):
            telegram.send_text(USER, USER, said)
            gateway.wait_for(lambda n=count: len(telegram.texts_to(USER)) == n, f"the answer to {said}")
        code, log = gateway.end(signal.SIGTERM)
    assert code == 0, log
    assert_answered_once_unstreamed(model, telegram.texts_to(USER), log)
    assert telegram.edits_of(USER) == []  # nothing shown while written: each answer was sent whole


def test_a_telegram_stream_broken_after_its_first_words_were_shown_is_never_asked_again(
    tmp_path: Path, telegram_servers
) -> None:
    telegram, model = telegram_servers
    chunks = stream_completion(completion_json(story(60)), include_usage=True)
    model.reply_stream([json.dumps(chunk) for chunk in chunks], pause=0.1, cut_after=30)  # 3 s of words, then a drop
    model.responder = answered
    with Running(stream_env(tmp_path, telegram, model)) as gateway:
        gateway.wait_running()
        telegram.send_text(USER, USER, "tell me a long story")
        gateway.wait_for(lambda: copy.PROVIDER_FAILED in telegram.texts_to(USER), "the failure line")
        telegram.send_text(USER, USER, SAID[0])
        gateway.wait_for(lambda: f"answer to {SAID[0]}" in telegram.texts_to(USER), "the next answer")
        code, log = gateway.end(signal.SIGTERM)
    assert code == 0, log
    # The words were shown, then replaced by the failure line: one message, never a second answer.
    assert any("word3 " in edit.text for edit in telegram.edits_of(USER))
    assert telegram.texts_to(USER) == [copy.PROVIDER_FAILED, f"answer to {SAID[0]}"]
    # Asked once; and streaming is not held against the server: the next turn streamed with its tools.
    assert shapes(model) == [(True, True), (True, True)]
    assert "does not stream" not in log


# --- Discord -------------------------------------------------------------------------------------------------


@BY_FAULT
def test_a_discord_turn_on_a_server_whose_streams_fail_is_answered_and_that_shape_is_not_streamed_again(
    tmp_path: Path, discord_servers, passphrase_hash, fault: str
) -> None:
    discord_server, model = discord_servers
    FAULTS[fault](model)
    model.responder = answered
    dm = discord_server.dm_channel_id(FRIEND)
    with Running(discord_stream_env(tmp_path, discord_server, model, passphrase_hash)) as gateway:
        gateway.wait_running()
        for count, said in enumerate(SAID, 1):
            discord_server.call(discord_server.send_dm(FRIEND, said))
            gateway.wait_for(lambda n=count: len(discord_server.shown(dm)) == n, f"the answer to {said}")
        code, log = gateway.end(signal.SIGTERM)
    assert code == 0, log
    assert_answered_once_unstreamed(model, discord_server.shown(dm), log)
    assert discord_server.edits == []  # nothing shown while written: each answer was sent whole


# --- the web chat ----------------------------------------------------------------------------------------------


@BY_FAULT
async def test_a_web_chat_turn_on_a_server_whose_streams_fail_is_answered_and_that_shape_is_not_streamed_again(
    tmp_path: Path, fault: str
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "companion.log"
    with FakeOpenAIServer.run_in_thread() as model:
        FAULTS[fault](model)
        model.responder = answered
        # As shipped: bursts, streaming and tools at their defaults (companion_env shortens the bursts).
        env = companion_env(
            tmp_path,
            COMPANION_HTTP_PORT=str(port),
            COMPANION_LLM_BASE_URL=model.base_url,
            COMPANION_LOG_LEVEL="INFO",
            COMPANION_BURST_SECONDS=shipped("burst_seconds"),
        )
        process = spawn(env, log)
        try:
            await ready(base, process, log)
            async with signed_in_browser(base, env) as (browser, csrf), EventStream(browser) as events:
                await events.next("history")
                for said in SAID:
                    sent = await browser.post("/send", json={"text": said}, headers={"X-CSRF-Token": csrf})
                    assert sent.status_code == 200, sent.text
                    await until(lambda s=said: f"answer to {s}" in live_texts(events), f"the answer to {said}")
                await asyncio.sleep(0.5)  # anything more on its way
                replies = [text for text in live_texts(events) if text not in SAID]
                assert not [kind for _, kind, _ in events.received if kind == "partial"]  # sent whole
        finally:
            stop_gateway(process)
    assert process.returncode == 0, log_of(log)[-3000:]
    assert_answered_once_unstreamed(model, replies, log_of(log))


def live_texts(events: EventStream) -> list[str]:
    return [data["text"] for _, kind, data in events.received if kind == "live" and isinstance(data, dict)]
