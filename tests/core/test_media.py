"""Media in the core (core.turn.media, Companion._chat): what is stored is the marker, caption and transcript in
the message's own mode and segment; bytes are fetched only when read, and go to the model for one request."""

from __future__ import annotations

import pytest

from core.turn.media import MAX_MEDIA_BYTES, MediaReader, with_images
from core.values import copy
from core.values.errors import MediaUnavailable, TranscriptionFailed
from core.values.model import ChatMessage, ImageInput, InboundMessage, Media
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, say
from tests.helpers.fakes import request_text
from tests.helpers.media import AUDIO_CANARY, IMAGE_CANARY, jpeg_with, ogg_with


class FakeTranscriber:
    """Speech to text at the port: returns the scripted transcripts (or raises), records the audio."""

    name = "fake-stt"

    def __init__(self, *transcripts: str | Exception) -> None:
        self.transcripts = list(transcripts)
        self.audio: list[bytes] = []

    async def transcribe(self, audio: bytes, *, filename: str, mime_type: str) -> str:
        self.audio.append(audio)
        item = self.transcripts.pop(0) if self.transcripts else "a transcript"
        if isinstance(item, Exception):
            raise item
        return item

    async def aclose(self) -> None:
        return None


class Loader:
    """A media item's loader that counts its calls."""

    def __init__(self, data: bytes | Exception) -> None:
        self.data = data
        self.calls = 0

    async def __call__(self) -> bytes:
        self.calls += 1
        if isinstance(self.data, Exception):
            raise self.data
        return self.data


def media_message(text: str, *media: Media) -> InboundMessage:
    return InboundMessage("terminal", "terminal", "owner", text, is_direct=True, media=media)


def photo(loader: Loader, size: int | None = None) -> Media:
    return Media("photo", "image/jpeg", size, None, loader)


def voice(loader: Loader) -> Media:
    return Media("voice", "audio/ogg", None, "voice.ogg", loader)


@pytest.fixture
async def with_media(make_companion, stores):
    """A companion with vision and the given transcriber."""

    async def make(transcriber: FakeTranscriber | None = None, *, vision: bool = True):
        companion = await make_companion(vision=vision)
        companion.media = MediaReader(vision=vision, transcriber=transcriber)
        return companion

    return make


async def stored_user_texts(stores) -> list[str]:
    return [row[0] for row in await all_rows(stores, "SELECT text FROM messages WHERE role = 'user' ORDER BY id")]


async def test_an_image_goes_with_its_one_request_and_only_the_marked_caption_is_stored(with_media, provider, stores):
    companion = await with_media()
    image = jpeg_with()
    await companion.handle(media_message("my cat", photo(Loader(image))))
    request = provider.last_reply_request()
    assert request.messages[-1].content == "[photo] my cat"
    assert request.messages[-1].images == (ImageInput("image/jpeg", image),)
    await say(companion, "and now?")
    later = provider.last_reply_request()
    assert all(not m.images for m in later.messages)  # the image went with its own request only
    assert [m.content for m in later.messages if m.role == "user"] == ["[photo] my cat", "and now?"]
    assert await stored_user_texts(stores) == ["[photo] my cat", "and now?"]
    assert IMAGE_CANARY not in engines.stored_bytes(stores)


async def test_bytes_are_fetched_only_when_this_configuration_reads_them(with_media, provider):
    companion = await with_media(vision=False)
    image, audio = Loader(jpeg_with()), Loader(ogg_with())
    reply = await companion.handle(media_message("hi", photo(image), voice(audio)))
    assert (image.calls, audio.calls) == (0, 0)
    assert reply is not None and reply.text.startswith(f"{copy.IMAGES_NOT_READ}\n\n{copy.VOICE_NOT_SET_UP}")
    assert provider.last_reply_request().messages[-1].content == "[photo] [voice] hi"


async def test_a_file_declared_over_the_cap_is_never_fetched(with_media, provider):
    companion = await with_media()
    loader = Loader(jpeg_with())
    reply = await companion.handle(media_message("", photo(loader, size=MAX_MEDIA_BYTES + 1)))
    assert loader.calls == 0
    assert reply is not None and reply.text == copy.MEDIA_TOO_LARGE
    assert provider.requests == []


