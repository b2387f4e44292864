"""`companion doctor` against the fake servers: each failure mode gives its line naming the fix, a working
setup exits 0, and the doctor neither prints a secret nor writes to the database."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.storage.stores import Stores, open_stores
from bot.cli import _check_db_path
from bot.doctor import FAIL, INFO, OK, WARN, Report, diagnose
from bot.instance import RUN, InstanceLock
from bot.settings import Settings
from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse, completion_json
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.proc import companion_env, run_companion
from tests.helpers.stream_shapes import LLAMA_ERROR_MIDSTREAM, stream_unsupported

API_KEY = "sk-doctor-secret-key-0123456789"
TELEGRAM_TOKEN = "123456:TEST-token"


class ModelServer(FakeOpenAIServer):
    """The fake model server, also speaking what the doctor asks beside chat completions:
    llama.cpp's /props (`n_ctx`) and Ollama's /api/show (`num_ctx`); it streams as the fake model
    server does (`streams` False: it answers a streamed request in one piece). By default its model
    calls a tool when the request forces one."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, **kwargs)
        self.n_ctx: int | None = None
        self.num_ctx: int | None = None
        self.models_status = 200  # 401: GET /models refuses the API key
        self.responder = _calls_a_forced_tool

    async def _bind(self, app: web.Application) -> None:
        app.router.add_get("/props", self._props)
        app.router.add_post("/api/show", self._show)
        await super()._bind(app)

    async def _models(self, request: web.Request) -> web.Response:
        if self.models_status != 200:
            return web.json_response({"error": {"message": "Incorrect API key"}}, status=self.models_status)
        return await super()._models(request)

    async def _props(self, request: web.Request) -> web.Response:
        if self.n_ctx is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response({"default_generation_settings": {"n_ctx": self.n_ctx}, "total_slots": 1})

    async def _show(self, request: web.Request) -> web.Response:
        if self.num_ctx is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response({"parameters": f"stop <eot>\nnum_ctx {self.num_ctx}", "model_info": {}})

    @property
    def streams(self) -> bool:
        return self.streaming

    @streams.setter
    def streams(self, value: bool) -> None:
        self.streaming = value


def _calls_a_forced_tool(body: dict[str, Any]) -> Any:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        call = {"id": "call_p", "type": "function", "function": {"name": name, "arguments": '{"word":"ping"}'}}
        return completion_json(None, tool_calls=[call])
    return "done"


@pytest.fixture
async def model() -> AsyncIterator[ModelServer]:
    async with ModelServer(model="tiny") as server:
        yield server


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TELEGRAM_TOKEN) as server:
        yield server


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscordServer]:
    async with FakeDiscordServer() as server:
        yield server


def settings_for(tmp_path: Path, **values: Any) -> Settings:
    return Settings(_env_file=None, db_path=tmp_path / "companion.db", **values)


def model_settings(tmp_path: Path, model: ModelServer, **values: Any) -> Settings:
    return settings_for(tmp_path, llm_base_url=model.base_url, llm_model="tiny", llm_timeout=10, **values)


async def doctor(settings: Settings) -> Report:
    return await diagnose(settings, check_path=_check_db_path)


def lines(report: Report, status: str | None = None) -> list[str]:
    return [
        line.text for section in report.sections for line in section.lines if status is None or line.status == status
    ]


def failing(report: Report, *words: str) -> list[str]:
    """The FAIL lines holding every one of `words`."""
    return [text for text in lines(report, FAIL) if all(word in text for word in words)]


# --- a working setup --------------------------------------------------------------------------------


async def test_a_working_setup_has_no_problem_and_says_what_each_part_can_do(
    tmp_path, model, telegram, discord
) -> None:
    model.n_ctx = 8192
    settings = model_settings(
        tmp_path,
        model,
        telegram_token=TELEGRAM_TOKEN,
        telegram_base_url=telegram.base_url,
        discord_token=discord.token,
        discord_api_base=discord.api_base,
        allowed_users=f"telegram:1,discord:{discord.owner_id}",
        private_passphrase_hash=None,
    )

    report = await doctor(settings)

    assert report.problems == 0, report.render()
    text = report.render()
    assert "reachable; it serves tiny" in text
    assert "tool calls: a forced call of a probe tool and its result went round" in text
    assert "words with tools offered: answered in words" in text
    assert "context window: 8192 tokens" in text and "streaming: the server streams" in text
    assert "@companion_test_bot answers getMe" in text and "the Message Content intent is on" in text
    assert "Everything configured works." in text


