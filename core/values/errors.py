"""The core's exception tree; adapters translate their own failures into these once, at their boundary.

CompanionError
├── ProviderError            the model side failed
│   ├── ProviderUnavailable  not reached or no answer within the timeout (also 408 after retries)
│   ├── ProviderServerError  the server failed: 500, or 502/503/504 after retries
│   ├── ProviderRateLimited  429 after retries (or a Retry-After past the call's deadline)
│   ├── ProviderRejected     4xx other than 408/429, or a 500 saying the request is invalid;
│   │   │                    `status` tells a refused API key (401/403) from the rest
│   │   ├── ProviderRequestTooLong  the request does not fit the model's context
│   │   └── ProviderToolsUnsupported  the server refuses a request that offers tools
│   ├── ProviderBadResponse  the reply was not the JSON we expect
│   └── ModelAnswerUnusable  the model answered, but only with tool syntax its server left unparsed
├── DeliveryFailed           a platform did not take an outbound message (permanent or not)
│   └── DeliveryThrottled    the platform asked to wait (`retry_after` seconds) before the next edit
├── MediaUnavailable         an inbound photo or voice note could not be fetched (or is too large)
├── TranscriptionFailed      the speech-to-text server did not give a transcript
└── StoreError               the database failed or refused
    ├── MigrationError       the schema cannot be brought to this code's version
    ├── PrivateWriteRefused  a lasting write was attempted while the conversation is private
    ├── IntervalEnded        a write names a private interval that ended since its event came in
    ├── ClaimLost            a shared database's fence: another process holds the conversation now
    └── LinkConflict         two people to link both have an account on one platform
"""

from __future__ import annotations


class CompanionError(Exception):
    """Root of every error the companion raises on purpose."""


class ProviderError(CompanionError):
    """The language-model provider could not give a completion."""


class ProviderUnavailable(ProviderError):
    """The provider could not be reached or did not answer within the timeout."""


class ProviderServerError(ProviderError):
    """The provider answered with a server failure (500, or 502/503/504 after retries)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ProviderRateLimited(ProviderError):
    """The provider kept answering 429 after the allowed retries."""


class ProviderRejected(ProviderError):
    """The provider refused the request (4xx other than 408/429, or a 500 saying it is invalid).

    `status` is the HTTP status; 401 and 403 mean the API key was refused.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ProviderRequestTooLong(ProviderRejected):
    """The request does not fit the model's context (413, or a 400/500 saying so)."""


class ProviderToolsUnsupported(ProviderRejected):
    """The server refused a request because it offered tools (a model without tool support, or
    a server started without tool parsing); the same request without tools may be answered."""


class ProviderBadResponse(ProviderError):
    """The provider answered, but not with a completion we can read."""


class ModelAnswerUnusable(ProviderError):
    """The model's final answer was only a tool call its server did not parse, also when asked
    again without tools: there is no reply to show (tool syntax never is one)."""


class DeliveryFailed(CompanionError):
    """A platform did not take an outbound message.

    `permanent`: sending again cannot help (blocked, chat not found); the outbox gives up.
    `kind`: a short name for the reason, recorded on the delivery (never message text).
    `parts_sent`: how many parts of the text went out, counted from the first part.
    """

    def __init__(self, kind: str, *, permanent: bool, parts_sent: int) -> None:
        super().__init__(f"delivery failed ({kind})")
        self.kind = kind
        self.permanent = permanent
        self.parts_sent = parts_sent


class DeliveryThrottled(DeliveryFailed):
    """The platform refused a request for now and said how long to wait (Telegram's 429 with
    `retry_after`): a streamed reply waits that long and edits more slowly from then on."""

    def __init__(self, retry_after: float) -> None:
        super().__init__("flood control", permanent=False, parts_sent=0)
        self.retry_after = retry_after


class MediaUnavailable(CompanionError):
    """An inbound media item's bytes could not be fetched; `too_large`: over the size cap."""

    def __init__(self, kind: str, *, too_large: bool = False) -> None:
        super().__init__(f"media unavailable ({kind})")
        self.kind = kind
        self.too_large = too_large


class TranscriptionFailed(CompanionError):
    """The speech-to-text server could not be reached or gave no transcript."""


class StoreError(CompanionError):
    """The store failed."""


class MigrationError(StoreError):
    """The database schema cannot be used by this version of the code."""


class PrivateWriteRefused(StoreError):
    """A write that outlives the turn (memory, goal, follow-up, delivery, binding) was
    attempted from a conversation in private mode; the store refused it."""

    def __init__(self, what: str) -> None:
        super().__init__(f"private mode writes no {what}")
        self.what = what


class IntervalEnded(StoreError):
    """A write names a private interval that has ended (closed, expired or deleted) since its event
    was admitted: the store refused it and wrote nothing. Nothing more of that interval is written
    or sent; its turn ends without an answer."""


class ClaimLost(StoreError):
    """A shared database's fence refused a write: another process took the conversation over (issue 33)."""


class LinkConflict(StoreError):
    """Two people to be linked both have an account on the same platform(s); nothing changed."""

    def __init__(self, platforms: tuple[str, ...]) -> None:
        super().__init__(f"both people have an account on {', '.join(platforms)}")
        self.platforms = platforms