async def test_a_file_over_the_cap_once_fetched_is_dropped(with_media, provider):
    companion = await with_media()
    reply = await companion.handle(media_message("", photo(Loader(b"\xff" * (MAX_MEDIA_BYTES + 1)))))
    assert reply is not None and reply.text == copy.MEDIA_TOO_LARGE
    assert provider.requests == []


async def test_a_fetch_that_fails_says_so_and_the_caption_is_still_answered(with_media, provider):
    companion = await with_media()
    reply = await companion.handle(media_message("look!", photo(Loader(MediaUnavailable("photo")))))
    assert reply is not None and reply.text.startswith(copy.MEDIA_FETCH_FAILED + "\n\n")
    assert provider.last_reply_request().messages[-1].images == ()


async def test_a_voice_transcript_is_the_message_and_the_audio_goes_only_to_the_transcriber(
    with_media, provider, stores
):
    transcriber = FakeTranscriber("call the plumber tomorrow")
    companion = await with_media(transcriber)
    audio = ogg_with()
    await companion.handle(media_message("", voice(Loader(audio))))
    assert transcriber.audio == [audio]
    assert provider.last_reply_request().messages[-1].content == "[voice] call the plumber tomorrow"
    assert AUDIO_CANARY not in engines.stored_bytes(stores)


async def test_a_failed_or_empty_transcription_is_answered_with_a_constant_line(with_media, provider):
    companion = await with_media(FakeTranscriber(TranscriptionFailed("down"), "   "))
    first = await companion.handle(media_message("", voice(Loader(ogg_with()))))
    second = await companion.handle(media_message("", voice(Loader(ogg_with()))))
    assert (first.text, second.text) == (copy.VOICE_FAILED, copy.VOICE_NO_WORDS)
    assert provider.requests == []


@pytest.mark.engines
async def test_a_private_transcript_is_stored_in_its_segment_and_masked_in_normal_mode(with_media, provider, stores):
    secret = "PRIVATE-TRANSCRIPT-8e1"
    companion = await with_media(FakeTranscriber(secret))
    await say(companion, "before")
    await say(companion, f"/private {PASSPHRASE}")
    await companion.handle(media_message("", voice(Loader(ogg_with()))))
    assert secret in request_text(provider.last_reply_request())
    rows = await engines.rows_saying(
        stores, "SELECT mode, segment_id FROM messages WHERE {saying}", "[voice]%", like=True
    )
    assert len(rows) == 1 and rows[0][0] == "private" and rows[0][1] is not None
    await say(companion, "/normal")
    await say(companion, "after")
    normal = provider.last_reply_request()
    assert secret not in request_text(normal)
    assert copy.PLACEHOLDER in request_text(normal)


async def test_a_sticker_alone_gets_a_constant_reply_stored_as_the_answer(with_media, provider, stores):
    companion = await with_media()
    reply = await companion.handle(media_message("", Media("sticker")))
    assert reply is not None and reply.text == copy.MEDIA_NOT_READ["sticker"]
    assert provider.requests == []
    rows = await all_rows(stores, "SELECT role, text FROM messages ORDER BY id")
    assert rows == [("user", "[sticker]"), ("assistant", copy.MEDIA_NOT_READ["sticker"])]


def test_images_go_on_the_newest_user_message_only():
    image = ImageInput("image/png", b"png")
    messages = [
        ChatMessage("system", "s"),
        ChatMessage("user", "old"),
        ChatMessage("assistant", "a"),
        ChatMessage("user", "new"),
    ]
    out = with_images(messages, (image,))
    assert [m.images for m in out] == [(), (), (), (image,)]
    assert with_images(messages, ()) == messages


def test_image_bytes_never_show_in_a_repr():
    message = ChatMessage("user", "x", images=(ImageInput("image/png", IMAGE_CANARY),))
    assert IMAGE_CANARY.decode() not in repr(message)
    assert "load" not in repr(Media("photo", load=Loader(b"")))