async def test_the_tool_probe_forces_its_tool_and_sends_the_result_back(tmp_path, model) -> None:
    await doctor(model_settings(tmp_path, model))

    forced = [r for r in model.requests if isinstance(r.get("tool_choice"), dict)]
    assert forced and forced[0]["tool_choice"] == {"type": "function", "function": {"name": "doctor_probe"}}
    answered = next(r for r in model.requests if any(m["role"] == "tool" for m in r["messages"]))
    assert answered["messages"][-2] == {"role": "tool", "content": "pong", "tool_call_id": "call_p"}


# --- the model server, each failure with its line ---------------------------------------------------


async def test_an_unreachable_model_server_names_the_base_url(tmp_path) -> None:
    report = await doctor(settings_for(tmp_path, llm_base_url="http://127.0.0.1:9/v1", llm_timeout=5))

    assert failing(report, "could not reach", "COMPANION_LLM_BASE_URL")


async def test_a_refused_api_key_names_the_api_key_setting(tmp_path, model) -> None:
    model.models_status = 401

    report = await doctor(model_settings(tmp_path, model, llm_api_key=API_KEY))

    assert failing(report, "answered 401", "COMPANION_LLM_API_KEY")


async def test_a_missing_model_names_the_models_the_server_has(tmp_path, model) -> None:
    missing = {"error": {"message": 'model "big" not found, try pulling it first', "type": "api_error"}}
    model.script(ScriptedResponse(status=404, body=missing))
    settings = settings_for(tmp_path, llm_base_url=model.base_url, llm_model="big", llm_timeout=10)

    report = await doctor(settings)

    assert failing(report, "COMPANION_LLM_MODEL to one of: tiny", "ollama pull big")


async def test_a_server_refusing_tools_says_to_turn_them_off(tmp_path, model) -> None:
    model.responder = None
    model.script(
        "OK",  # the plain chat
        ScriptedResponse(status=400, body={"error": {"message": "tiny does not support tools", "type": "api_error"}}),
    )

    report = await doctor(model_settings(tmp_path, model))

    assert failing(report, "tool calls", "COMPANION_LLM_TOOLS=false", "/remember")


async def test_a_tool_call_left_as_text_names_the_servers_tool_parsing(tmp_path, model) -> None:
    model.responder = None
    model.script("OK", 'functions.doctor_probe: {"word": "ping"}')

    report = await doctor(model_settings(tmp_path, model))

    assert failing(report, "sent the call as text", "--jinja", "chatml-function-calling", "COMPANION_LLM_TOOLS=false")


async def test_a_model_that_answers_in_words_when_told_to_call_a_tool_cannot_call_tools(tmp_path, model) -> None:
    model.responder = None
    model.script("OK", "I would rather not.")

    report = await doctor(model_settings(tmp_path, model))

    assert failing(report, "although the tool call was required", "COMPANION_LLM_TOOLS=false")


@pytest.mark.parametrize("answer", ["", "functions.doctor_probe:", "a call each time"])
async def test_a_server_that_never_answers_in_words_with_tools_offered_is_told_to_turn_them_off(
    tmp_path, model, answer
) -> None:
    # llama-cpp-python's chatml-function-calling: with tools and tool_choice "auto", its "message:"
    # branch may only continue with a function name or the end, so no answer is ever words.
    def like_llama_cpp_python(body):
        if isinstance(body.get("tool_choice"), dict) or not body.get("tools"):
            return _calls_a_forced_tool(body)
        if answer == "a call each time":
            return _calls_a_forced_tool({"tool_choice": {"function": {"name": "doctor_probe"}}})
        return answer

    model.responder = like_llama_cpp_python

    report = await doctor(model_settings(tmp_path, model))

    assert failing(report, "words with tools offered", "asked twice", "COMPANION_LLM_TOOLS=false")
    assert any(t.startswith("tool calls: a forced call") for t in lines(report, OK))


