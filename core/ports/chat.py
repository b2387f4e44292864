"""A chat platform as the core sees it: an intake, a sender and a streamer, each behind a Protocol here.

An intake turns the platform's events into `InboundMessage` values and hands each to
`ChatCore.receive`, which never raises and answers with an `Outcome` (core/values/edge.py). The
core's hand-off (core/delivery/handoff.py) then gives the answer to the outbox or to the platform's
`ChatSender`; a streamer shows a reply while the model writes it. A platform package builds the
three parts with one builder, `<app>_platform(core, edge, **options) -> Platform`, and
bot/bootstrap.py attaches them (`CoreEntry.attach`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

from core.values.edge import CommandSpec, Outcome
from core.values.model import Attachment, Confirmation, DeliveryTarget, InboundMessage, OutboundDelivery, StreamedReply


class AdapterStateStore(Protocol):
    """Key/value state for adapters (offsets, cursors); never message content. It survives a
    crash of the process; a power cut may lose the last write, which only makes the platform
    deliver again (and the inbox makes a redelivery a no-op)."""

    async def get_adapter_state(self, name: str) -> str | None: ...

    async def set_adapter_state(self, name: str, value: str, now: float) -> None: ...


class ChatCore(Protocol):
    """What an intake hands its events to (core.turn.entry.CoreEntry)."""

    # The chat commands, for the platform's command menu or slash commands.
    commands: tuple[CommandSpec, ...]
    # Where an intake keeps its offsets and cursors across restarts; None: nothing is kept.
    state: AdapterStateStore | None

    def receive(self, event: InboundMessage) -> Awaitable[Outcome]:
        """Take one inbound event; its conversation's order is the order of these calls.

        An intake calls it from the platform's callback without awaiting anything that can
        suspend in between (an unlocked lock or a set event does not suspend): that is all the
        per-chat ordering an intake needs. The work is queued before this returns; awaiting the
        result only learns the outcome (stopping the wait does not stop the work).

        Returns:
            What became of the event, never an exception: `Answered` (the hand-off took the
            answer), `Held` (answered later with the rest of its burst) or `Silent` with a reason.
            An intake acknowledges the event to its platform (an offset, a cursor) once it has the
            outcome, unless it is `Silent(CUT_OFF)` (core.values.edge.acknowledged): the stop cut
            it off, and the platform must offer it again after the restart.
        """
        ...

    async def chat_moved(self, platform: str, old_chat_id: str, new_chat_id: str) -> None:
        """The platform moved a chat to a new id (a Telegram group upgraded to a supergroup): its
        conversation, bindings and pending deliveries follow it; the new id's events join the old
        id's lane."""
        ...


class BaseIntake(Protocol):
    """The part of a platform that owns its connection and lifecycle, and hands events to a ChatCore."""

    name: str

    async def start(self) -> None:
        """Connect and begin handing inbound events to the core, in the platform's order."""
        ...

    async def stop_intake(self) -> None:
        """The first step of a stop: take no new inbound message or event; what runs goes on, and
        the connection stays open so that what the last turns wrote can still be sent."""
        ...

    async def aclose(self) -> None:
        """The last step of a stop: wait for its own work (acknowledgements) at most the stop grace,
        then close the connection its sender and streamer use; safe to call twice."""
        ...

    async def wait_lost(self) -> str:
        """Wait until the platform connection is lost for good (the library's own reconnects gave
        up, or could not have helped); return one line naming the platform and why. The gateway
        then stops the process so that a supervisor starts a fresh one."""
        ...

    def ready(self) -> str | None:
        """For GET /readyz: None while connected and taking messages; else a few words saying
        what is not (never an id, a token or anything a message said)."""
        ...


class BaseSender(Protocol):
    """The sending half of a platform, used by the outbox (core.delivery.outbox.Outbox)."""

    name: str

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        """Send `delivery.text` from part `delivery.parts_sent` on, in order. `delivery.confirm`:
        a button under its last part; `delivery.target.route`: the interaction it answers (Discord).
        Both come only with the first send of a row the hand-off handed over; a retry goes without.

        Returns:
            The number of parts of the whole text now sent.
        Raises:
            core.values.errors.DeliveryFailed: with `permanent` when sending again cannot help, and
                `parts_sent` counting the parts that did go out.
        """
        ...

    async def send_text(self, chat_id: str, text: str) -> str:
        """Send `text` to a chat now, without an outbox row (the one test post that verifies a
        binding before it is stored), split to the platform's limit.

        Returns:
            The platform's id of the first message sent.
        Raises:
            core.values.errors.DeliveryFailed: the chat cannot be posted in, or the platform failed.
        """
        ...


class ChatSender(BaseSender, Protocol):
    """The sending half of a platform as the core's hand-off and typing service use it."""

    # Seconds between two typing requests (the platform's indicator lasts a little longer); None:
    # the platform shows no typing indicator.
    typing_every: float | None

    async def send_answer(
        self,
        target: DeliveryTarget,
        text: str,
        *,
        confirm: Confirmation | None = None,
        files: Sequence[Attachment] = (),
    ) -> None:
        """Send an answer that is no outbox row (a refusal, a command's answer where the mode could
        not be read, the failure fallback, the terminal's replies), split to the platform's limit,
        `confirm` as a button under the last part; `files` with or after the last part. `text` may
        be empty: the files alone (those of an answer whose words went out as its row).

        Raises:
            core.values.errors.DeliveryFailed: the platform did not take it (the hand-off logs it;
                an answer without a row is not sent again).
        """
        ...

    async def delete(self, target: DeliveryTarget, message_id: str | None) -> bool:
        """Delete the person's message `message_id` (one that carried a secret) from the chat.
        `message_id` None: the event had no platform id (the terminal's line).

        Returns:
            True when it is gone (or was); False when the platform cannot or refused (a Discord DM):
            the hand-off then asks the person to delete it.
        """
        ...

    async def show_typing(self, target: DeliveryTarget) -> None:
        """Show the typing indicator in the chat once (one request); never raises."""
        ...


class BaseStreamer(Protocol):
    """The streaming half of a platform: shows a reply while the model writes it
    (core.delivery.streams.StreamShow calls it from the outbox's lane, never from a conversation's).
    The reply's final text is its delivery, sent by `BaseSender.send_delivery`."""

    name: str

    def pieces(self, text: str, *, final: bool = False) -> list[str]:
        """`text` as the messages it shows in, each within the platform's limit, cut only where the
        final reply is cut too (between grapheme clusters, outside code fences); while not `final`,
        what may still change (an unfinished grapheme cluster at the end) is held back."""
        ...

    async def post(self, reply: StreamedReply, text: str, index: int) -> str:
        """Send `text` as the `index`-th message of a streamed reply (plain, unformatted). The core
        ends the chat's typing indicator before the first one (core.delivery.typing).

        Returns:
            The platform's id of the message.
        Raises:
            core.values.errors.DeliveryThrottled: the platform asked to wait `retry_after` seconds.
            core.values.errors.DeliveryFailed: anything else (the stream stops; the final send copes).
        """
        ...

    async def edit(self, reply: StreamedReply, message_id: str, text: str) -> None:
        """Replace the text of a message of a streamed reply; "not modified" is success.

        Raises:
            core.values.errors.DeliveryThrottled, core.values.errors.DeliveryFailed: as `post`.
        """
        ...


@dataclass(frozen=True, slots=True)
class Platform:
    """One chat platform's three parts, as its builder made them. `streamer` None: replies on this
    platform go out whole (no message to edit while the model writes)."""

    name: str
    intake: BaseIntake
    sender: ChatSender
    streamer: BaseStreamer | None = None
