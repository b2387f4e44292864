"""PrometheusMetrics: core.ports.Metrics over prometheus-client, rendered by GET /metrics.

Every label value is one of a few words fixed here; anything else a caller passes becomes
`other`, so no id of a chat, person or message can become a label (nor a time series of its
own), and there is no mode label. Counters carry no `_created` series: the moment a series
first moved is itself something to keep to oneself.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

# Process-wide in prometheus-client: counters and histograms without their `_created` timestamps.
disable_created_metrics()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PLATFORMS = ("telegram", "discord", "terminal", "web")
TURN_OUTCOMES = ("ok", "error")
MODEL_OUTCOMES = ("ok", "cut_off", "error")
DELIVERY_KINDS = ("reply", "mirror", "reminder", "nudge")
DELIVERY_STATES = ("sent", "retried", "failed")
NUDGE_KINDS = ("reminder", "watch", "goal", "checkin")
NUDGE_OUTCOMES = ("sent", "silent", "skipped", "missed")
WRITES = ("reply", "probe")
OTHER = "other"
# Send failures are named by kind (an exception's class name, or a few words such as "not started").
_REASON_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_ ")
MAX_REASONS = 32  # distinct reasons kept as their own series; later ones are counted as `other`

_MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_WRITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    return value if value in allowed else OTHER


class PrometheusMetrics:
    """Implements core.ports.Metrics; one registry of its own per instance (no process-wide state)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._updates = Counter(
            "companion_updates_received", "Inbound events that reached the core, of any mode.", ["platform"], registry=r
        )
        self._turns = Counter("companion_turns", "Normal turns answered, by outcome.", ["outcome"], registry=r)
        self._model_seconds = Histogram(
            "companion_model_request_seconds",
            "Model requests of normal turns, by outcome.",
            ["outcome"],
            buckets=_MODEL_BUCKETS,
            registry=r,
        )
        self._tokens = Counter(
            "companion_model_tokens", "Tokens the model server counted for normal turns.", ["kind"], registry=r
        )
        self._deliveries = Counter(
            "companion_deliveries",
            "Deliveries outside private threads that were sent, retried or failed, by kind.",
            ["kind", "state"],
            registry=r,
        )
        self._send_errors = Counter(
            "companion_send_errors",
            "Failed sends of deliveries outside private threads, by reason.",
            ["reason"],
            registry=r,
        )
        self._nudges = Counter(
            "companion_nudge_decisions",
            "Reminder and nudge decisions, by kind and outcome.",
            ["kind", "outcome"],
            registry=r,
        )
        self._writes = Histogram(
            "companion_database_write_seconds",
            "Write transactions: a normal turn's reply, and the readiness probe.",
            ["write"],
            buckets=_WRITE_BUCKETS,
            registry=r,
        )
        self._webhook_refused = Counter(
            "companion_webhook_refused",
            "Webhook deliveries refused for a missing or wrong secret token.",
            registry=r,
        )
        self._inbox = Gauge(
            "companion_webhook_inbox_depth",
            "Webhook updates stored and not yet handled (0 when Telegram is polled).",
            registry=r,
        )
        self._reasons: set[str] = set()
        # Every series known in advance exists from the start, at zero.
        for platform in PLATFORMS:
            self._updates.labels(platform)
        for outcome in TURN_OUTCOMES:
            self._turns.labels(outcome)
        for outcome in MODEL_OUTCOMES:
            self._model_seconds.labels(outcome)
        for kind in ("prompt", "completion"):
            self._tokens.labels(kind)
        for kind in DELIVERY_KINDS:
            for state in DELIVERY_STATES:
                self._deliveries.labels(kind, state)
        for kind in NUDGE_KINDS:
            for outcome in NUDGE_OUTCOMES:
                self._nudges.labels(kind, outcome)
        for write in WRITES:
            self._writes.labels(write)

    # --- core.ports.Metrics ---------------------------------------------------------------------

    def update_received(self, platform: str) -> None:
        self._updates.labels(_one_of(platform, PLATFORMS)).inc()

    def turn_finished(self, outcome: str) -> None:
        self._turns.labels(_one_of(outcome, TURN_OUTCOMES)).inc()

    def model_request(
        self, outcome: str, seconds: float, prompt_tokens: int | None, completion_tokens: int | None
    ) -> None:
        self._model_seconds.labels(_one_of(outcome, MODEL_OUTCOMES)).observe(max(seconds, 0.0))
        if prompt_tokens:
            self._tokens.labels("prompt").inc(prompt_tokens)
        if completion_tokens:
            self._tokens.labels("completion").inc(completion_tokens)

    def delivery_settled(self, kind: str, state: str) -> None:
        self._deliveries.labels(_one_of(kind, DELIVERY_KINDS), _one_of(state, DELIVERY_STATES)).inc()

    def send_error(self, reason: str) -> None:
        self._send_errors.labels(self._reason(reason)).inc()

    def nudge_decision(self, kind: str, outcome: str) -> None:
        self._nudges.labels(_one_of(kind, NUDGE_KINDS), _one_of(outcome, NUDGE_OUTCOMES)).inc()

    def database_write(self, what: str, seconds: float) -> None:
        self._writes.labels(_one_of(what, WRITES)).observe(max(seconds, 0.0))

    # --- the webhook (not core.ports.Metrics: the HTTP service's own) --------------------------------

    def webhook_refused(self) -> None:
        self._webhook_refused.inc()

    def watch_inbox(self, depth: Callable[[], int]) -> None:
        """The inbox's depth, read at each scrape."""
        self._inbox.set_function(lambda: float(depth()))

    def watch_claims(self, held: Callable[[], int], taken_over: Callable[[], int]) -> None:
        """A shared database (issue 33): the conversations this process holds and has taken over, read at each
        scrape. Every turn claims its conversation whatever its mode, so neither says anything of private mode."""
        self._read_at_scrape(
            "companion_conversations_held", "Conversations this process holds (a shared database).", held
        )
        self._read_at_scrape(
            "companion_take_overs",
            "Conversations this process took over from a process that died or stopped, since it started.",
            taken_over,
        )

    def watch_gateway(self, held: Callable[[], bool], taken: Callable[[], int]) -> None:
        """A shared database serving Discord: whether this process holds the Discord gateway, and how many
        times it took it (at its first start, or from a process that stopped or died), read at each scrape."""
        self._read_at_scrape(
            "companion_discord_gateway_held", "1 while this process holds the Discord gateway connection.", held
        )
        self._read_at_scrape(
            "companion_discord_gateway_take_overs",
            "Times this process took the Discord gateway (free, or held by a process that stopped or died).",
            taken,
        )

    def _read_at_scrape(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        Gauge(name, documentation, registry=self.registry).set_function(lambda: float(read()))

    # --- GET /metrics -----------------------------------------------------------------------------

    def render(self) -> bytes:
        """The Prometheus text format (version 0.0.4)."""
        return generate_latest(self.registry)

    def _reason(self, reason: str) -> str:
        """A send failure's kind as a label: words of letters only (no digits, so no id fits),
        at most 40 characters, and at most MAX_REASONS distinct ones."""
        if not reason or len(reason) > 40 or not set(reason) <= _REASON_CHARS:
            return OTHER
        if reason not in self._reasons:
            if len(self._reasons) >= MAX_REASONS:
                return OTHER
            self._reasons.add(reason)
        return reason
