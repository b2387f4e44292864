"""What a model server (and a speech-to-text server) can do, found by asking it: `companion doctor`'s probes.

Each probe sends only constant words of its own, through the same client the companion uses where
there is one (`OpenAICompatibleProvider`), and returns a `Finding`: whether it worked, a `kind` that
bot/doctor.py turns into advice, and what was seen in our own words and numbers. No probe returns
anything a model wrote: a completion's text is looked at (is it an unparsed tool call?) and dropped.
"""

from __future__ import annotations

import dataclasses
import io
import re
import time
import wave
from typing import Any

import httpx

from adapters.llm.openai_compat import OpenAICompatibleProvider, server_url, shown
from adapters.probes import Finding
from adapters.tls import shared_ssl_context
from core.memory.tool_syntax import only_tool_call
from core.values.errors import (
    ProviderError,
    ProviderRejected,
    ProviderToolsUnsupported,
    ProviderUnavailable,
    TranscriptionFailed,
)
from core.values.model import ChatMessage, CompletionRequest, ImageInput, Partial, ToolCall, ToolSpec

PROBE_TOOL = ToolSpec(
    name="doctor_probe",
    description="The health check's probe: returns a fixed word. Call it whenever you are asked to run the probe.",
    parameters={
        "type": "object",
        "properties": {"word": {"type": "string", "description": "any one word"}},
        "required": ["word"],
    },
)
_SYSTEM = ChatMessage("system", "You are being checked by a health check. Follow its instruction.")
_MODEL_ID = re.compile(r"^[\x21-\x7e]{1,80}$")  # a model id as the doctor may show it


@dataclasses.dataclass(frozen=True, slots=True)
class ModelList:
    """GET /models: the ids the server lists (shown only when they look like ids) and, per id, a
    context length where the server says it (vLLM's `max_model_len`)."""

    finding: Finding
    ids: tuple[str, ...] = ()
    max_len: dict[str, int] = dataclasses.field(default_factory=dict)


