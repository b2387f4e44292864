"""The responder: runs the model on a conversation's view (with its tools) and writes the outcome.

`answer` assembles the context of the mode, calls the model (tools chosen for the mode before the
call), and `finish` writes the reply, its run, the answered turns, its delivery row and the mirror
rows in one transaction. It never sends: the reply's delivery is handed to the outbox by whoever
waits for it (the adapter) or by the lane that answered without a waiter; mirror rows are handed to
the outbox here. Both leave through the outbox's own per-target lanes.

Where the platform shows replies while they are written, the answer streams (core/turn/streaming.py):
its delivery row is written at the first useful text, shown by the outbox's lane while the model
goes on, and `finish` gives that same row the final text, so its send is the final edit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from core.delivery.mirrors import source_label
from core.delivery.outbox import Outbox
from core.memory.context import AssembledContext, ContextAssembler, ReadAhead, utf8_size
from core.memory.tool_syntax import only_tool_call
from core.memory.tools import CallOutcome, Tool, ToolContext, ToolRegistry, ToolStores, ToolSupport, run_call
from core.ports.clock import Clock
from core.ports.metrics import NO_METRICS, Metrics
from core.ports.model import BaseProvider, PartialSink
from core.ports.store.memory import RunLog
from core.ports.store.proactive import PrefsReader
from core.ports.store.timeline import ReplyStore
from core.privacy.valve import ModeValve
from core.proactive.manners import timezone_of
from core.turn.analytics import RunRecorder
from core.turn.lanes import Lanes
from core.turn.media import ReadMedia, with_images
from core.turn.streaming import StreamedAnswer, lead_of
from core.values import copy
from core.values.errors import (
    ModelAnswerUnusable,
    ProviderError,
    ProviderRejected,
    ProviderRequestTooLong,
    ProviderToolsUnsupported,
    ProviderUnavailable,
)
from core.values.model import (
    ChatMessage,
    Completion,
    CompletionRequest,
    ContextReads,
    Conversation,
    DeliveryTarget,
    ImageInput,
    MirrorOf,
    Reply,
    RunRecord,
    ToolCall,
    ToolSpec,
    Turn,
)
from core.values.modes import ModeState, with_notice

log = logging.getLogger(__name__)

LaneKey = tuple[str, str]
TERMINAL_PLATFORMS = frozenset({"terminal"})  # prints its replies: nothing to deliver later


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A turn's first model request and what it was built from: the mode's context, and the tools
    chosen for the mode before the call."""

    context: AssembledContext
    offered: tuple[Tool, ...]
    request: CompletionRequest