async def test_with_tools_off_the_doctor_says_when_the_server_could_call_them(tmp_path, model) -> None:
    report = await doctor(model_settings(tmp_path, model, llm_tools=False))

    assert report.problems == 0
    assert any("COMPANION_LLM_TOOLS=true lets the model remember by itself" in text for text in lines(report, INFO))


async def test_with_tools_off_for_a_server_that_never_answers_in_words_the_doctor_agrees(tmp_path, model) -> None:
    model.responder = lambda body: (
        _calls_a_forced_tool(body) if not body.get("tools") or body.get("tool_choice") != "auto" else ""
    )

    report = await doctor(model_settings(tmp_path, model, llm_tools=False))

    assert report.problems == 0
    assert any("off (COMPANION_LLM_TOOLS=false), and rightly so" in text for text in lines(report, INFO))


async def test_image_input_refused_says_to_turn_vision_off(tmp_path, model) -> None:
    model.accept_images = False

    report = await doctor(model_settings(tmp_path, model, llm_vision=True))

    assert failing(report, "image input", "COMPANION_LLM_VISION=false")


async def test_image_input_taken_is_ok(tmp_path, model) -> None:
    report = await doctor(model_settings(tmp_path, model, llm_vision=True))

    assert "image input: the model took a probe image" in lines(report, OK)
    assert len(model.images) == 1


async def test_a_context_window_smaller_than_the_budget_says_which_number_fits(tmp_path, model) -> None:
    model.n_ctx = 2048

    report = await doctor(model_settings(tmp_path, model, context_tokens=3000, llm_max_tokens=1024))

    assert failing(report, "2048 tokens", "COMPANION_CONTEXT_TOKENS=1024", "-c")


async def test_ollamas_num_ctx_is_read_from_api_show(tmp_path, model) -> None:
    model.num_ctx = 16384

    report = await doctor(model_settings(tmp_path, model))

    assert any(t.startswith("context window: 16384 tokens (Ollama") for t in lines(report, OK))
    assert any("up to COMPANION_CONTEXT_TOKENS=15360 would fit" in t for t in lines(report, OK))


async def test_a_server_that_reports_no_context_window_is_told_what_it_must_hold(tmp_path, model) -> None:
    report = await doctor(model_settings(tmp_path, model))

    assert any("does not report its context window" in t and "= 4024" in t for t in lines(report, INFO))


async def test_a_server_that_does_not_stream_is_noted_not_failed(tmp_path, model) -> None:
    model.streams = False

    report = await doctor(model_settings(tmp_path, model))

    assert report.problems == 0
    assert any(t.startswith("streaming:") and "in one piece" in t for t in lines(report, INFO))


async def test_a_server_whose_streams_fail_is_a_problem_with_its_fix(tmp_path, model) -> None:
    # Its plain chat works, so every streamed turn would fail: the doctor says how to send replies whole.
    model.responder = lambda body: (
        ScriptedResponse(events=LLAMA_ERROR_MIDSTREAM.events, done=False)
        if body.get("stream")
        else _calls_a_forced_tool(body)
    )

    report = await doctor(model_settings(tmp_path, model))

    [line] = [t for t in lines(report, FAIL) if t.startswith("streaming:")]
    assert "reported an error" in line and "COMPANION_STREAM_EDIT_SECONDS=off" in line


async def test_with_streaming_off_no_streamed_request_is_sent(tmp_path, model) -> None:
    report = await doctor(model_settings(tmp_path, model, stream_edit_seconds="off"))

    assert report.problems == 0
    assert "streaming: off (COMPANION_STREAM_EDIT_SECONDS=off): replies are sent whole" in lines(report, INFO)
    assert not any(body.get("stream") for body in model.requests)


