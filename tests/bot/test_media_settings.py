"""Media settings: COMPANION_LLM_VISION and COMPANION_STT_* reach the core, and bad values stop start-up in one line."""

from __future__ import annotations

import pytest

from bot.bootstrap import build_transcriber, companion_config
from bot.settings import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    import os

    for key in list(os.environ):
        if key.startswith("COMPANION_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_by_default_images_are_not_sent_and_voice_is_not_set_up():
    settings = load_settings()
    assert companion_config(settings).vision is False
    assert build_transcriber(settings) is None


async def test_vision_and_speech_to_text_are_configured_from_the_environment(monkeypatch):
    monkeypatch.setenv("COMPANION_LLM_VISION", "true")
    monkeypatch.setenv("COMPANION_STT_BASE_URL", "http://127.0.0.1:8000/v1/")
    monkeypatch.setenv("COMPANION_STT_MODEL", "Systran/faster-whisper-small")
    monkeypatch.setenv("COMPANION_STT_API_KEY", " sk-stt-key \n")
    settings = load_settings()
    assert companion_config(settings).vision is True
    transcriber = build_transcriber(settings)
    assert transcriber is not None
    try:
        assert transcriber.model == "Systran/faster-whisper-small"
        assert transcriber._url == "http://127.0.0.1:8000/v1/audio/transcriptions"
        assert transcriber._api_key == "sk-stt-key"
    finally:
        await transcriber.aclose()


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("COMPANION_STT_BASE_URL", "127.0.0.1:8000", "http(s)://"),
        ("COMPANION_STT_BASE_URL", "ws://127.0.0.1:8000", "http(s)://"),
        ("COMPANION_STT_API_KEY", "sk two words", "printable ASCII"),
        ("COMPANION_LLM_VISION", "maybe", "bool"),
    ],
)
def test_a_bad_media_setting_stops_start_up_naming_the_variable(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert message.startswith(f"{name}:") and words in message and "\n" not in message
    if name.endswith("API_KEY"):
        assert value not in message
