"""What a command handler may use: a narrow set of services, never the whole companion."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from core.delivery.outbox import Outbox
from core.memory.tools import ToolRegistry, ToolStores, ToolSupport
from core.ports.clock import Clock
from core.ports.store.attempts import AttemptLog
from core.ports.store.bindings import BindingStore
from core.ports.store.lifetime import ExportStore, ForgetStore
from core.ports.store.links import LinkStore
from core.ports.store.modes import OpenSegmentRead
from core.ports.store.proactive import NudgeSettings
from core.ports.store.timeline import TimelineLog
from core.privacy.transition import TransitionLine
from core.privacy.valve import ModeValve
from core.proactive.manners import Manners, timezone_of
from core.values.durations import format_moment
from core.values.model import Conversation


@dataclass(frozen=True, slots=True)
class CommandSettings:
    """The settings commands answer by (from COMPANION_* through bot/bootstrap.py)."""

    timezone: str = "UTC"  # COMPANION_TIMEZONE: the zone of a person who set none
    allow_private_export: bool = False
    artifact_retention_seconds: float | None = 30 * 86400.0
    # The platforms this process serves (a binding's target must be one); None: any.
    platforms: frozenset[str] | None = None
    manners: Manners = field(default_factory=Manners)


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class CommandServices:
    """The services and the store's slices, each by name, that a handler is given (bot/bootstrap.py
    passes each slice its query class)."""

    clock: Clock
    valve: ModeValve
    transition: TransitionLine
    log: TimelineLog  # a command's own row, and lines written beside its answer
    segments: OpenSegmentRead  # the interval a command's answer belongs to
    forgetting: ForgetStore  # /forget private
    bindings: BindingStore  # /mirror, /unmirror
    nudges: NudgeSettings  # /nudges, /timezone, and each person's time zone
    export: ExportStore  # /export and crossings
    links: LinkStore  # /link, /whoami, /unlink
    link_attempts: AttemptLog  # wrong link codes, for the lockout
    memory: ToolStores  # the memory commands: the tools' operations
    settings: CommandSettings = field(default_factory=CommandSettings)
    outbox: Outbox | None = None  # None: nothing delivers here (the terminal), so no binding either
    # Linking or unlinking moved an account to another person: resolve every chat afresh.
    accounts_changed: Callable[[], None] = _nothing
    # Whether the model server takes tools; without them memory works through the commands only.
    tools: ToolSupport = field(default_factory=ToolSupport)
    # The tools a turn is offered (built-in and served) and the servers behind them, for /tools.
    registry: ToolRegistry | None = None

    async def timezone_of(self, conversation: Conversation) -> str:
        return await timezone_of(self.nudges, conversation.person_id, self.settings.timezone)

    async def format_time(self, conversation: Conversation, timestamp: float) -> str:
        """A moment as the person reads it: in their time zone (/timezone), else the configured one."""
        return format_moment(timestamp, await self.timezone_of(conversation))
