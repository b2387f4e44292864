"""Image input and speech to text against the fake model server: the request shapes OpenAI documents,
images sized down when large, string content kept for text-only messages, and honest failures."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from adapters.llm.images import MAX_IMAGE_SIDE, fit_image
from adapters.llm.openai_compat import OpenAICompatibleProvider
from adapters.llm.transcribe import OpenAICompatibleTranscriber
from core.values.errors import TranscriptionFailed
from core.values.model import ChatMessage, CompletionRequest, ImageInput
from tests.helpers.fake_openai import FakeOpenAIServer, ScriptedResponse
from tests.helpers.media import AUDIO_CANARY, IMAGE_CANARY, jpeg_with, ogg_with, png_with


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(strict=True) as fake:
        yield fake


@pytest.fixture
async def provider(server: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleProvider]:
    provider = OpenAICompatibleProvider(server.base_url, "sk-test", "vision-model", timeout=10.0)
    yield provider
    await provider.aclose()


@pytest.fixture
async def transcriber(server: FakeOpenAIServer) -> AsyncIterator[OpenAICompatibleTranscriber]:
    transcriber = OpenAICompatibleTranscriber(server.base_url, "sk-stt", "whisper-1", timeout=10.0, backoff=0.01)
    yield transcriber
    await transcriber.aclose()


def with_images(*images: ImageInput, text: str = "look") -> CompletionRequest:
    return CompletionRequest(messages=(ChatMessage("system", "be kind"), ChatMessage("user", text, images=images)))


# --- vision --------------------------------------------------------------------------


async def test_text_only_messages_keep_string_content_for_strict_servers(server, provider) -> None:
    await provider.complete(CompletionRequest(messages=(ChatMessage("system", "s"), ChatMessage("user", "hi"))))
    assert all(isinstance(m["content"], str) for m in server.requests[-1]["messages"])


async def test_an_image_goes_as_an_image_url_part_with_a_base64_data_url(server, provider) -> None:
    image = png_with()
    await provider.complete(with_images(ImageInput("image/png", image), text="what is this?"))
    user = server.requests[-1]["messages"][-1]
    assert user["content"][0] == {"type": "text", "text": "what is this?"}
    assert user["content"][1]["type"] == "image_url"
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert server.images == [("image/png", image)]
    assert isinstance(server.requests[-1]["messages"][0]["content"], str)  # only the message with images


async def test_a_large_image_is_sized_down_before_it_is_sent(server, provider) -> None:
    from PIL import Image

    await provider.complete(with_images(ImageInput("image/jpeg", jpeg_with(size=(4000, 3000)))))
    ((mime, sent),) = server.images
    with Image.open(io.BytesIO(sent)) as image:
        assert max(image.size) <= MAX_IMAGE_SIDE and image.size == (MAX_IMAGE_SIDE, MAX_IMAGE_SIDE * 3 // 4)
    assert mime == "image/jpeg"


def test_a_small_image_passes_as_it_is_and_its_type_is_read_from_its_bytes() -> None:
    image = png_with()
    assert fit_image(ImageInput("image/jpeg", image)) == ImageInput("image/png", image)


async def test_bytes_that_are_no_image_are_left_out_and_the_text_is_still_answered(server, provider, caplog) -> None:
    caplog.set_level(logging.INFO)
    completion = await provider.complete(with_images(ImageInput("image/jpeg", b"not an image " + IMAGE_CANARY)))
    assert completion.text
    assert server.requests[-1]["messages"][-1]["content"] == "look"
    assert IMAGE_CANARY.decode() not in caplog.text


async def test_the_fake_server_refuses_an_image_url_that_is_no_base64_data_url(server) -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,AAAA"}}]}
        ],
    }
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{server.base_url}/chat/completions", json=body)
    assert response.status_code == 400 and "image" in response.json()["error"]["message"]


async def test_a_server_that_refuses_images_is_asked_again_without_them_and_never_sent_them_again(
    server, provider, caplog
) -> None:
    from core.values import copy

    server.accept_images = False
    completion = await provider.complete(with_images(ImageInput("image/png", png_with()), text="my cat"))
    assert completion.text
    first, second = server.requests
    assert isinstance(first["messages"][-1]["content"], list)
    assert second["messages"][-1]["content"] == f"my cat\n{copy.IMAGE_NOT_SENT_TO_MODEL}"
    assert "refuses image input" in caplog.text
    await provider.complete(with_images(ImageInput("image/png", png_with()), text="another"))
    assert len(server.requests) == 3 and isinstance(server.requests[-1]["messages"][-1]["content"], str)
    assert server.images == []


async def test_a_refusal_that_is_not_about_images_is_not_retried_without_them(server, provider) -> None:
    from core.values.errors import ProviderRejected

    server.reply_status(400, message="max_tokens is too large")
    server.reply_status(400, message="Invalid image: could not decode the image data")
    for _ in range(2):
        with pytest.raises(ProviderRejected):
            await provider.complete(with_images(ImageInput("image/png", png_with())))
    assert len(server.requests) == 2
    await provider.complete(with_images(ImageInput("image/png", png_with())))
    assert isinstance(server.requests[-1]["messages"][-1]["content"], list)  # images still go


# --- speech to text ----------------------------------------------------------------------


async def test_a_transcription_posts_the_file_and_model_as_multipart_and_returns_the_text(
    server, transcriber, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    audio = ogg_with()
    server.transcripts.append("hello from a voice note")
    text = await transcriber.transcribe(audio, filename="voice.ogg", mime_type="audio/ogg")
    assert text == "hello from a voice note"
    (sent,) = server.transcriptions
    assert (sent["model"], sent["filename"], sent["content_type"], sent["data"]) == (
        "whisper-1",
        "voice.ogg",
        "audio/ogg",
        audio,
    )
    assert AUDIO_CANARY.decode() not in caplog.text and "hello from a voice note" not in caplog.text


async def test_a_server_error_is_retried_and_a_refusal_becomes_transcription_failed(server, transcriber) -> None:
    server.transcripts.extend([ScriptedResponse(status=503, body={"error": {"message": "busy"}}), "second try"])
    assert await transcriber.transcribe(ogg_with(), filename="v.ogg", mime_type="audio/ogg") == "second try"
    server.transcripts.append(ScriptedResponse(status=400, body={"error": {"message": "bad audio"}}))
    with pytest.raises(TranscriptionFailed):
        await transcriber.transcribe(ogg_with(), filename="v.ogg", mime_type="audio/ogg")


async def test_an_unreachable_transcription_server_becomes_transcription_failed() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    transcriber = OpenAICompatibleTranscriber(f"http://127.0.0.1:{port}/v1", max_retries=0)
    try:
        with pytest.raises(TranscriptionFailed) as raised:
            await transcriber.transcribe(b"x", filename="v.ogg", mime_type="audio/ogg")
    finally:
        await transcriber.aclose()
    assert "speech-to-text server" in str(raised.value)


@pytest.mark.parametrize("missing", ["file", "model"])
async def test_the_fake_server_refuses_a_transcription_without_file_or_model_as_openai_does(server, missing) -> None:
    files = {} if missing == "file" else {"file": ("v.ogg", b"OggS", "audio/ogg")}
    data = {"model": "whisper-1"} if missing == "file" else {"response_format": "json"}
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{server.base_url}/audio/transcriptions", files=files or None, data=data)
    assert response.status_code == 400
    assert server.transcriptions == []


async def test_a_transcriber_without_a_model_name_is_refused_by_the_server(server) -> None:
    transcriber = OpenAICompatibleTranscriber(server.base_url, model="")
    try:
        with pytest.raises(TranscriptionFailed) as raised:
            await transcriber.transcribe(ogg_with(), filename="v.ogg", mime_type="audio/ogg")
    finally:
        await transcriber.aclose()
    assert "400" in str(raised.value)