class Responder:
    """Answers turns. `platforms`: the platforms configured in this process (None: any); their replies
    go out through the outbox, except the terminal's, which it prints."""

    def __init__(
        self,
        replies: ReplyStore,
        runs: RunLog,
        prefs: PrefsReader,
        tool_stores: ToolStores,
        provider: BaseProvider,
        clock: Clock,
        valve: ModeValve,
        context: ContextAssembler,
        tools: ToolRegistry,
        lanes: Lanes[LaneKey],
        *,
        outbox: Outbox | None = None,
        platforms: frozenset[str] | None = None,
        timezone: str = "UTC",
        max_tool_rounds: int = 4,
        metrics: Metrics = NO_METRICS,
        tool_support: ToolSupport | None = None,
    ) -> None:
        self._metrics = metrics
        self._replies = replies
        self._runs = runs
        self._prefs = prefs
        self._tool_stores = tool_stores
        self._provider = provider
        self._clock = clock
        self._valve = valve
        self._context = context
        self._tools = tools
        self._lanes = lanes
        self._outbox = outbox
        self._platforms = platforms
        self._timezone = timezone
        self._max_tool_rounds = max_tool_rounds
        self._tool_support = tool_support or ToolSupport()

    def delivers(self, platform: str) -> bool:
        """Whether a reply on `platform` is an outbox row. It depends on the platforms configured in
        this process, never on whether a sender is registered at this instant: a reply written while
        its adapter stops or starts waits as a pending row and goes out when it can."""
        if self._outbox is None or platform in TERMINAL_PLATFORMS:
            return False
        return self._platforms is None or platform in self._platforms

    def servers_down(self) -> tuple[str, ...]:
        """The configured MCP servers not reachable now, by name (their tools are offered to no turn)."""
        servers = self._tools.servers
        return tuple(s.name for s in servers.states() if not s.up) if servers is not None else ()

    def streams(self, platform: str) -> bool:
        """Whether a reply on `platform` is shown while the model writes it (the outbox's lane shows
        it): a platform that delivers through the outbox, with streaming on and its streamer there."""
        return self.delivers(platform) and self._outbox is not None and self._outbox.streams(platform)

    async def answer(
        self,
        turn: Turn,
        state: ModeState,
        message_id: int,
        media: ReadMedia | None = None,
        *,
        note: str | None = None,
        told: tuple[str, ...] = (),
        resume: int | None = None,
        ahead: ReadAhead | None = None,
    ) -> Reply:
        """Run the model on the view that ends with the stored user message and write the reply
        (message, run, answered turn and delivery) in one transaction. `media`: its images go
        with this request only, its notes before the answer. `note`: a constant system line after
        the view (an edit's correction). `told`: constant lines said before the answer, like the
        media notes never stored (so never mirrored either). `resume`: the streaming row a stopped
        process left for this turn: the reply becomes it (its send edits the messages shown then)
        and is not shown while written again. `ahead`: the context read beside the storing of the message
        (`ContextAssembler.read_ahead`), used by the first request."""
        conversation = turn.conversation
        segment_id = state.segment_id
        # A private run has no analytics context at all: nothing below can write an event for it,
        # nor count it in the operator's metrics (they are reached through the recorder only).
        recorder = None if state.is_private else RunRecorder(self._clock, conversation.id, self._metrics)
        images = media.images if media else ()
        streamed = None
        if resume is None and self.streams(turn.message.platform) and self._outbox is not None:
            restarted = copy.RESTART_ENDED_PRIVATE if turn.restart_notice else ""
            notes = media.notes if media else ()
            streamed = StreamedAnswer(
                self._outbox,
                conversation.id,
                self._target(turn),
                segment_id,
                lead=lead_of((restarted, state.notice or "", *told, *notes)),
                tool_names=frozenset(self._tools.names),
            )
        prepared = await self.prepare(conversation, state, images=images, note=note, ahead=ahead)
        try:
            try:
                text = await self._complete_with_tools(conversation, state, prepared, recorder, streamed)
            except ProviderRequestTooLong:
                # The server counts more than the estimate: once more, with half the window.
                log.info(
                    "conversation %s: request too long for the model; retrying with half the window", conversation.id
                )
                prepared = await self.prepare(conversation, state, shrink=2, images=images, note=note)
                text = await self._complete_with_tools(conversation, state, prepared, recorder, streamed)
        except ProviderError as exc:
            log.warning("conversation %s: provider failed (%s)", conversation.id, type(exc).__name__)
            if recorder:
                recorder.event("error", type(exc).__name__, "error")
                await self._save_run(recorder.finish("error"))
            # Say what went wrong in words the person can act on; the message is kept in every case.
            return await self.finish(
                turn,
                with_notice(state, _failure_words(exc)),
                segment_id=segment_id,
                answers=message_id,
                stream=await _closed(streamed) or resume,
            )
        except (Exception, asyncio.CancelledError):
            # Cut off (a stop) or failed: its row stays 'streaming'; the next start answers the turn
            # into the messages shown, or marks them cut off.
            if streamed is not None:
                streamed.close()
            raise
        shown = media.noted(text) if media else text
        reply = await self.finish(
            turn,
            with_notice(state, "\n\n".join((*told, shown))),
            stored_text=text,
            segment_id=segment_id,
            answers=message_id,
            run=recorder.finish("ok") if recorder else None,
            # Asked for every answered exchange: the store's SQL alone decides there is nothing to
            # copy from a private one (no check up here that a later caller could forget).
            mirror=MirrorOf(message_id, source_label(conversation)),
            stream=await _closed(streamed) or resume,
        )
        if prepared.context.needs_fold:
            # A later event of the same lane: the fold runs in the mode it was planned for, or not at all.
            self._lanes.submit((conversation.platform, conversation.chat_id), lambda: self._fold(conversation, state))
        return reply

    async def prepare(
        self,
        conversation: Conversation,
        state: ModeState,
        *,
        shrink: int = 1,
        images: tuple[ImageInput, ...] = (),
        note: str | None = None,
        upcoming: str | None = None,
        ahead: ReadAhead | None = None,
    ) -> PreparedRequest:
        """The first request of a turn in `state`'s mode: the mode's context (core/memory/context.py,
        `shrink` dividing its budget), `note` as a constant system line after it, `images` on the
        newest user message, and the tools chosen for the mode before the call. `answer` sends it;
        the `/context` preview (core/turn/preview.py) shows it, `upcoming` standing for the message
        not typed yet, `ahead` the reads taken beside the storing of the turn's message (see
        `ContextAssembler.assemble`)."""
        context = await self._context.assemble(conversation, state, shrink=shrink, upcoming=upcoming, ahead=ahead)
        tail = [ChatMessage("system", note)] if note else []
        # None at all while the server takes no tools (by setting, or since it refused them to this mode).
        private = state.is_private  # the gate's answer, carried by every request of the turn
        offered = (
            tuple(self._tools.tools_for(conversation, state)) if self._tool_support.enabled_for(private=private) else ()
        )
        messages = with_images([*context.messages, *tail], images)
        request = _round_request(messages, offered, last=self._max_tool_rounds == 0, private=private)
        return PreparedRequest(context, offered, request)

    async def read_ahead(self, conversation: Conversation, state: ModeState) -> ContextReads:
        """The context a turn answered at once will assemble, read while its message is being stored."""
        return await self._context.read_ahead(conversation, state)

    async def finish(
        self,
        turn: Turn,
        text: str,
        *,
        stored_text: str | None = None,
        segment_id: int | None = None,
        answers: int | None = None,
        run: RunRecord | None = None,
        delete_inbound: bool = False,
        mirror: MirrorOf | None = None,
        queued: bool = True,
        stream: int | None = None,
    ) -> Reply:
        """Write the turn's outcome and, where the platform sends through the outbox, its pending
        delivery, in one transaction. With `mirror`, the same transaction writes the exchange's
        mirror rows, handed to the outbox here. `segment_id`: the interval the outcome and its
        delivery belong to (the event's, as the gate decided it). `queued` False: no outbox row
        (the mode could not be read, so no interval can be named); the adapter sends the text.
        `stream`: the reply's streaming row, which becomes its delivery (the final edit)."""
        if turn.restart_notice:
            text = f"{copy.RESTART_ENDED_PRIVATE}\n\n{text}"
        message = turn.message
        target = (
            self._target(turn, delete_inbound=delete_inbound) if queued and self.delivers(message.platform) else None
        )
        if stored_text is None and answers is None and target is None and run is None:
            return Reply(text, delete_inbound=delete_inbound)
        started = time.perf_counter()
        recorded = await self._replies.record_reply(
            turn.conversation.id,
            text,
            self._clock.now(),
            stored_text=stored_text,
            segment_id=segment_id,
            run=run,
            answers=answers,
            target=target,
            mirror=mirror,
            stream=stream,
        )
        if run is not None:  # a normal turn's reply (a run exists for no other): timed for the operator
            self._metrics.database_write("reply", time.perf_counter() - started)
        if recorded.mirror_ids and self._outbox is not None:
            # Each copy in its own lane: a slow or failing target never delays the reply.
            self._outbox.hand_over(turn.conversation.id, *recorded.mirror_ids)
        return Reply(
            text,
            delete_inbound=delete_inbound,
            delivery_id=recorded.delivery_id,
            conversation_id=turn.conversation.id,
            delivery=recorded.delivery,
        )

    def _target(self, turn: Turn, *, delete_inbound: bool = False) -> DeliveryTarget:
        message = turn.message
        # In a group the reply quotes the message it answers; a deleted one cannot be quoted.
        reply_to = None if (turn.conversation.is_direct or delete_inbound) else message.message_id
        return DeliveryTarget(message.platform, message.chat_id, reply_to, message.thread_id)

    async def _complete_with_tools(
        self,
        conversation: Conversation,
        state: ModeState,
        prepared: PreparedRequest,
        recorder: RunRecorder | None,
        streamed: StreamedAnswer | None = None,
    ) -> str:
        offered = prepared.offered
        messages = list(prepared.request.messages)
        request = prepared.request
        private = request.private
        segment_id = state.segment_id
        rounds = 0
        asked_without_tools = False
        while True:
            try:
                completion = await self._call(request, recorder, streamed.offer if streamed else None)
            except ProviderToolsUnsupported:
                if not request.tools:
                    raise
                # Failing every turn would cut the person off from the model: no tools from now on
                # (for this mode's turns: a private turn's refusal teaches normal mode nothing).
                self._tool_support.refused(private=private)
                offered = ()
                request = _round_request(messages, offered, last=True, private=private)
                continue
            if not completion.tool_calls or not request.tools:
                text = completion.text.strip()
                if only_tool_call(text, self._tools.names) or (not text and request.tools):
                    # A call the server left unparsed is no reply, nor is silence while tools were offered
                    # (llama-cpp-python's chatml-function-calling ends a "message:" there): asked once
                    # more, without tools.
                    if asked_without_tools:
                        raise ModelAnswerUnusable("the model answered only with unparsed tool syntax, twice")
                    log.info(
                        "conversation %s: the answer was unparsed tool syntax; asking again without tools",
                        conversation.id,
                    )
                    asked_without_tools = True
                    request = _round_request(messages, offered, last=True, private=private)
                    continue
                text = text or "…"
                # A reply stopped at its token limit says so, rather than reading as complete.
                return text + copy.CUT_OFF_MARKER if completion.truncated else text
            rounds += 1
            messages.append(ChatMessage("assistant", completion.text or None, completion.tool_calls))
            timezone = await timezone_of(self._prefs, conversation.person_id, self._timezone)
            tool_context = ToolContext(conversation, state, self._clock.now(), timezone, self._tool_stores)
            for call in completion.tool_calls:
                started = time.perf_counter()
                outcome = await run_call(offered, call, tool_context)
                elapsed = time.perf_counter() - started
                await self._record_call(conversation.id, segment_id, call, outcome, elapsed, recorder, private=private)
                if outcome.server is not None:
                    # Server, tool, outcome, sizes and time: never the arguments nor the result.
                    log.info(
                        "conversation %s: served tool %s of server %s: %s (%d bytes in, %d out, %.0f ms)",
                        conversation.id,
                        call.name[:64],
                        outcome.server,
                        outcome.status,
                        len(call.arguments.encode()),
                        len(outcome.text.encode()),
                        elapsed * 1e3,
                    )
                messages.append(ChatMessage("tool", outcome.text, tool_call_id=call.id))
            # Out of rounds: one last answer, with no tools to call.
            request = _round_request(messages, offered, last=rounds >= self._max_tool_rounds, private=private)

    async def _record_call(
        self,
        conversation_id: int,
        segment_id: int | None,
        call: ToolCall,
        outcome: CallOutcome,
        elapsed: float,
        recorder: RunRecorder | None,
        *,
        private: bool,
    ) -> None:
        """The call's tool operation row and, in a normal turn, its report event. A served call in a
        private turn writes neither: its arguments and result live in this turn's request alone."""
        if outcome.server is not None and private:
            return
        await self._runs.record_tool_operation(
            conversation_id,
            segment_id,
            call.name[:64],
            outcome.status,
            len(call.arguments.encode()),
            len(outcome.text.encode()),
            self._clock.now(),
            server=outcome.server,
        )
        if recorder is None:
            return
        if outcome.server is not None:
            # By server, tool, duration (the server's own) and outcome only.
            recorder.event(
                "tool_call",
                call.name[:64],
                outcome.status,
                duration_ms=(outcome.seconds or 0.0) * 1e3,
                server=outcome.server,
            )
            return
        recorder.event(
            "tool_call",
            call.name[:64],
            outcome.status,
            duration_ms=elapsed * 1e3,
            size_in=len(call.arguments.encode()),
            size_out=len(outcome.text.encode()),
        )

    async def _save_run(self, run: RunRecord) -> None:
        try:
            await self._runs.save_run(run)
        except Exception as exc:  # noqa: BLE001 - analytics never breaks a turn
            log.warning("analytics run could not be written (%s)", type(exc).__name__)

    async def _call(
        self, request: CompletionRequest, recorder: RunRecorder | None, partial: PartialSink | None = None
    ) -> Completion:
        started = time.perf_counter()
        try:
            if partial is None:
                completion = await self._provider.complete(request)
            else:
                completion = await self._provider.complete(request, partial=partial)
        except ProviderError:
            if recorder:
                recorder.model_request(self._provider.name, "error", time.perf_counter() - started)
            raise
        if recorder:
            recorder.model_request(
                self._provider.name,
                # "cut_off": the model stopped at max_tokens; `companion report` counts them.
                "cut_off" if completion.truncated else "ok",
                time.perf_counter() - started,
                size_in=sum(len(m.content or "") for m in request.messages),
                size_out=len(completion.text),
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
            )
        # What the server counted teaches the context budget how many tokens a byte costs: normal
        # requests only, for the ratio sizes every normal window (a private turn reads it, never teaches it).
        if not request.private:
            self._context.ratio.observe(prompt_bytes(request), completion.prompt_tokens)
        return completion

    async def _fold(self, conversation: Conversation, state: ModeState) -> None:
        # Re-read the mode: the fold runs in the mode it was planned for, or not at all.
        current = await self._valve.settle(conversation)
        if current.unreadable or current.mode is not state.mode or current.segment_id != state.segment_id:
            return
        try:
            await self._context.fold(conversation, current, self._provider)
        except Exception as exc:  # noqa: BLE001 - e.g. the segment expired meanwhile; retried next turn
            log.warning("summary fold for conversation %s failed (%s)", conversation.id, type(exc).__name__)


