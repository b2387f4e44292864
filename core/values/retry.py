"""One retry loop for calls that may succeed on a later try; each caller brings its own policy."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

# Past 2**30 steps every cap in use has long been reached; the bound keeps the float finite.
_MAX_EXPONENT = 30


def backoff_delay(
    attempt: int,
    *,
    base: float,
    cap: float = math.inf,
    jitter: float = 0.0,
    rand: Callable[[], float] = random.random,
) -> float:
    """The pause after failed try `attempt` (1-based): `base * 2**(attempt-1)`, at most `cap`;
    with `jitter` j, a random share of that between (1 - j) and all of it."""
    ceiling = min(base * 2.0 ** min(attempt - 1, _MAX_EXPONENT), cap)
    if not jitter:
        return ceiling
    return ceiling * (1.0 - jitter + jitter * rand())


def _never(exc: Exception) -> bool:
    return False


def _no_hint(exc: Exception) -> float | None:
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """How one caller retries.

    Attributes:
        attempts: tries in all, the first included (1: no retry).
        base_delay: the pause after the first failed try; it doubles after each further one.
        max_delay: the cap on that doubling pause.
        jitter: share of the pause drawn at random (0: none; 0.5: between half and all of it).
        delays: fixed pauses before the 2nd, 3rd, ... try instead of the doubling one (the last
            repeats when there are more tries than pauses).
        deadline: seconds, from the first try, that the whole call may take: a pause that would
            reach it is not taken (the last failure is raised instead), and each try is told the
            time left (`Attempt.remaining`).
        retryable: whether a failure may succeed on a later try; any other is raised at once.
        retry_after: the pause the far end asked for with this failure (a `Retry-After`), or
            None; it replaces the computed pause, without jitter, at most `max_retry_after`.
    """

    attempts: int
    base_delay: float = 0.5
    max_delay: float = math.inf
    jitter: float = 0.0
    delays: tuple[float, ...] = ()
    deadline: float | None = None
    retryable: Callable[[Exception], bool] = _never
    retry_after: Callable[[Exception], float | None] = _no_hint
    max_retry_after: float = math.inf

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be 1 or more, not {self.attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be between 0 and 1, not {self.jitter}")

    @classmethod
    def fixed(cls, delays: Sequence[float], retryable: Callable[[Exception], bool]) -> RetryPolicy:
        """One try, then one more after each of `delays`."""
        return cls(attempts=len(delays) + 1, delays=tuple(delays), retryable=retryable)

    def delay(self, attempt: int, exc: Exception, rand: Callable[[], float] = random.random) -> float:
        """The pause after failed try `attempt` (1-based) that failed with `exc`."""
        hint = self.retry_after(exc)
        if hint is not None:
            return max(0.0, min(hint, self.max_retry_after))
        if self.delays:
            return self.delays[min(attempt, len(self.delays)) - 1]
        return backoff_delay(attempt, base=self.base_delay, cap=self.max_delay, jitter=self.jitter, rand=rand)


@dataclass(frozen=True)
class Attempt:
    """One try: its number (from 1), the tries allowed, and the seconds left before the deadline."""

    number: int
    of: int
    remaining: float | None


async def retrying(
    policy: RetryPolicy,
    call: Callable[[Attempt], Awaitable[T]],
    *,
    on_retry: Callable[[Exception, Attempt, float], None] | None = None,
    sleep: Sleep = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
) -> T:
    """Await `call` until it returns, retrying the failures `policy` calls retryable.

    Args:
        policy: attempts, pauses, deadline and what is worth another try.
        call: makes one try; it is given the `Attempt` (a try must end within `remaining`).
        on_retry: told of each failure that will be tried again, and the pause before it.
        sleep, clock, rand: injected so tests run without real time or randomness.
    Returns:
        What the first successful try returned.
    Raises:
        Exception: the last failure, unchanged, when it is not retryable, the tries ran out, or
            the pause before the next try would reach the deadline. Cancellation is never retried.
    """
    deadline = None if policy.deadline is None else clock() + policy.deadline
    number = 1
    while True:
        attempt = Attempt(number, policy.attempts, None if deadline is None else deadline - clock())
        try:
            return await call(attempt)
        except Exception as exc:
            if number >= policy.attempts or not policy.retryable(exc):
                raise
            pause = policy.delay(number, exc, rand)
            if deadline is not None and clock() + pause >= deadline:
                raise
            if on_retry is not None:
                on_retry(exc, attempt, pause)
        await sleep(pause)
        number += 1
