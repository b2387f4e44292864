"""What normal mode sees (`/context`): the next normal-mode request of each of the owner's
conversations, built by the turn's own code and shown without being sent.

The request is the one `Responder.answer` would send: `Responder.prepare` (the context of
`ContextAssembler.assemble`, the tools of `ToolRegistry.tools_for`, the CompletionRequest the
responder builds), always in normal mode, and its bytes are the provider's own
(`BaseProvider.request_body`). The next request also carries the message the person has not
typed yet: the preview takes it as `upcoming` and puts it where that message will be stored
(the newest), so the window is fitted as it will be. For a plain message in a one-to-one chat
(no quote, forward or media: the web chat's, the terminal's) the stored text is the typed one,
and the preview equals the next request byte for byte.

It is exact as of the moment it is built, in the conversation's lane (after every event queued
there before it: a turn, a summary fold, a burst's end). What can change the next request after
it, and so the page must say: anything written to the conversation first (a reminder or nudge,
the transition line of leaving private mode); a summary fold (`fold_follows`: the next turn queues one, which
changes the request after it); the token ratio (learned from every normal turn of any
conversation, never from a private one, it decides how much of the window fits); the expiry of a
private interval (its placeholder goes with it); and a provider that learns, from a normal request,
that its server refuses tools or images, or does not stream requests of its shape.
Nothing of the clock enters the request (no time line in the persona: the time is a tool).

Privacy: the preview is never computed in private mode's view, whatever mode the conversation is
in now. It passes the NORMAL state, so the assembler reads neither the private pad nor a private
summary, and the view shows each private interval, the open one too, as its one placeholder.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.ports.model import BaseProvider
from core.ports.store.modes import OpenSegmentRead
from core.ports.store.timeline import DirectConversations
from core.turn.lanes import Lanes
from core.turn.people import People
from core.turn.responder import LaneKey, Responder, prompt_bytes
from core.values.model import CompletionRequest, Conversation
from core.values.modes import NORMAL

log = logging.getLogger(__name__)

# What stands for the next message when the page has none typed yet.
UPCOMING = "(your next message)"


@dataclass(frozen=True, slots=True)
class RequestPreview:
    """One conversation's next normal-mode model request, as it would be sent now with `upcoming`
    as the person's next message.

    Attributes:
        conversation: whose request it is.
        upcoming: the stand-in for the next message, where that message will stand.
        request: the messages (persona, pad, summary, window; each private interval as its one
            placeholder line) and the tools that would be offered, as the responder builds them.
        body: the exact bytes the provider would send; None when nothing leaves the process (the
            offline responder reads the request in memory).
        prompt_bytes: the UTF-8 size of what the request asks the model to read (messages and
            tools): the measure the context budget learns its token ratio against.
        tokens_per_byte: the token ratio the window was fitted with.
        fold_follows: the next turn queues a summary fold after its answer.
        private_now: the conversation is in private mode now, so its next turn is a private one
            unless `/normal` comes first, whose transition line is stored in normal mode and
            carried by the next request too; this is still all normal mode would be given, the
            open interval as its placeholder.
        served_by: (tool, server) of each offered tool served by an MCP server, in the request's order.
        servers_down: the configured servers not reachable now (their tools are not offered), by name.
    """

    conversation: Conversation
    upcoming: str
    request: CompletionRequest
    body: bytes | None
    prompt_bytes: int
    tokens_per_byte: float
    fold_follows: bool
    private_now: bool
    served_by: tuple[tuple[str, str], ...] = ()
    servers_down: tuple[str, ...] = ()

    @property
    def body_size(self) -> int | None:
        """The request's size on the wire in bytes; None when nothing is sent."""
        return None if self.body is None else len(self.body)


class NormalPreview:
    """Builds the `/context` previews; bot/bootstrap.py builds it with the companion's parts."""

    def __init__(
        self,
        conversations: DirectConversations,
        segments: OpenSegmentRead,
        provider: BaseProvider,
        responder: Responder,
        lanes: Lanes[LaneKey],
        people: People,
    ) -> None:
        self._conversations = conversations
        self._segments = segments
        self._provider = provider
        self._responder = responder
        self._lanes = lanes
        self._people = people

    async def owner_conversations(self) -> list[Conversation]:
        """The owner's one-to-one conversations on every platform (their linked accounts'), oldest first."""
        owner = await self._people.owner()
        return await self._conversations.conversations_of(owner.person_id)

    async def of_owner(self, upcoming: str = UPCOMING) -> list[RequestPreview]:
        """`of` each of the owner's conversations, oldest first."""
        return [await self.of(conversation, upcoming) for conversation in await self.owner_conversations()]

    async def of(self, conversation: Conversation, upcoming: str = UPCOMING) -> RequestPreview:
        """The next normal-mode request of `conversation` with `upcoming` as the next message,
        built in the conversation's lane, after what is queued there."""
        key: LaneKey = (conversation.platform, conversation.chat_id)
        return await self._lanes.run(key, lambda: self._build(conversation, upcoming))

    async def _build(self, conversation: Conversation, upcoming: str) -> RequestPreview:
        segment = await self._segments.open_segment_of(conversation.id)
        # Normal mode's view whatever the conversation's mode is now: the NORMAL state, never the
        # valve's nor the open segment's (no private pad, no private summary, the interval masked).
        prepared = await self._responder.prepare(conversation, NORMAL, upcoming=upcoming)
        # Streamed where its replies are shown while written: the body then asks the server to stream.
        streamed = self._responder.streams(conversation.platform)
        body = await self._provider.request_body(prepared.request, streamed=streamed)
        log.info(
            "conversation %s: normal-mode request previewed (%d messages, %s bytes)",
            conversation.id,
            len(prepared.request.messages),
            "no" if body is None else len(body),
        )
        return RequestPreview(
            conversation=conversation,
            upcoming=upcoming,
            request=prepared.request,
            body=body,
            prompt_bytes=prompt_bytes(prepared.request),
            tokens_per_byte=prepared.context.tokens_per_byte,
            fold_follows=prepared.context.needs_fold,
            private_now=segment is not None,
            served_by=tuple((t.name, t.server) for t in prepared.offered if t.server is not None),
            servers_down=self._responder.servers_down(),
        )
