"""The edge's values: what the core's entry answers an event with, what a platform shows of a command, the
settings every platform shares, what a confirmation button carries, and the media limits of an intake."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from core.values.model import Confirmation
from core.values.retry import RetryPolicy

# --- the outcome of one inbound event (core.ports.chat.ChatCore.receive) ---------------------------


class Silence(enum.StrEnum):
    """Why the core gives an event no answer. CUT_OFF and HELD_ELSEWHERE are not acknowledged to the platform."""

    STORED_ALREADY = "stored_already"  # a redelivery (its inbox key is known), a command that ran already
    REFUSED_BEFORE = "refused_before"  # someone not allowed, refused once already in this run
    NO_ANSWER = "no_answer"  # an edit applied or dropped; a caught-up stranger; a press that is not ours
    CUT_OFF = "cut_off"  # the stop cut its lane (or lanes were closed): NOT acked, the next start answers it
    INTERVAL_ENDED = "interval_ended"  # its private interval ended while it was answered: nothing is sent
    # A shared database (issue 33): another live process holds the conversation; its turns run there, not here.
    HELD_ELSEWHERE = "held_elsewhere"


@dataclass(frozen=True, slots=True)
class Answered:
    """The core answered and the hand-off took the answer.

    Attributes:
        delivery_id: its outbox row (sent now, or later by the dispatcher); None: sent directly
            (no row: the terminal, a mode that could not be read, a refusal, the failure fallback).
        secret: the event carried a secret: its message was deleted from the chat (or the answer
            asks the person to delete it); a page must not keep what was typed.
    """

    delivery_id: int | None
    secret: bool = False


@dataclass(frozen=True, slots=True)
class Held:
    """Held for the rest of its burst: answered within `seconds` in its conversation's lane, with
    the messages after it (the typing indicator goes on meanwhile)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Silent:
    """No answer, for `reason`. `secret`: the event carried a secret (a page must not keep it)."""

    reason: Silence
    secret: bool = False


Outcome = Answered | Held | Silent


def acknowledged(outcome: Outcome) -> bool:
    """Whether an intake may tell its platform the event was handled (a Telegram offset, a Discord
    cursor): every outcome but the stop's cut, whose event the platform must offer again, and an event of a
    conversation another process holds (a shared database), which that process must be offered."""
    return not (isinstance(outcome, Silent) and outcome.reason in (Silence.CUT_OFF, Silence.HELD_ELSEWHERE))


def held_elsewhere(outcome: Outcome) -> bool:
    """Whether the event's conversation is held by another live process (a shared database): that process
    answers it, and an intake that stores events leaves it stored for that process."""
    return isinstance(outcome, Silent) and outcome.reason is Silence.HELD_ELSEWHERE


# --- what a platform shows of a command -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """A chat command as a platform shows it (a command menu, a slash command's option), from the
    registry (core.commands.registry.command_specs)."""

    name: str  # without the slash: "private"
    usage: str  # "/private PASSPHRASE [EXPIRY]"
    description: str
    secret: bool  # its arguments are a secret (a passphrase, a link code)


# --- the settings every platform shares --------------------------------------------------------------


def _no_hint(exc: Exception) -> float | None:
    return None


@dataclass(frozen=True, slots=True)
class EdgeSettings:
    """One shape and the same defaults for every platform; bot/bootstrap.py makes it from the settings
    (COMPANION_STOP_GRACE feeds `stop_grace`). What only one platform has (a long poll's timeout,
    a gateway's outage limit) stays that platform's option.

    Attributes:
        stop_grace: seconds a stop gives the turns in flight, held bursts and the outbox's flush;
            an intake's `aclose` waits its own work no longer than this.
        send_attempts: tries of one send inside one outbox attempt (then the outbox's backoff owns it).
        send_backoff: the pause after the first failed try; it doubles after each further one ...
        send_max_delay: ... up to this; a platform's "retry after" is honoured up to this too.
        typing_delay: the typing indicator shows only for an answer slower than this.
        typing_hold: a message held for the rest of its burst keeps the indicator this long at most.
    """

    stop_grace: float = 25.0
    send_attempts: int = 5
    send_backoff: float = 0.5
    send_max_delay: float = 30.0
    typing_delay: float = 0.25
    typing_hold: float = 30.0

    def retry(
        self,
        retryable: Callable[[Exception], bool],
        retry_after: Callable[[Exception], float | None] = _no_hint,
    ) -> RetryPolicy:
        """The one retry policy of a platform's sends: `retryable` says which failures may pass on a
        later try, `retry_after` reads the pause a platform asked for (a 429's)."""
        return RetryPolicy(
            attempts=self.send_attempts,
            base_delay=self.send_backoff,
            max_delay=self.send_max_delay,
            retryable=retryable,
            retry_after=retry_after,
            max_retry_after=self.send_max_delay,
        )


# --- what a confirmation button carries -------------------------------------------------------------

# A button carries its command in its data (`companion:/export confirm`), so a press is understood
# after a restart, and an old one gets the core's own answer (the confirmation expired, or was used).
PREFIX = "companion:"
# What a button may send: a command name and at most one plain word (Telegram allows 64 bytes of
# callback_data, Discord 100 characters of custom_id).
COMMAND = re.compile(r"/[a-z_]{1,32}(?: [a-z0-9_]{1,16})?")
TEMPLATE = re.escape(PREFIX) + r"(?P<command>" + COMMAND.pattern + r")"
# Confirmations kept for outbox rows not sent yet: rows never sent by this process (a restart)
# must not pile up.
REMEMBERED = 256


def button_data(confirmation: Confirmation) -> str:
    """The data a button carries for `confirmation`. Only the shape is checked here; that it is a
    known command without a secret is checked where a reply leaves the core (core/turn/entry.py)
    and where a press comes in (core.commands.registry.command_of).

    Raises:
        ValueError: the command is not a command name and at most one plain word.
    """
    if not COMMAND.fullmatch(confirmation.command):
        raise ValueError("a confirmation's command must be a command name and at most one plain word")
    return PREFIX + confirmation.command


# --- what an intake reads of media ------------------------------------------------------------------

# Telegram's Bot API serves files of at most 20 MB (getFile); Discord attachments get the same cap.
MAX_MEDIA_BYTES = 20 * 1024 * 1024
# What a vision model is sent; anything else is read as not an image.
IMAGE_MIME_TYPES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})
