"""The companion's configuration as one value, and the parts it is made of: bot/bootstrap.py builds
the configuration from the settings, and every part from the configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.delivery.handoff import HandOff
from core.delivery.outbox import Outbox
from core.delivery.typing import TypingService
from core.memory.capture import CaptureService
from core.memory.context import ContextAssembler, ContextBudget, Persona
from core.ports.chat import AdapterStateStore
from core.ports.clock import Clock
from core.ports.model import BaseProvider
from core.ports.store.quotes import EditStore, QuoteStore
from core.ports.store.timeline import InboxStore, TimelineLog
from core.privacy.valve import ModeValve
from core.proactive.service import ProactiveConfig, ProactiveService
from core.turn.commanding import CommandRunner
from core.turn.controls import OwnerReads
from core.turn.gate import Gate
from core.turn.lanes import Lanes
from core.turn.media import MediaReader
from core.turn.people import People
from core.turn.preview import NormalPreview
from core.turn.recovery import Recovery
from core.turn.responder import LaneKey, Responder
from core.turn.transcript import Transcripts


@dataclass(frozen=True, slots=True)
class CompanionConfig:
    persona: Persona = field(default_factory=Persona)
    passphrase_hash: str | None = None
    default_expiry: str = "24h"
    private_idle_seconds: float | None = 30 * 60.0
    allowed_accounts: frozenset[str] = frozenset()  # "platform:user_id"
    # COMPANION_OWNER: accounts that are one person with the terminal's owner from start-up.
    owner_accounts: frozenset[str] = frozenset()  # "platform:user_id"
    # The HTTP service is on: its signed-in user (web:owner) is the owner, linked at start-up.
    web_owner: bool = False
    timezone: str = "UTC"
    budget: ContextBudget = field(default_factory=ContextBudget)
    max_tool_rounds: int = 4
    # COMPANION_LLM_TOOLS: false for a model server that cannot call tools (`companion doctor` says which).
    tools: bool = True
    allow_private_export: bool = False
    # COMPANION_LLM_VISION: images go to the model as image input (core/turn/media.py).
    vision: bool = False
    # The platforms this process serves: their replies are outbox rows, and at start-up only their
    # open segments are closed, so `companion chat` never drops a Telegram conversation out of
    # private mode. None: all (and no outbox rows unless an outbox is given).
    platforms: frozenset[str] | None = None
    # Of `platforms`, those served only while this process holds their connection (a shared database's Discord
    # gateway): their conversations are taken over from dead processes only once it does (Companion.serve).
    standby: frozenset[str] = frozenset()
    artifact_retention_seconds: float | None = 30 * 86400.0
    # The line said on leaving private mode: "constant" (copy.TRANSITION_FALLBACK, no model call)
    # or "generated" (seed 000's variable wording from a constant instruction, capped).
    transition: str = "constant"
    # Reminders and nudges: the manners' defaults (COMPANION_QUIET_HOURS, COMPANION_TIMEZONE, ...).
    proactive: ProactiveConfig = field(default_factory=ProactiveConfig)
    # COMPANION_BURST_SECONDS: messages this close together are answered in one turn (0: each alone).
    burst_seconds: float = 0.0
    # COMPANION_STOP_GRACE: how long a stop lets the turns in flight (and held bursts) finish;
    # what is cut off later stays an open turn, answered at the next start.
    stop_grace: float = 25.0


@dataclass(frozen=True, slots=True)
class Parts:
    """What the companion is made of; bot/bootstrap.py builds every part, and hands each the
    slices of the store it names (core/ports/store/)."""

    provider: BaseProvider
    clock: Clock
    valve: ModeValve
    context: ContextAssembler
    capture: CaptureService
    people: People
    recovery: Recovery
    responder: Responder
    commands: CommandRunner
    media: MediaReader
    lanes: Lanes[LaneKey]
    gate: Gate
    # The edge: where answers are handed off (core/delivery/handoff.py) and the typing indicator.
    handoff: HandOff
    typing: TypingService
    # What the lane's own steps write and read: the user's message, an edit, a quote.
    inbox: InboxStore
    timeline: TimelineLog
    quotes: QuoteStore
    edits: EditStore
    # Where the platforms' intakes keep their offsets and cursors (CoreEntry.state).
    state: AdapterStateStore
    # The readers the web chat's pages are built from (bot/bootstrap.py `web_core`).
    preview: NormalPreview
    transcripts: Transcripts
    owner_reads: OwnerReads
    outbox: Outbox | None = None
    proactive: ProactiveService | None = None
