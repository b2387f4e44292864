"""`companion run` as a real process with COMPANION_LLM_VISION and COMPANION_STT_*: a photo and a voice note
through the fake Bot API reach the fake model server's image input and transcription endpoint, and
nothing of either reaches the database files or stderr (INFO logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.media import AUDIO_CANARY, IMAGE_CANARY, database_bytes, jpeg_with, leaked, ogg_with
from tests.helpers.telegram_gateway import USER, gateway_env, spawn, stop, wait_until

pytestmark = pytest.mark.wire


def test_companion_run_reads_photos_with_vision_and_transcribes_voice_notes_without_storing_either(
    telegram_servers: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    telegram, model = telegram_servers
    env = gateway_env(
        tmp_path,
        telegram,
        model,
        COMPANION_LLM_VISION="true",
        COMPANION_STT_BASE_URL=model.base_url,
        COMPANION_STT_MODEL="whisper-wire",
    )
    photo, audio = jpeg_with(), ogg_with()
    model.transcripts.append("spoken-words-6c1f")
    gateway = spawn(env)
    try:
        wait_until(telegram, gateway, lambda: bool(telegram.calls_of("getUpdates")))
        telegram.send_photo(USER, USER, photo, caption="caption-words-3e9a")
        wait_until(telegram, gateway, lambda: len(telegram.sent) >= 1)
        telegram.send_voice(USER, USER, audio)
        wait_until(telegram, gateway, lambda: len(telegram.sent) >= 2)
    finally:
        code, stderr = stop(gateway)
    assert code == 0, stderr
    assert model.images == [("image/jpeg", photo)]
    assert [(t["model"], t["data"]) for t in model.transcriptions] == [("whisper-wire", audio)]
    assert "spoken-words-6c1f" in model.raw_requests[-1].decode()
    files = database_bytes(Path(env["COMPANION_DB_PATH"]))
    assert not leaked(files, photo, IMAGE_CANARY) and not leaked(files, audio, AUDIO_CANARY)
    for secret in ("caption-words-3e9a", "spoken-words-6c1f", telegram.token.split(":")[1]):
        assert secret not in stderr