async def test_the_streaming_probe_sends_and_reads_a_streamed_request_as_a_turn_does(tmp_path, model) -> None:
    # A server refusing what a turn sends (here OpenAI's 400 to `stream: true`) is found by the doctor too.
    model.stream_refusal = stream_unsupported()

    report = await doctor(model_settings(tmp_path, model))

    assert report.problems == 0
    assert any(
        "does not stream, with a tool offered (it failed a streamed request with 400) or without" in t
        for t in lines(report, INFO)
    )
    streamed = [body for body in model.requests if body.get("stream")]
    assert streamed and all(body["stream_options"] == {"include_usage": True} for body in streamed)


async def test_the_streaming_probe_offers_the_tools_a_turn_offers(tmp_path, model) -> None:
    await doctor(model_settings(tmp_path, model))

    streamed = [body for body in model.requests if body.get("stream")]
    assert streamed and all(body["tool_choice"] == "auto" and body["tools"] for body in streamed)


async def test_with_tools_off_the_streaming_probe_offers_none(tmp_path, model) -> None:
    model.streams_with_tools = False  # it would not matter: no turn offers tools

    report = await doctor(model_settings(tmp_path, model, llm_tools=False))

    streamed = [body for body in model.requests if body.get("stream")]
    assert streamed and not any("tools" in body or "tool_choice" in body for body in streamed)
    assert "streaming: the server streams" in lines(report, OK)


async def test_a_server_that_streams_only_without_tools_is_reported_as_such_never_as_streaming(tmp_path, model) -> None:
    # llama-cpp-python's chatml-function-calling: `stream: true` with tools and tool_choice "auto" is
    # an empty stream; the same request unstreamed, or without tools streamed, is answered.
    model.streams_with_tools = False

    report = await doctor(model_settings(tmp_path, model))

    assert not any(t.startswith("streaming:") for t in lines(report, OK))
    [line] = [t for t in lines(report, INFO) if t.startswith("streaming:")]
    assert "streams only without tools" in line and "replies are sent whole" in line
    assert "COMPANION_LLM_TOOLS=false" in line and "COMPANION_STREAM_EDIT_SECONDS=off" in line
    assert report.problems == 0  # every turn is answered, whole
    streamed = [(bool(body.get("tools")), body.get("stream") is True) for body in model.requests if "stream" in body]
    assert streamed == [(True, True), (False, True)]  # with the turn's tools, then without


# --- speech to text and the platforms -------------------------------------------------------------------


async def test_speech_to_text_is_probed_when_configured(tmp_path, model) -> None:
    settings = settings_for(tmp_path, stt_base_url=model.base_url)
    assert "a probe of half a second of silence was transcribed" in lines(await doctor(settings), OK)

    model.transcripts.append(ScriptedResponse(status=500, body={"error": {"message": "broken"}}))
    report = await doctor(settings)

    assert failing(report, "answered 500", "COMPANION_STT_BASE_URL")
    assert model.transcriptions[0]["content_type"] == "audio/wav"


async def test_a_refused_telegram_token_names_the_setting_and_botfather(tmp_path, telegram) -> None:
    settings = settings_for(
        tmp_path,
        telegram_token="999999:WRONG-token",
        telegram_base_url=telegram.base_url,
        allowed_users="telegram:1",
    )

    report = await doctor(settings)

    assert failing(report, "Telegram refused the token", "@BotFather", "COMPANION_TELEGRAM_TOKEN")


async def test_the_webhook_telegram_holds_is_shown_beside_the_one_the_settings_ask_for(tmp_path, telegram) -> None:
    url = "https://companion.example.com/telegram/hook"
    hooked = settings_for(
        tmp_path,
        telegram_token=TELEGRAM_TOKEN,
        telegram_base_url=telegram.base_url,
        telegram_webhook_url=url,
        telegram_webhook_secret="s3cret",
        allowed_users="telegram:1",
    )
    polling = settings_for(
        tmp_path, telegram_token=TELEGRAM_TOKEN, telegram_base_url=telegram.base_url, allowed_users="telegram:1"
    )

    not_yet = await doctor(hooked)
    telegram.webhook = {"url": url, "secret_token": "s3cret"}
    telegram.last_webhook_error = "Wrong response from the webhook: 503 Service Unavailable"
    set_now = await doctor(hooked)
    left_set = await doctor(polling)

    assert f"webhook: not set; `companion run` sets {url}" in lines(not_yet, INFO)
    assert f"webhook: set to {url}" in lines(set_now, OK)
    assert (
        "webhook: Telegram's last delivery failed: Wrong response from the webhook: 503 Service Unavailable "
        "(check the proxy and its TLS)"
    ) in lines(set_now, WARN)
    assert f"webhook: one is set ({url}); `companion run` removes it, to poll" in lines(left_set, WARN)
    assert not any("s3cret" in text for text in lines(set_now))