async def _closed(streamed: StreamedAnswer | None) -> int | None:
    """Close the stream (nothing more is shown) and return its delivery row, if it wrote one."""
    if streamed is None:
        return None
    streamed.close()
    return await streamed.row()


def _round_request(
    messages: list[ChatMessage], offered: tuple[Tool, ...], *, last: bool, private: bool
) -> CompletionRequest:
    """One round's request: the messages so far and the tools offered, except in the last round
    (out of rounds: one last answer, with no tools to call); `private`: a private turn's."""
    return CompletionRequest(tuple(messages), () if last else tuple(t.spec for t in offered), private=private)


def _failure_words(exc: ProviderError) -> str:
    if isinstance(exc, ProviderRejected) and exc.status in (401, 403):
        return copy.PROVIDER_KEY_REFUSED
    if isinstance(exc, ProviderRequestTooLong):
        return copy.PROVIDER_TOO_LONG
    if isinstance(exc, ProviderUnavailable):
        return copy.PROVIDER_FAILED  # not reached, or no answer in time
    if isinstance(exc, ModelAnswerUnusable):
        return copy.MODEL_ANSWER_UNUSABLE
    return copy.PROVIDER_SERVER_FAILED


def prompt_bytes(request: CompletionRequest) -> int:
    """The UTF-8 size of what a request asks the model to read (messages and tool specs)."""
    size = sum(utf8_size(m.content or "") for m in request.messages)
    size += sum(len(c.arguments.encode("utf-8", "replace")) for m in request.messages for c in m.tool_calls)
    return size + sum(_spec_size(t) for t in request.tools)


# A tool's schema is the same dict every turn (the registry's tool's, whose spec is made afresh for
# each request): its repr's size is worked out once, not for every request. Keyed by id, with the
# dict kept so that the id stays its; a schema is never changed in place.
_SCHEMA_SIZES: dict[int, tuple[dict[str, Any], int]] = {}


def _spec_size(spec: ToolSpec) -> int:
    schema = spec.parameters
    known = _SCHEMA_SIZES.get(id(schema))
    if known is None or known[0] is not schema:
        if len(_SCHEMA_SIZES) >= 1024:  # schemas made afresh (none today): the cache never grows past this
            _SCHEMA_SIZES.clear()
        known = _SCHEMA_SIZES[id(schema)] = (schema, len(repr(schema)))
    return len(spec.name) + len(spec.description) + known[1]