async def test_a_voice_note_kept_unread_after_a_restart_is_neither_fetched_nor_transcribed(
    make_companion, stores, provider, clock
):
    transcriber = FakeTranscriber("never heard")
    companion = await make_companion(vision=True)
    await say(companion, f"/private {PASSPHRASE} 1h")
    sent_before_crash = clock.now()
    clock.advance(120)
    restarted = await make_companion(vision=True)
    restarted.media = MediaReader(vision=True, transcriber=transcriber)
    audio = Loader(ogg_with())
    message = InboundMessage(
        "terminal", "terminal", "owner", "", is_direct=True, sent_at=sent_before_crash + 1, media=(voice(audio),)
    )
    requests = len(provider.requests)
    reply = await restarted.handle(message)
    assert reply is not None and reply.text == copy.RESTART_KEPT_PRIVATE
    assert (audio.calls, transcriber.audio, len(provider.requests)) == (0, [], requests)
    rows = await all_rows(stores, "SELECT text, mode FROM messages WHERE role = 'user' ORDER BY id")
    assert rows[-1] == ("[voice]", "private")


async def test_a_strangers_media_is_never_fetched(make_companion, provider):
    companion = await make_companion(vision=True)
    companion.media = MediaReader(vision=True, transcriber=FakeTranscriber())
    loader = Loader(jpeg_with())
    stranger = InboundMessage("telegram", "5", "5", "hi", is_direct=True, media=(photo(loader),))
    reply = await companion.handle(stranger)
    assert reply is not None and reply.text == copy.NOT_ALLOWED
    assert loader.calls == 0 and provider.requests == []


async def test_without_vision_a_conversation_is_told_once_that_captioned_images_are_not_read(with_media, provider):
    companion = await with_media(vision=False)
    first = await companion.handle(media_message("my cat", photo(Loader(jpeg_with()))))
    second = await companion.handle(media_message("my cat again", photo(Loader(jpeg_with()))))
    assert first is not None and first.text.startswith(copy.IMAGES_NOT_READ)
    assert second is not None and copy.IMAGES_NOT_READ not in second.text
    assert provider.last_reply_request().messages[-1].content == "[photo] my cat again"  # the caption is answered
    alone = await companion.handle(media_message("", photo(Loader(jpeg_with()))))
    assert alone is not None and alone.text == copy.IMAGE_NOT_READ_ALONE  # its whole answer, each time


async def test_a_private_turn_told_that_images_are_not_read_leaves_normal_mode_to_be_told_too(with_media, provider):
    # Private turns teach normal mode nothing: not even that this conversation heard the note already.
    companion = await with_media(vision=False)
    await say(companion, f"/private {PASSPHRASE}")
    private = await companion.handle(media_message("my cat", photo(Loader(jpeg_with()))))
    private_again = await companion.handle(media_message("my cat again", photo(Loader(jpeg_with()))))
    await say(companion, "/normal")
    normal = await companion.handle(media_message("my dog", photo(Loader(jpeg_with()))))
    normal_again = await companion.handle(media_message("my dog again", photo(Loader(jpeg_with()))))
    assert private is not None and copy.IMAGES_NOT_READ in private.text
    assert private_again is not None and copy.IMAGES_NOT_READ not in private_again.text  # once per mode
    assert normal is not None and normal.text.startswith(copy.IMAGES_NOT_READ)
    assert normal_again is not None and copy.IMAGES_NOT_READ not in normal_again.text


async def test_an_edited_caption_of_a_voice_note_keeps_its_transcript(with_media, provider, stores):
    companion = await with_media(FakeTranscriber("call the plumber"))
    message = InboundMessage(
        "terminal", "terminal", "owner", "", is_direct=True, message_id="7", media=(voice(Loader(ogg_with())),)
    )
    await companion.handle(message)
    edited = InboundMessage(
        "terminal", "terminal", "owner", "a caption", is_direct=True, message_id="7", media=message.media, edited=True
    )
    assert await companion.handle(edited) is None
    assert await stored_user_texts(stores) == ["[voice] call the plumber"]