async def test_an_unreachable_telegram_api_is_its_own_line(tmp_path) -> None:
    settings = settings_for(
        tmp_path, telegram_token=TELEGRAM_TOKEN, telegram_base_url="http://127.0.0.1:9/bot", allowed_users="telegram:1"
    )

    report = await doctor(settings)

    assert failing(report, "could not reach 127.0.0.1", "COMPANION_TELEGRAM_BASE_URL")


async def test_a_refused_discord_token_names_the_setting(tmp_path, discord) -> None:
    settings = settings_for(
        tmp_path, discord_token="not-the-token", discord_api_base=discord.api_base, allowed_users="discord:1"
    )

    report = await doctor(settings)

    assert failing(report, "Discord refused the token", "COMPANION_DISCORD_TOKEN")


async def test_the_message_content_intent_off_says_where_to_turn_it_on(tmp_path) -> None:
    async with FakeDiscordServer(privileged_intents=0) as discord:
        settings = settings_for(
            tmp_path, discord_token=discord.token, discord_api_base=discord.api_base, allowed_users="discord:1"
        )
        report = await doctor(settings)

    assert failing(report, "Message Content intent is off", "Privileged Gateway Intents")


# --- the database ------------------------------------------------------------------------------------


async def write(stores: Stores, sql: str) -> None:
    async with stores.database.tx() as db:
        await db.execute(sql)


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


async def make_database(path: Path, *, private: bool = False) -> None:
    async with open_stores(path) as stores:
        await write(
            stores,
            "INSERT INTO conversations (platform, chat_id, kind, created_at) VALUES ('terminal', 'terminal', 'direct', 1)",
        )
        if private:
            await write(
                stores,
                "INSERT INTO segments (conversation_id, anchor_message_id, started_at, last_activity_at) "
                "VALUES (1, 0, 1, 1)",
            )


async def test_the_database_line_counts_open_private_intervals_and_nothing_else(tmp_path) -> None:
    await make_database(tmp_path / "companion.db", private=True)

    report = await doctor(settings_for(tmp_path))

    (line,) = [t for t in lines(report) if t.startswith("writable")]
    assert "migrations current" in line and "1 private interval open" in line


async def test_the_doctor_writes_nothing_to_a_closed_database(tmp_path) -> None:
    await make_database(tmp_path / "companion.db", private=True)
    before = snapshot(tmp_path)

    await doctor(settings_for(tmp_path))

    assert snapshot(tmp_path) == before  # no byte changed, no -wal, -shm or lock file created


async def test_the_doctor_reads_beside_a_running_gateway_without_writing_or_taking_its_lock(tmp_path) -> None:
    path = tmp_path / "companion.db"
    await make_database(path)
    with InstanceLock(path, RUN):
        async with open_stores(path) as stores:
            await write(
                stores, "INSERT INTO conversations (platform, chat_id, kind, created_at) VALUES ('x', 'y', 'direct', 1)"
            )
            database = {name: digest for name, digest in snapshot(tmp_path).items() if not name.endswith("-shm")}

            report = await doctor(settings_for(tmp_path))

            assert [t for t in lines(report) if t.startswith("writable")]
            after = {name: digest for name, digest in snapshot(tmp_path).items() if not name.endswith("-shm")}
            assert after == database
            await write(
                stores, "INSERT INTO conversations (platform, chat_id, kind, created_at) VALUES ('x', 'z', 'direct', 1)"
            )
        with pytest.raises(Exception, match="already using"):
            InstanceLock(path, RUN).acquire()  # the gateway's lock is still its own


