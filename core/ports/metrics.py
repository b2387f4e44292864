"""What an operator may count (GET /metrics), and the counter that counts nothing."""

from __future__ import annotations

from typing import Protocol


class Metrics(Protocol):
    """What an operator may count (GET /metrics). Every label is a kind from a small fixed set:
    never an id of a chat, a person or a message, and never the mode. Only paths that exist for
    every update alike (intake) or only for normal turns (the run record, deliveries outside a
    segment, proactive decisions that are not 'private') call these, so a private turn moves no
    counter that a normal one would not move as well."""

    def update_received(self, platform: str) -> None:
        """An inbound event reached the core (any mode: intake cannot tell, and must not)."""
        ...

    def turn_finished(self, outcome: str) -> None:
        """A normal turn ended: `ok` or `error`."""
        ...

    def model_request(
        self, outcome: str, seconds: float, prompt_tokens: int | None, completion_tokens: int | None
    ) -> None:
        """A normal turn's model request ended (`ok`, `cut_off` or `error`) after `seconds`."""
        ...

    def delivery_settled(self, kind: str, state: str) -> None:
        """A delivery outside any segment was `sent`, `retried` or `failed`; `kind` reply, mirror, reminder or nudge."""
        ...

    def send_error(self, reason: str) -> None:
        """A send of a delivery outside any segment failed; `reason` is the failure's kind."""
        ...

    def nudge_decision(self, kind: str, outcome: str) -> None:
        """A proactive decision was recorded (`sent`, `silent`, `skipped`, `missed`); never one of private mode."""
        ...

    def database_write(self, what: str, seconds: float) -> None:
        """A write transaction took `seconds`: `reply` (a normal turn's reply, run and delivery) or `probe`."""
        ...


class NoMetrics:
    """Counts nothing: `companion chat`, the tests, and a gateway without the HTTP service."""

    def update_received(self, platform: str) -> None:
        pass

    def turn_finished(self, outcome: str) -> None:
        pass

    def model_request(
        self, outcome: str, seconds: float, prompt_tokens: int | None, completion_tokens: int | None
    ) -> None:
        pass

    def delivery_settled(self, kind: str, state: str) -> None:
        pass

    def send_error(self, reason: str) -> None:
        pass

    def nudge_decision(self, kind: str, outcome: str) -> None:
        pass

    def database_write(self, what: str, seconds: float) -> None:
        pass


NO_METRICS = NoMetrics()
