"""Transcriber over an OpenAI-compatible `POST {base_url}/audio/transcriptions` (OpenAI, faster-whisper servers)."""

from __future__ import annotations

import logging
import time

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from adapters.llm.openai_compat import server_url, shown
from adapters.tls import shared_ssl_context
from core.values.errors import TranscriptionFailed
from core.values.retry import Attempt, RetryPolicy, retrying

log = logging.getLogger(__name__)

_RETRYABLE_STATUSES = frozenset({408, 429, 502, 503, 504})
_RETRYABLE_ERRORS = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class _Transcription(BaseModel):
    # hide_input_in_errors: a validation error must not carry the transcript into a traceback.
    model_config = ConfigDict(hide_input_in_errors=True)
    text: str


class OpenAICompatibleTranscriber:
    """core.ports.Transcriber: sends the audio as multipart (`file`, `model`, `response_format=json`)
    and returns the `text` of the answer. Connection failures, 408, 429 and 502/503/504 are retried
    within one deadline; every failure leaves as TranscriptionFailed. Neither logs nor errors hold
    the audio or the transcript (sizes and statuses only)."""

    name = "openai-compatible-stt"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "whisper-1",
        *,
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = server_url(base_url, "http://127.0.0.1:8000/v1")
        self.model = model
        self._url = str(url) + "/audio/transcriptions"
        self._where = f"the speech-to-text server at {shown(url)}"
        self._api_key = api_key
        self._timeout = timeout
        self._policy = RetryPolicy(
            attempts=max_retries + 1, base_delay=backoff, deadline=timeout, retryable=_worth_retrying
        )
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    async def aclose(self) -> None:
        """Close the HTTP client; safe to call twice."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def transcribe(self, audio: bytes, *, filename: str, mime_type: str) -> str:
        """The words in `audio`.

        Raises:
            TranscriptionFailed: not reached, a refusal, or an answer without `text`.
        """
        client = self._http()
        started = time.perf_counter()

        async def post(attempt: Attempt) -> httpx.Response:
            remaining = attempt.remaining if attempt.remaining is not None else self._timeout
            response = await client.post(
                self._url,
                files={"file": (filename, audio, mime_type)},
                data={"model": self.model, "response_format": "json"},
                timeout=remaining,
            )
            response.raise_for_status()
            return response

        try:
            response = await retrying(self._policy, post)
            text = _Transcription.model_validate_json(response.content).text
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            raise TranscriptionFailed(f"{self._where} answered {status}") from exc
        except (httpx.HTTPError, TimeoutError) as exc:
            raise TranscriptionFailed(f"could not reach {self._where} ({type(exc).__name__})") from exc
        except ValidationError as exc:
            raise TranscriptionFailed(f"{self._where} answered without a transcript") from exc
        log.info(
            "transcribed %d bytes of audio into %d chars in %.0f ms",
            len(audio),
            len(text),
            (time.perf_counter() - started) * 1e3,
        )
        return text

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise RuntimeError("OpenAICompatibleTranscriber.transcribe() called after aclose()")
        if self._client is None:
            headers = {"Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self._timeout),
                transport=self._transport,
                verify=shared_ssl_context(),  # adapters/tls.py: one CA bundle loaded per process
            )
        return self._client


def _worth_retrying(exc: Exception) -> bool:
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code in _RETRYABLE_STATUSES
    return isinstance(exc, _RETRYABLE_ERRORS)
