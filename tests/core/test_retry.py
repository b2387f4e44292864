"""The retry helper: attempts, pauses, the deadline, Retry-After and jitter, with no real time."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.values.retry import Attempt, RetryPolicy, backoff_delay, retrying


class Transient(Exception):
    """A failure the policies under test call retryable."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("transient")
        self.retry_after = retry_after


class Permanent(Exception):
    """A failure no policy retries."""


def transient(exc: Exception) -> bool:
    return isinstance(exc, Transient)


def server_hint(exc: Exception) -> float | None:
    return exc.retry_after if isinstance(exc, Transient) else None


class FakeTime:
    """A clock that moves only when slept on (or told to); records every pause."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.pauses.append(delay)
        self.now += delay


class FailingCall:
    """Fails with each of `failures` in turn, then returns "ok"; each try takes `takes` seconds."""

    def __init__(self, time: FakeTime, *failures: BaseException, takes: float = 0.0) -> None:
        self.time = time
        self.failures = list(failures)
        self.takes = takes
        self.attempts: list[Attempt] = []

    async def __call__(self, attempt: Attempt) -> str:
        self.attempts.append(attempt)
        self.time.now += self.takes
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


async def test_the_first_success_is_returned_without_a_pause(time: FakeTime) -> None:
    call = FailingCall(time)

    result = await retrying(RetryPolicy(attempts=3, retryable=transient), call, sleep=time.sleep, clock=time.clock)

    assert result == "ok"
    assert [a.number for a in call.attempts] == [1]
    assert time.pauses == []


async def test_retryable_failures_back_off_exponentially_up_to_the_cap(time: FakeTime) -> None:
    policy = RetryPolicy(attempts=6, base_delay=0.5, max_delay=3.0, retryable=transient)
    call = FailingCall(time, *(Transient() for _ in range(5)))

    result = await retrying(policy, call, sleep=time.sleep, clock=time.clock)

    assert result == "ok"
    assert time.pauses == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert [(a.number, a.of) for a in call.attempts] == [(n, 6) for n in range(1, 7)]


async def test_a_non_retryable_failure_is_raised_at_once(time: FakeTime) -> None:
    call = FailingCall(time, Permanent(), Transient())

    with pytest.raises(Permanent):
        await retrying(RetryPolicy(attempts=5, retryable=transient), call, sleep=time.sleep, clock=time.clock)

    assert len(call.attempts) == 1
    assert time.pauses == []


async def test_the_last_failure_is_raised_unchanged_when_the_attempts_run_out(time: FakeTime) -> None:
    failures = [Transient(), Transient(), Transient()]
    call = FailingCall(time, *failures)

    with pytest.raises(Transient) as raised:
        await retrying(RetryPolicy(attempts=3, retryable=transient), call, sleep=time.sleep, clock=time.clock)

    assert raised.value is failures[2]
    assert len(call.attempts) == 3
    assert len(time.pauses) == 2


async def test_a_pause_that_would_reach_the_deadline_is_not_taken(time: FakeTime) -> None:
    # Each try takes 1 s and the pauses are 1, 2, 4 s: after try 1 (t=1) and its pause (t=2),
    # try 2 ends at t=3; a 2 s pause would end at t=5, the deadline: the failure is raised instead.
    policy = RetryPolicy(attempts=10, base_delay=1.0, deadline=5.0, retryable=transient)
    call = FailingCall(time, *(Transient() for _ in range(9)), takes=1.0)

    with pytest.raises(Transient):
        await retrying(policy, call, sleep=time.sleep, clock=time.clock)

    assert time.pauses == [1.0]
    assert len(call.attempts) == 2
    assert time.now == 1003.0


async def test_each_try_is_told_the_time_left_before_the_deadline(time: FakeTime) -> None:
    policy = RetryPolicy(attempts=3, base_delay=0.5, deadline=10.0, retryable=transient)
    call = FailingCall(time, Transient(), Transient(), takes=1.0)

    await retrying(policy, call, sleep=time.sleep, clock=time.clock)

    assert [a.remaining for a in call.attempts] == [10.0, 8.5, 6.5]


async def test_without_a_deadline_a_try_has_no_time_limit(time: FakeTime) -> None:
    call = FailingCall(time)

    await retrying(RetryPolicy(attempts=1), call, sleep=time.sleep, clock=time.clock)

    assert call.attempts == [Attempt(number=1, of=1, remaining=None)]


async def test_the_server_given_pause_replaces_the_backoff_and_is_capped(time: FakeTime) -> None:
    policy = RetryPolicy(
        attempts=4, base_delay=0.5, jitter=1.0, retryable=transient, retry_after=server_hint, max_retry_after=5.0
    )
    call = FailingCall(time, Transient(retry_after=2.0), Transient(retry_after=600.0), Transient())

    await retrying(policy, call, sleep=time.sleep, clock=time.clock, rand=lambda: 0.0)

    # Retry-After as given (no jitter), then capped at 5 s; without one, the jittered backoff.
    assert time.pauses == [2.0, 5.0, 0.0]


async def test_a_server_given_pause_past_the_deadline_is_not_waited_for(time: FakeTime) -> None:
    policy = RetryPolicy(attempts=3, deadline=5.0, retryable=transient, retry_after=server_hint)
    call = FailingCall(time, Transient(retry_after=60.0))

    with pytest.raises(Transient):
        await retrying(policy, call, sleep=time.sleep, clock=time.clock)

    assert time.pauses == []


async def test_a_negative_server_given_pause_is_no_pause(time: FakeTime) -> None:
    policy = RetryPolicy(attempts=2, retryable=transient, retry_after=server_hint)

    await retrying(policy, FailingCall(time, Transient(retry_after=-3.0)), sleep=time.sleep, clock=time.clock)

    assert time.pauses == [0.0]


async def test_fixed_pauses_replace_the_backoff_and_set_the_attempts(time: FakeTime) -> None:
    policy = RetryPolicy.fixed((1.0, 4.0, 15.0), retryable=transient)
    call = FailingCall(time, *(Transient() for _ in range(4)))

    with pytest.raises(Transient):
        await retrying(policy, call, sleep=time.sleep, clock=time.clock)

    assert policy.attempts == 4
    assert time.pauses == [1.0, 4.0, 15.0]


async def test_on_retry_hears_each_failure_that_is_tried_again_but_not_the_last(time: FakeTime) -> None:
    heard: list[tuple[str, int, float]] = []
    failures = [Transient(), Transient(), Transient()]

    with pytest.raises(Transient):
        await retrying(
            RetryPolicy(attempts=3, base_delay=1.0, retryable=transient),
            FailingCall(time, *failures),
            on_retry=lambda exc, attempt, pause: heard.append((str(exc), attempt.number, pause)),
            sleep=time.sleep,
            clock=time.clock,
        )

    assert heard == [("transient", 1, 1.0), ("transient", 2, 2.0)]


async def test_cancellation_is_never_retried(time: FakeTime) -> None:
    call = FailingCall(time, asyncio.CancelledError())

    with pytest.raises(asyncio.CancelledError):
        await retrying(RetryPolicy(attempts=5, retryable=lambda exc: True), call, sleep=time.sleep, clock=time.clock)

    assert len(call.attempts) == 1


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 1, "jitter": 1.5}, "jitter"),
        ({"attempts": 1, "jitter": -0.1}, "jitter"),
    ],
)
def test_a_policy_that_cannot_work_is_refused_naming_the_setting(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        RetryPolicy(**options)


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    base=st.floats(min_value=0.001, max_value=100.0),
    cap=st.floats(min_value=0.001, max_value=10_000.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_jitter_keeps_the_pause_between_its_share_and_the_capped_ceiling(
    attempt: int, base: float, cap: float, jitter: float, draw: float
) -> None:
    ceiling = min(base * 2 ** min(attempt - 1, 30), cap)

    pause = backoff_delay(attempt, base=base, cap=cap, jitter=jitter, rand=lambda: draw)

    assert math.isfinite(pause)
    assert ceiling * (1 - jitter) - 1e-9 <= pause <= ceiling + 1e-9


def test_without_jitter_the_pause_doubles_until_the_cap() -> None:
    assert [backoff_delay(n, base=0.5, cap=30.0) for n in (1, 2, 3, 7, 8, 500)] == [0.5, 1.0, 2.0, 30.0, 30.0, 30.0]
