"""A chat's history for a platform that keeps none of its own (the web chat): the conversation's
newest items as its current mode reads it, and that mode with when it ends.

It is the view the model is given, read through the same SQL: in normal mode every private
interval is one placeholder and none of its rows is read; in private mode the open interval is
readable too, other intervals stay placeholders. The mode is decided by the valve, in the
conversation's lane, as for a turn; a mode that cannot be read gives normal mode's view.
Commands and their answers are not in it (they are not chat messages of the view).
"""

from __future__ import annotations

from core.ports.store.timeline import TranscriptStore
from core.privacy.valve import ModeValve
from core.turn.lanes import Lanes
from core.turn.responder import LaneKey
from core.values.model import Conversation, ConversationKey, Mode
from core.values.modes import ModeState, PrivateState
from core.values.transcript import ChatMode as ChatMode
from core.values.transcript import Transcript as Transcript


class Transcripts:
    """Reads transcripts and modes; bot/bootstrap.py builds it from the companion's parts."""

    def __init__(self, store: TranscriptStore, valve: ModeValve, lanes: Lanes[LaneKey]) -> None:
        self._store = store
        self._valve = valve
        self._lanes = lanes

    async def read(self, key: ConversationKey, limit: int) -> Transcript:
        """The newest `limit` items of the chat `key`, in its lane (after what is queued there)."""
        conversation = await self._store.conversation_at(key)
        if conversation is None:
            return Transcript(None, Mode.NORMAL, ())
        return await self._lanes.run((key.platform, key.chat_id), lambda: self._read(conversation, limit))

    async def mode(self, key: ConversationKey) -> ChatMode:
        """The mode of the chat `key` now, decided as `read` decides it (in its lane, by the valve)."""
        conversation = await self._store.conversation_at(key)
        if conversation is None:
            return ChatMode()
        return await self._lanes.run((key.platform, key.chat_id), lambda: self._mode(conversation))

    async def at_end(self, key: ConversationKey, limit: int) -> Transcript | ChatMode:
        """When private mode should have ended by itself (its expiry, or the idle timeout): outside
        the lane, so a turn still running there (an answer the end cut off) holds nothing up, and
        writing nothing. Normal mode's transcript (every interval its placeholder) if private mode
        has ended by now; otherwise the mode it is still in (activity moved its idle end)."""
        conversation = await self._store.conversation_at(key)
        if conversation is None:
            return Transcript(None, Mode.NORMAL, ())
        segment = await self._valve.lasting(conversation)
        if segment is not None:
            return ChatMode(Mode.PRIVATE, segment.id, self._valve.ends_at(segment))
        items = await self._store.view(conversation.id, visible_segment=None, after=0, limit=limit)
        return Transcript(conversation.id, Mode.NORMAL, tuple(items))

    async def _read(self, conversation: Conversation, limit: int) -> Transcript:
        state = await self._settled(conversation)
        # The mode's own view: private rows only of the interval private mode lives in now.
        items = await self._store.view(conversation.id, visible_segment=state.segment_id, after=0, limit=limit)
        return Transcript(conversation.id, state.mode, tuple(items), self._chat_mode(state))

    async def _mode(self, conversation: Conversation) -> ChatMode:
        return self._chat_mode(await self._settled(conversation))

    async def _settled(self, conversation: Conversation) -> ModeState:
        # The valve's decision, as a turn gets it: an interval past its expiry or idle time is over.
        state = await self._valve.settle(conversation)
        return state  # unreadable: normal mode's view (no segment)

    def _chat_mode(self, state: ModeState) -> ChatMode:
        if not isinstance(state, PrivateState):
            return ChatMode()
        return ChatMode(Mode.PRIVATE, state.segment_id, self._valve.ends_at(state.segment))
