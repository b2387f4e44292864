"""The operator's metrics in the core: normal turns, their deliveries and decisions are counted; a
private turn reaches no counter (its run record does not exist); every update is counted alike at intake."""

from __future__ import annotations

import pytest

from bot.bootstrap import core_entry
from core.turn.companion import Companion
from core.values.model import InboundMessage, Reply
from tests.conftest import PASSPHRASE
from tests.helpers.boot import boot_companion
from tests.helpers.fakes import FakeSender

USER = "100"
CANARY = "METRICS-PRIVATE-CANARY"


class FakeMetrics:
    """core.ports.Metrics that records each call as (method, args)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        if name not in {
            "update_received",
            "turn_finished",
            "model_request",
            "delivery_settled",
            "send_error",
            "nudge_decision",
            "database_write",
        }:
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))

    def named(self, name: str) -> list[tuple]:
        return [call[1:] for call in self.calls if call[0] == name]


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def sender() -> FakeSender:
    return FakeSender("telegram")


@pytest.fixture
async def companion(stores, provider, clock, passphrase_hash, sender, metrics) -> Companion:
    return await boot_companion(
        stores,
        provider,
        clock,
        passphrase_hash,
        [sender],
        outbox_options={"metrics": metrics},
        build_options={"metrics": metrics},
    )


_ids = iter(range(1, 10**6))


async def tell(companion: Companion, text: str, handle=None) -> Reply | None:
    """What an adapter does: hand the message over, then send the reply's delivery."""
    message = InboundMessage(
        "telegram", USER, USER, text, is_direct=True, message_id=f"m{next(_ids)}", sent_at=companion.clock.now()
    )
    reply = await (handle or companion.handle)(message)
    if reply is not None and reply.delivery_id is not None and companion.outbox is not None:
        await companion.outbox.deliver(reply.conversation_id, reply.delivery_id)
    return reply


async def test_a_normal_turn_is_counted_with_its_model_request_reply_write_and_delivery(companion, metrics):
    await tell(companion, "hello")
    assert metrics.named("turn_finished") == [("ok",)]
    ((outcome, seconds, _prompt, _completion),) = metrics.named("model_request")
    assert outcome == "ok" and seconds >= 0
    assert [call[0] for call in metrics.named("database_write")] == ["reply"]
    assert metrics.named("delivery_settled") == [("reply", "sent")]


@pytest.mark.engines
@pytest.mark.privacy
async def test_a_private_turn_reaches_no_metric_whatever_happens_in_it(companion, metrics, sender, provider, clock):
    await tell(companion, f"/private {PASSPHRASE}")
    metrics.calls.clear()
    await tell(companion, f"{CANARY} one")
    await tell(companion, f"{CANARY} two")
    provider.fail_all = True
    await tell(companion, f"{CANARY} three")  # a model failure in private mode
    provider.fail_all = False
    sender.fail_with = [(False, "NetworkError"), (True, "Forbidden")]
    await tell(companion, f"{CANARY} four")  # its reply's send fails, then is refused for good
    clock.advance(600)
    await companion.outbox.dispatch_due(at_start=True)
    assert sender.fail_with == []  # both failures happened
    assert metrics.calls == []
    await tell(companion, "/normal")
    metrics.calls.clear()
    await tell(companion, "back again")
    assert metrics.named("turn_finished") == [("ok",)]


async def test_a_normal_turn_whose_model_fails_is_counted_as_an_error(companion, metrics, provider):
    provider.fail_all = True
    await tell(companion, "hello")
    assert metrics.named("turn_finished") == [("error",)]
    assert [call[0] for call in metrics.named("model_request")] == ["error"]


async def test_a_failed_send_of_a_normal_reply_is_counted_by_reason(companion, metrics, sender):
    sender.fail_with = [(False, "NetworkError")]
    await tell(companion, "hello")
    assert metrics.named("delivery_settled") == [("reply", "retried")]
    assert metrics.named("send_error") == [("NetworkError",)]


async def test_every_update_is_counted_at_intake_alike_in_both_modes(companion, metrics):
    entry = core_entry(companion, metrics)
    for text in ("hello", f"/private {PASSPHRASE}", f"{CANARY} words", "/normal"):
        message = InboundMessage(
            "telegram", USER, USER, text, is_direct=True, message_id=f"m{next(_ids)}", sent_at=companion.clock.now()
        )
        await entry.receive(message)
    assert metrics.named("update_received") == [("telegram",)] * 4


@pytest.mark.engines
@pytest.mark.privacy
async def test_a_reminder_waiting_for_private_mode_is_counted_nowhere_and_counted_once_sent(
    companion, metrics, clock, sender
):
    await tell(companion, "/followup 5m stretch")
    await tell(companion, f"/private {PASSPHRASE}")
    clock.advance(5 * 60)
    metrics.calls.clear()
    assert (await companion.proactive.tick()).private == 1  # recorded: it waits for normal mode
    assert metrics.calls == []
    await tell(companion, "/normal")
    await companion.proactive.tick()
    assert metrics.named("nudge_decision") == [("reminder", "sent")]