class ModelServerProbe:
    """Probes one OpenAI-compatible server. `async with` closes its clients."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        *,
        timeout: float = 30.0,
        max_tokens: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base = server_url(base_url, "http://127.0.0.1:11434/v1")
        # llama.cpp's /props and Ollama's /api/show sit beside /v1, not under it.
        self.root = self.base.copy_with(path=self.base.path.removesuffix("/v1") or "/")
        self.where = shown(self.base)
        self.model = model
        self._timeout = timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout), transport=transport, verify=shared_ssl_context()
        )
        # No retries: the doctor says what it found at once; the same client as every turn otherwise.
        self.provider = OpenAICompatibleProvider(
            base_url, api_key, model, timeout=timeout, max_tokens=max_tokens, max_retries=0, transport=transport
        )

    async def __aenter__(self) -> ModelServerProbe:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.provider.aclose()
        await self._http.aclose()

    # --- the probes ----------------------------------------------------------------------------

    async def models(self) -> ModelList:
        """GET /models: reachable at all, and which models it serves."""
        try:
            response = await self._http.get(str(self.base) + "/models")
        except httpx.HTTPError as exc:
            return ModelList(Finding(False, "unreachable", f"could not reach {self.where} ({type(exc).__name__})"))
        if response.status_code in (401, 403):
            return ModelList(Finding(False, "key-refused", f"{self.where} answered {response.status_code}"))
        if response.status_code != 200:
            return ModelList(Finding(False, "no-models", f"GET /models answered {response.status_code}"))
        try:
            data = response.json().get("data")
        except (ValueError, AttributeError):
            data = None
        if not isinstance(data, list):
            return ModelList(Finding(False, "no-models", "GET /models answered without a list of models"))
        ids: list[str] = []
        max_len: dict[str, int] = {}
        for item in data:
            model_id = item.get("id") if isinstance(item, dict) else None
            if isinstance(model_id, str) and _MODEL_ID.match(model_id):
                ids.append(model_id)
                if isinstance(item.get("max_model_len"), int):
                    max_len[model_id] = item["max_model_len"]
        return ModelList(
            Finding(True, "ok", f"{len(ids)} model{'s' if len(ids) != 1 else ''} listed"), tuple(ids), max_len
        )

    async def chat(self) -> Finding:
        """One plain chat completion."""
        request = CompletionRequest(
            (_SYSTEM, ChatMessage("user", "Reply with the single word OK.")), purpose="probe", max_tokens=8
        )
        started = time.perf_counter()
        try:
            await self.provider.complete(request)
        except ProviderError as exc:
            return _failure(exc)
        return Finding(True, "ok", "answered", seconds=time.perf_counter() - started)

    async def tool_round_trip(self) -> Finding:
        """The probe tool, with tool_choice forced to it; its result sent back; one more answer."""
        messages = (_SYSTEM, ChatMessage("user", "Run the probe: call doctor_probe with the word ping."))
        request = CompletionRequest(
            messages, tools=(PROBE_TOOL,), purpose="probe", max_tokens=64, force_tool=PROBE_TOOL.name
        )
        started = time.perf_counter()
        try:
            completion = await self.provider.complete(request)
        except ProviderToolsUnsupported:
            return Finding(False, "tools-refused", "the server refused a request that offers tools")
        except ProviderRejected as exc:
            if exc.status in (401, 403):
                return _failure(exc)
            # Some servers take tool_choice "auto" but not a named one: let the model choose.
            try:
                completion = await self.provider.complete(dataclasses.replace(request, force_tool=None))
            except ProviderError as again:
                return _failure(again)
        except ProviderError as exc:
            return _failure(exc)
        calls = [call for call in completion.tool_calls if call.name == PROBE_TOOL.name]
        if not calls:
            if only_tool_call(completion.text.strip(), {PROBE_TOOL.name}):
                return Finding(
                    False, "tool-unparsed", "the model called the tool, but the server sent the call as text"
                )
            return Finding(False, "tool-ignored", "the model answered in words although the tool call was required")
        call = calls[0]
        answer = CompletionRequest(
            (
                *messages,
                ChatMessage("assistant", completion.text or None, (ToolCall(call.id, call.name, call.arguments),)),
                ChatMessage("tool", "pong", tool_call_id=call.id),
                ChatMessage("user", "The probe answered. Reply with the single word done."),
            ),
            purpose="probe",
            max_tokens=16,
        )
        try:
            await self.provider.complete(answer)
        except ProviderError as exc:
            failure = _failure(exc)
            return dataclasses.replace(
                failure, kind="tool-result-refused", seen=f"the tool's result was refused: {failure.seen}"
            )
        return Finding(
            True, "ok", "called the probe tool and answered its result", seconds=time.perf_counter() - started
        )

    async def words_with_tools(self) -> Finding:
        """A question for words while a tool is offered (tool_choice "auto"), as in every turn, with a
        call's result sent back as the companion would, for three answers at most. Some server and
        model pairs never answer in words then (llama-cpp-python's chatml-function-calling ends every
        "message:" with a function name or nothing), so each turn must be asked again without tools."""
        messages = [_SYSTEM, ChatMessage("user", "Say hello in one short sentence.")]
        for _ in range(3):
            request = CompletionRequest(tuple(messages), tools=(PROBE_TOOL,), purpose="probe", max_tokens=32)
            try:
                completion = await self.provider.complete(request)
            except ProviderError as exc:
                return _failure(exc)
            if completion.tool_calls:
                call = completion.tool_calls[0]
                messages += [
                    ChatMessage("assistant", completion.text or None, (call,)),
                    ChatMessage("tool", "pong", tool_call_id=call.id),
                ]
                continue
            text = completion.text.strip()
            if not text or only_tool_call(text, {PROBE_TOOL.name}):
                return Finding(False, "no-words", "with a tool offered, the answer was tool syntax or empty, not words")
            called = len(messages) > 2
            return Finding(True, "ok", "answered in words" + (" after calling the tool unasked" if called else ""))
        return Finding(
            False, "no-words", "with a tool offered, the model kept calling it instead of answering in words"
        )

    async def image_input(self) -> Finding:
        """One request with a small image (COMPANION_LLM_VISION)."""
        image = ImageInput("image/png", _red_square_png())
        request = CompletionRequest(
            (_SYSTEM, ChatMessage("user", "What colour is this image? One word.", images=(image,))),
            purpose="probe",
            max_tokens=8,
        )
        try:
            await self.provider.complete(request)
        except ProviderError as exc:
            return _failure(exc)
        if not self.provider.images_accepted:
            return Finding(False, "images-refused", "the server refused image input")
        return Finding(True, "ok", "took an image")

    async def context_window(self, models: ModelList) -> Finding:
        """The context window the server runs with, where it says so: llama.cpp's /props, Ollama's
        /api/show, vLLM's max_model_len; kind "not-reported" elsewhere (llama-cpp-python, OpenAI)."""
        props = await self._json("GET", "/props")
        if isinstance(props, dict):
            settings = props.get("default_generation_settings")
            n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
            if isinstance(n_ctx, int) and n_ctx > 0:
                return Finding(True, "ok", "llama.cpp /props", value=n_ctx)
        if self.model in models.max_len:
            return Finding(True, "ok", "vLLM /models max_model_len", value=models.max_len[self.model])
        show = await self._json("POST", "/api/show", {"model": self.model})
        if isinstance(show, dict):
            num_ctx = _num_ctx(show.get("parameters"))
            if num_ctx:
                return Finding(True, "ok", "Ollama /api/show num_ctx", value=num_ctx)
            info = show.get("model_info")
            lengths = [v for k, v in info.items() if k.endswith(".context_length")] if isinstance(info, dict) else []
            if lengths and isinstance(lengths[0], int):
                return Finding(True, "ollama-model-max", "Ollama /api/show (the model's maximum)", value=lengths[0])
        return Finding(False, "not-reported", "the server does not report its context window")

    async def streaming(self, *, tools: bool) -> Finding:
        """One streamed request, sent and read as a turn's is (`stream: true`, the usage asked for,
        the events assembled into an answer; with `tools`, a tool offered with tool_choice "auto", as
        every turn offers its tools); its words are dropped as they come. When the server does not
        stream it with a tool offered, once more without: kind "no-stream-with-tools" when that one
        streams (llama-cpp-python's chatml-function-calling streams only without tools)."""
        request = CompletionRequest(
            (_SYSTEM, ChatMessage("user", "Reply with the single word OK.")),
            tools=(PROBE_TOOL,) if tools else (),
            purpose="probe",
            max_tokens=8,
        )

        async def dropped(partial: Partial) -> None:
            return None

        offering = " offering a tool" if tools else ""
        try:
            await self.provider.complete(request, partial=dropped)
        except ProviderError as exc:
            # The plain chat worked: each streamed turn would fail as this one did.
            return Finding(False, "stream-failed", f"a streamed request{offering} failed: {exc}")
        why = self.provider.not_streaming_because(tools=tools)
        if why is None:
            return Finding(
                True, "ok", "streams" + (", with a tool offered as every turn offers its tools" if tools else "")
            )
        if not tools:
            return Finding(False, "no-stream", f"the server does not stream ({why}); replies go out whole")
        without = await self.streaming(tools=False)
        if without.ok:
            return Finding(
                False, "no-stream-with-tools", f"the server streams only without tools (with a tool offered, {why})"
            )
        if without.kind == "no-stream":
            return Finding(False, "no-stream", f"the server does not stream, with a tool offered ({why}) or without")
        return without

    async def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = await self._http.request(method, str(self.root).rstrip("/") + path, json=body)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None