async def test_a_database_that_does_not_exist_yet_is_not_created(tmp_path) -> None:
    settings = Settings(_env_file=None, db_path=tmp_path / "data" / "companion.db")

    report = await doctor(settings)

    assert any("not created yet" in t for t in lines(report, OK))
    assert list(tmp_path.iterdir()) == []


async def test_a_database_of_a_newer_companion_says_upgrade(tmp_path) -> None:
    path = tmp_path / "companion.db"
    await make_database(path)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_migrations (name, applied_at) VALUES ('9999_future.sql', 0)")
    db.close()

    report = await doctor(settings_for(tmp_path))

    assert failing(report, "newer companion", "9999_future.sql", "upgrade")


async def test_a_file_that_is_not_a_database_names_the_setting(tmp_path) -> None:
    (tmp_path / "companion.db").write_text("not a database at all, just words in a file")

    report = await doctor(settings_for(tmp_path))

    assert failing(report, "COMPANION_DB_PATH", "not an SQLite database")


# --- settings that disagree ---------------------------------------------------------------------------


async def test_a_token_without_any_allowed_account_means_nobody_may_talk(tmp_path, telegram) -> None:
    settings = settings_for(tmp_path, telegram_token=TELEGRAM_TOKEN, telegram_base_url=telegram.base_url)

    report = await doctor(settings)

    assert failing(report, "nobody may talk with the Telegram bot", "COMPANION_ALLOWED_USERS")


async def test_vision_without_a_model_server_disagrees(tmp_path) -> None:
    report = await doctor(settings_for(tmp_path, llm_vision=True))

    assert failing(report, "COMPANION_LLM_VISION=true", "COMPANION_LLM_BASE_URL")


# --- no secret in the output, and the command itself ------------------------------------------------------


async def test_no_token_key_or_hash_is_printed_even_when_a_server_echoes_one(
    tmp_path, model, telegram, passphrase_hash
) -> None:
    model.script(ScriptedResponse(status=400, body={"error": {"message": f"the key {API_KEY} is not allowed"}}))
    settings = model_settings(
        tmp_path,
        model,
        llm_api_key=API_KEY,
        telegram_token=TELEGRAM_TOKEN,
        telegram_base_url=telegram.base_url,
        private_passphrase_hash=passphrase_hash,
    )

    text = (await doctor(settings)).render()

    assert API_KEY not in text and TELEGRAM_TOKEN not in text and passphrase_hash not in text
    assert "[withheld]" in text  # the server's echo was caught


def test_companion_doctor_exits_0_when_everything_configured_works(tmp_path) -> None:
    with ModelServer.run_in_thread(model="tiny") as model:
        env = companion_env(tmp_path, COMPANION_LLM_BASE_URL=model.base_url, COMPANION_LLM_MODEL="tiny")
        result = run_companion(["doctor"], env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("companion doctor") and "Everything configured works." in result.stdout
    assert not (tmp_path / "companion.db").exists()


def test_companion_doctor_exits_1_on_a_problem_and_prints_no_token(tmp_path) -> None:
    with FakeTelegramServer.run_in_thread(token=TELEGRAM_TOKEN) as telegram:
        env = companion_env(
            tmp_path,
            COMPANION_TELEGRAM_TOKEN="999999:WRONG-token",
            COMPANION_TELEGRAM_BASE_URL=telegram.base_url,
            COMPANION_ALLOWED_USERS="telegram:1",
            COMPANION_LOG_LEVEL="DEBUG",
        )
        result = run_companion(["doctor"], env)

    assert result.returncode == 1
    assert "FAIL  token: Telegram refused the token" in result.stdout
    assert "WRONG-token" not in result.stdout + result.stderr


def test_a_bad_setting_is_the_doctors_first_line_not_a_crash(tmp_path) -> None:
    result = run_companion(["doctor"], companion_env(tmp_path, COMPANION_LLM_TIMEOUT="soon"))

    assert result.returncode == 1
    assert "FAIL  COMPANION_LLM_TIMEOUT" in result.stdout and "Traceback" not in result.stderr
