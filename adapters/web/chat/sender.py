"""The web chat's sender and streamer: what the core hands the owner's chat, published to the open pages."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from adapters.rendering.pieces import stream_pieces
from adapters.web.chat.hub import PARTIAL, PLATFORM, RETRACTION, PageHub, WebEvent
from core.values.model import Attachment, Confirmation, DeliveryTarget, OutboundDelivery, StreamedReply

# A page has no message limit worth cutting a streamed reply at: it streams into one bubble. The
# outbox's pieces are UTF-16 code units, as on the chat apps; a reply this long is cut as they cut it.
STREAM_LIMIT = 1_000_000


class WebSender:
    """Publishes the owner's answers to the open pages (core.ports.ChatSender): an outbox row's
    publish is its send, marked sent whether or not a page is open (a page that opens later draws
    it from the history); an answer that is no row reaches only the pages open now."""

    name = PLATFORM
    # No indicator from here: a page shows its own while it waits for the answer to what it sent.
    typing_every: float | None = None

    def __init__(self, hub: PageHub) -> None:
        self._hub = hub
        self._posts = itertools.count(1)

    async def send_delivery(self, delivery: OutboundDelivery) -> int:
        """Publish an outbox row to the open pages: that is its send (one part). A reply shown while
        written (`delivery.streamed`) is published with its bubbles: its final text replaces the
        partial one where a page shows it (published again after a crash, it replaces it again). A
        retraction (`delivery.retracts`) is published as such: only a page that shows its bubbles
        draws its constant line there. `delivery.confirm`: its button (the first send only).

        Raises:
            DeliveryFailed: permanent for a chat other than the owner's; transient before `start`
                or after `aclose` (the row waits for the next start).
        """
        self._hub.check(delivery.target.chat_id, delivery.parts_sent)
        self._hub.publish(
            WebEvent(
                RETRACTION if delivery.retracts else delivery.kind,
                delivery.text,
                delivery_id=delivery.id,
                conversation_id=delivery.conversation_id,
                message_id=delivery.message_id,
                confirm=delivery.confirm,
                stream=delivery.streamed,
            )
        )
        return 1

    async def send_text(self, chat_id: str, text: str) -> str:
        """Publish `text` now, without a row (the test post that verifies a binding to the web chat).

        Raises:
            DeliveryFailed: a chat other than the owner's, or the chat is not started.
        """
        self._hub.check(chat_id, 0)
        self._hub.publish(WebEvent("post", text))
        return f"post-{next(self._posts)}"

    async def send_answer(
        self,
        target: DeliveryTarget,
        text: str,
        *,
        confirm: Confirmation | None = None,
        files: Sequence[Attachment] = (),
    ) -> None:
        """Publish an answer that is no outbox row (a command's answer where the mode could not be
        read, the failure fallback) to the pages open now, then each file; `text` "": the files of
        an answer whose words went out as its row.

        Raises:
            DeliveryFailed: a chat other than the owner's, or the chat is not running.
        """
        self._hub.check(target.chat_id, 0)
        if text:
            self._hub.publish(WebEvent("answer", text, confirm=confirm))
        for attachment in files:  # the file follows its words
            self._hub.publish(WebEvent("file", attachment.filename, attachment=attachment))

    async def delete(self, target: DeliveryTarget, message_id: str | None) -> bool:
        """A message that carried a secret: the page drops what was typed (`Sent.hide_input`) and the
        store keeps it redacted, so nothing of it stays to be deleted."""
        return True

    async def show_typing(self, target: DeliveryTarget) -> None:
        return None


class WebStreamer:
    """Shows a reply while the model writes it (core.ports.BaseStreamer): `partial` events, the text
    so far of one bubble, to the pages open now; stored nowhere (no history, no row, no log line)."""

    name = PLATFORM

    def __init__(self, hub: PageHub) -> None:
        self._hub = hub

    def pieces(self, text: str, *, final: bool = False) -> list[str]:
        """One bubble: the web has no length limit worth cutting at. While not `final`, the last
        grapheme cluster (it may still grow) and trailing whitespace are held back."""
        return stream_pieces(text, STREAM_LIMIT, final=final)

    async def post(self, reply: StreamedReply, text: str, index: int) -> str:
        """Start the bubble of a reply being written: a partial event to the pages open now.

        Returns:
            The bubble's id (the outbox records it; the final send names it).
        Raises:
            DeliveryFailed: a chat other than the owner's, or the chat is not running.
        """
        self._hub.check(reply.target.chat_id, 0)
        bubble = f"r{reply.delivery_id}-{index}"
        self._publish_partial(reply, bubble, text)
        return bubble

    async def edit(self, reply: StreamedReply, message_id: str, text: str) -> None:
        """Replace the text of a bubble of a reply being written (a partial event).

        Raises:
            DeliveryFailed: a chat other than the owner's, or the chat is not running.
        """
        self._hub.check(reply.target.chat_id, 0)
        self._publish_partial(reply, message_id, text)

    def _publish_partial(self, reply: StreamedReply, bubble: str, text: str) -> None:
        self._hub.publish(
            WebEvent(
                PARTIAL,
                text,
                delivery_id=reply.delivery_id,
                conversation_id=reply.conversation_id,
                stream=(bubble,),
            )
        )
