"""BaseProvider over any OpenAI-compatible Chat Completions server (Ollama, llama.cpp, vLLM, OpenAI, OpenRouter)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import re
import time
from typing import Any, NoReturn

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import (
    ProviderBadResponse,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
)
from core.model import ChatMessage, Completion, CompletionRequest, ToolCall, ToolSpec

log = logging.getLogger(__name__)

_RETRYABLE_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadTimeout,
    httpx.RemoteProtocolError,
)
_SERVER_MESSAGE_LIMIT = 200
# A server message sharing a run this long with the request is taken to quote it.
_QUOTE_WINDOW = 16


# --- the response shape ----------------------------------------------------
# hide_input_in_errors: a ValidationError chained under a ProviderError must not
# carry the model's reply (which may echo the user's words) into a traceback.


class _Wire(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)


class _Function(_Wire):
    name: str
    arguments: str | dict[str, Any] = ""


class _ToolCall(_Wire):
    id: str | None = None
    function: _Function


class _Message(_Wire):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(_Wire):
    message: _Message
    finish_reason: str | None = None


class _Usage(_Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _ChatCompletion(_Wire):
    id: str | None = None
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


# --- the provider ------------------------------------------------------------


class OpenAICompatibleProvider:
    """A language model behind `POST {base_url}/chat/completions`.

    Retries 429, 5xx and connection failures a bounded number of times, honouring
    `Retry-After`; every failure leaves as a `core.errors.ProviderError`. Neither
    logs nor error messages ever contain request or reply text.
    """

    name = "openai-compatible"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "default",
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_retry_after: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = httpx.URL(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:11434/v1, not {base_url!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries}")
        self.model = model
        self.last_request_bytes: int | None = None
        self._url = str(url) + "/chat/completions"
        # userinfo and query may hold credentials; messages show neither.
        self._where = f"the model server at {url.copy_with(username=None, password=None, query=None)}"
        self._api_key = api_key
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff = backoff
        self._max_retry_after = max_retry_after
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._closed = False
        self._sleep = asyncio.sleep

    async def aclose(self) -> None:
        """Close the HTTP client; safe to call twice."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def complete(self, request: CompletionRequest) -> Completion:
        """Return one completion for `request`.

        Raises:
            core.errors.ProviderError: any failure, translated in `_raise_translated`.
        """
        body = json.dumps(_payload(self.model, request), separators=(",", ":"), ensure_ascii=False).encode()
        self.last_request_bytes = len(body)
        response, attempts = await self._post(body, request)
        try:
            parsed = _ChatCompletion.model_validate_json(response.content)
        except ValidationError as exc:
            self._raise_translated(exc, attempts=attempts, request=request)
        choice = parsed.choices[0]
        tool_calls = tuple(
            ToolCall(
                id=call.id or f"call_{index}",
                name=call.function.name,
                arguments=_arguments_text(call.function.arguments),
            )
            for index, call in enumerate(choice.message.tool_calls or ())
        )
        usage = parsed.usage or _Usage()
        log.debug(
            "completion %s: finish_reason=%s tool_calls=%s prompt_tokens=%s completion_tokens=%s",
            parsed.id,
            choice.finish_reason,
            [call.id for call in tool_calls],
            usage.prompt_tokens,
            usage.completion_tokens,
        )
        return Completion(
            text=choice.message.content or "",
            tool_calls=tool_calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
        )

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise RuntimeError("OpenAICompatibleProvider.complete() called after aclose()")
        if self._client is None:
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            self._client = httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(self._timeout), transport=self._transport
            )
        return self._client

    async def _post(self, body: bytes, request: CompletionRequest) -> tuple[httpx.Response, int]:
        """POST `body`, retrying what is worth retrying; return the 2xx response and the attempts used."""
        client = self._http()
        attempts = self._max_retries + 1
        for attempt in range(1, attempts + 1):
            started = time.perf_counter()
            log.debug(
                "POST chat/completions (%s) attempt %d/%d: %d bytes", request.purpose, attempt, attempts, len(body)
            )
            try:
                response = await client.post(self._url, content=body)
            except _RETRYABLE_ERRORS as exc:
                elapsed = time.perf_counter() - started
                if attempt == attempts:
                    self._raise_translated(exc, attempts=attempt, request=request)
                delay = self._backoff * 2 ** (attempt - 1)
                log.warning(
                    "model server attempt %d/%d failed after %.0f ms (%s); retrying in %.2f s",
                    attempt, attempts, elapsed * 1000, type(exc).__name__, delay,
                )
            except httpx.RequestError as exc:
                self._raise_translated(exc, attempts=attempt, request=request)
            else:
                elapsed = time.perf_counter() - started
                status = response.status_code
                log.debug(
                    "model server answered %d on attempt %d/%d: %d bytes in %.0f ms",
                    status, attempt, attempts, len(response.content), elapsed * 1000,
                )
                if response.is_success:
                    return response, attempt
                if not (status == 429 or status >= 500) or attempt == attempts:
                    try:
                        response.raise_for_status()
                    except httpx.HTTPStatusError as exc:
                        self._raise_translated(exc, attempts=attempt, request=request)
                delay = self._retry_delay(response, attempt)
                log.warning(
                    "model server answered %d on attempt %d/%d; retrying in %.2f s", status, attempt, attempts, delay
                )
            await self._sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _retry_delay(self, response: httpx.Response, attempt: int) -> float:
        retry_after = _parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is None:
            return self._backoff * 2 ** (attempt - 1)
        return min(retry_after, self._max_retry_after)

    def _raise_translated(self, exc: Exception, *, attempts: int, request: CompletionRequest) -> NoReturn:
        """The one place where httpx and pydantic failures become ProviderErrors."""
        where = self._where
        tries = f"after {attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, httpx.HTTPStatusError):
            response = exc.response
            status = f"{response.status_code} {response.reason_phrase}".strip()
            if response.status_code == 429:
                raise ProviderRateLimited(f"{where} kept answering {status} (rate limited) {tries}") from exc
            if response.status_code >= 500:
                raise ProviderUnavailable(f"{where} answered {status} {tries}") from exc
            if response.status_code >= 400:
                detail = _server_message(response, request)
                raise ProviderRejected(
                    f"{where} refused the request with {status}{': ' + detail if detail else ''}",
                    status=response.status_code,
                ) from exc
            raise ProviderBadResponse(f"{where} answered {status} instead of a chat completion") from exc
        if isinstance(exc, httpx.TimeoutException):
            raise ProviderUnavailable(
                f"{where} did not answer within {self._timeout:g} s ({type(exc).__name__}) {tries}"
            ) from exc
        if isinstance(exc, httpx.TransportError):
            raise ProviderUnavailable(
                f"could not reach {where} ({type(exc).__name__}: {_one_line(str(exc)) or 'no detail'}) {tries}"
            ) from exc
        if isinstance(exc, ValidationError):
            first = exc.errors(include_url=False, include_input=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "body"
            detail = f"{first['msg']}" if first["type"] == "json_invalid" else f"{field}: {first['msg']}"
            raise ProviderBadResponse(
                f"{where} answered with something that is not a chat completion: {_one_line(detail)}"
            ) from exc
        detail = f"{type(exc).__name__}: {_one_line(str(exc))}"
        raise ProviderBadResponse(f"{where} answered with something that is not a chat completion: {detail}") from exc


# --- helpers --------------------------------------------------------------------


def _payload(model: str, request: CompletionRequest) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": model, "messages": [_message(m) for m in request.messages]}
    if request.tools:
        payload["tools"] = [_tool(t) for t in request.tools]
    if request.temperature is not None:
        payload["temperature"] = request.temperature
    if request.max_tokens is not None:
        payload["max_tokens"] = request.max_tokens
    return payload


def _message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls and message.role == "assistant":
        out["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
    return out


def _tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def _arguments_text(arguments: str | dict[str, Any]) -> str:
    # Some servers (older Ollama) send the arguments as an object, not JSON text.
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def _parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT by definition
        return None
    return max(0.0, when.timestamp() - time.time())


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _server_message(response: httpx.Response, request: CompletionRequest) -> str:
    """The server's own error message, one line and short, or "" when absent or quoting the request."""
    try:
        data = response.json()
    except ValueError:
        return ""
    message: Any = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):  # Ollama: {"error": "model 'x' not found"}
            message = error
        if message is None:  # vLLM: {"object": "error", "message": ...}
            message = data.get("message")
    if not isinstance(message, str):
        return ""
    message = _one_line(message)[:_SERVER_MESSAGE_LIMIT]
    if _quotes_request(message, request):
        return "(server message withheld: it quotes the request)"
    return message


def _quotes_request(message: str, request: CompletionRequest) -> bool:
    texts = [m.content for m in request.messages if m.content]
    texts += [call.arguments for m in request.messages for call in m.tool_calls]
    haystack = _one_line("\n".join(texts))
    if len(message) < _QUOTE_WINDOW:
        return bool(message) and message in haystack
    return any(
        message[i : i + _QUOTE_WINDOW] in haystack for i in range(len(message) - _QUOTE_WINDOW + 1)
    )
