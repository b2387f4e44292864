"""The turn's half of a reply shown while the model writes it: what of the answer may be shown.

`StreamedAnswer` is the `partial` sink of one turn's model calls (core.ports.PartialSink). It opens
the reply's stream (through the outbox, which writes its delivery row once its first text is due,
so an answer done sooner writes none) at the first useful text, never before:
nothing is shown while the answer may still turn out to be a tool call its server left unparsed
(core/memory/tool_syntax.py `may_be_tool_call`), and a tool call in the middle of an answer shows
only the constant `copy.STREAM_WORKING` under the words so far, never its name or arguments. What
it shows is what the reply will say: the same lines before the answer (a restart's notice, the
mode's notice, what the person is told) and the answer itself. Partial text is never stored: the
row holds none, and nothing here logs it. It never waits while the model writes: the row and the
showing are the outbox's, in the reply's lane (core/delivery/streams.py); once closed, `row` waits
for a write of the row still in flight, so the reply takes over the row its stream wrote. When the
answer's private interval ends while it is shown, the outbox ends the stream, and the next text the
model writes stops the turn (`IntervalEnded`): nothing more of it is shown, stored or sent.
"""

from __future__ import annotations

from core.delivery.outbox import Outbox
from core.delivery.streams import ReplyStream
from core.memory.tool_syntax import may_be_tool_call
from core.values import copy
from core.values.errors import IntervalEnded
from core.values.model import DeliveryTarget, Partial

# Visible characters an answer needs before it is worth a message of its own.
USEFUL_CHARS = 8


class StreamedAnswer:
    """One turn's answer while the model writes it; `close` once the model is done (or failed)."""

    def __init__(
        self,
        outbox: Outbox,
        conversation_id: int,
        target: DeliveryTarget,
        segment_id: int | None,
        *,
        lead: str = "",
        tool_names: frozenset[str] = frozenset(),
    ) -> None:
        self._outbox = outbox
        self._conversation_id = conversation_id
        self._target = target
        self._segment_id = segment_id
        self._lead = lead
        self._tool_names = tool_names
        self._stream: ReplyStream | None = None
        self._text = ""
        self._closed = False
        self._calling = False  # a tool call began: the constant line shows until the next round's words do

    async def row(self) -> int | None:
        """After `close`: the reply's delivery row, if its stream wrote one (None: nothing was worth
        showing, or the answer was done before its first text was due)."""
        return await self._stream.row() if self._stream is not None else None

    async def offer(self, partial: Partial) -> None:
        """The answer so far (this model round's text), from the provider as it streams.

        Raises:
            IntervalEnded: the answer's interval ended (the model call stops here).
        """
        if self._stream is not None and self._stream.ended:
            reply = self._stream.reply
            what = f"delivery {reply.delivery_id}" if reply is not None else "a reply about to be shown"
            raise IntervalEnded(f"the interval of {what} ended while it was shown")
        if self._closed:
            return
        if partial.calling:
            if self._stream is not None:
                words = f"{self._text.rstrip()}\n\n" if self._text.strip() else ""
                self._stream.publish(f"{self._lead}{words}{copy.STREAM_WORKING}", settled=True)
                self._calling = True
            return
        text = partial.text.lstrip()
        if (self._stream is None or self._calling) and (
            len(text.strip()) < USEFUL_CHARS or may_be_tool_call(text, self._tool_names)
        ):
            return  # not worth showing yet (nor worth replacing the constant line with)
        self._text, self._calling = text, False
        if self._stream is None:
            self._stream = self._outbox.open_stream(self._conversation_id, self._target, self._segment_id)
        self._stream.publish(self._lead + self._text)

    def close(self) -> None:
        """Nothing more is shown: the reply's delivery (its final text) takes over from here."""
        self._closed = True
        if self._stream is not None:
            self._stream.close()


def lead_of(parts: tuple[str, ...]) -> str:
    """The lines said before the answer, as the reply's text puts them (each then a blank line)."""
    return "".join(f"{part}\n\n" for part in parts if part)