async def transcription(
    base_url: str,
    api_key: str | None,
    model: str,
    *,
    seconds: float = 30.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Finding:
    """Half a second of silence sent to the speech-to-text server (COMPANION_STT_BASE_URL)."""
    from adapters.llm.transcribe import OpenAICompatibleTranscriber

    transcriber = OpenAICompatibleTranscriber(
        base_url, api_key, model, timeout=seconds, max_retries=0, transport=transport
    )
    try:
        await transcriber.transcribe(_silent_wav(), filename="doctor.wav", mime_type="audio/wav")
    except TranscriptionFailed as exc:
        return Finding(False, "stt-failed", str(exc))
    finally:
        await transcriber.aclose()
    return Finding(True, "ok", "transcribed a probe")


def _failure(exc: ProviderError) -> Finding:
    """A provider error as a finding; its message is ours (the URL without credentials, a status, the
    server's own short message unless it quotes the request, which here holds constant words only)."""
    if isinstance(exc, ProviderRejected) and exc.status in (401, 403):
        kind = "key-refused"
    elif isinstance(exc, ProviderRejected) and exc.status == 404:
        kind = "model-missing"
    elif isinstance(exc, ProviderUnavailable):
        kind = "unreachable"
    else:
        kind = "error"
    return Finding(False, kind, str(exc))


def _num_ctx(parameters: object) -> int | None:
    if not isinstance(parameters, str):
        return None
    match = re.search(r"(?m)^\s*num_ctx\s+(\d+)", parameters)
    return int(match.group(1)) if match else None


def _red_square_png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (220, 20, 20)).save(buffer, format="PNG")
    return buffer.getvalue()


def _silent_wav() -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"\x00\x00" * 8000)
    return buffer.getvalue()
