"""One lockout policy for every secret a person may guess (the passphrase, a link code): five wrong
tries within 15 minutes lock that kind of entry for the account for 15 minutes. The attempt log is
the store's (it outlives a restart); the policy and its words are here, once."""

from __future__ import annotations

from dataclasses import dataclass

from core.ports.store.attempts import AttemptLog
from core.values.durations import describe_seconds

ATTEMPTS = 5
WINDOW = 15 * 60.0
DURATION = 15 * 60.0
KEEP_SECONDS = 86400.0  # wrong tries older than this are dropped from the log when one is written


def locked_until(attempts: list[float]) -> float | None:
    """The end of the latest lockout `attempts` (times of wrong tries) earn, or None."""
    ordered = sorted(attempts)
    locked = None
    for i in range(ATTEMPTS - 1, len(ordered)):
        if ordered[i] - ordered[i - ATTEMPTS + 1] <= WINDOW:
            locked = ordered[i] + DURATION
    return locked


@dataclass(frozen=True, slots=True)
class Lockout:
    """The lockout of one kind of entry, over the store's log of its wrong tries.

    Args:
        subject: what is locked, as a sentence starts it ("Private mode entry", "Linking").
        locks: the same in the middle of a sentence ("private mode", "linking").
        secret: what is guessed ("passphrase", "code").
        wrong: the sentence that says a try was wrong.
        attempts: the store's log of this kind of entry's wrong tries.
        tail: words after the count of tries left (" Nothing changed.").
    """

    subject: str
    locks: str
    secret: str
    wrong: str
    attempts: AttemptLog
    tail: str = ""

    async def refusal(self, account_id: int, now: float) -> tuple[str | None, list[float]]:
        """The line to answer while the account is locked out (None: it may try), and its recent
        wrong tries (for `failed`)."""
        attempts = await self.attempts.failed_since(account_id, now - WINDOW - DURATION)
        until = locked_until(attempts)
        if until is not None and now < until:
            line = f"{self.subject} is locked after too many wrong {self.secret}s; try again in {describe_seconds(until - now)}."
            return line, attempts
        return None, attempts

    async def failed(self, account_id: int, now: float, attempts: list[float]) -> tuple[str, int]:
        """Record a wrong try; the line to answer, and how many wrong tries are in the window now."""
        await self.attempts.record_failed(account_id, now, now - KEEP_SECONDS)
        recent = [t for t in attempts if t > now - WINDOW] + [now]
        if locked_until(recent) is not None:
            return (
                f"That {self.secret} is not right. {self.subject} is now locked for {describe_seconds(DURATION)}.",
                len(recent),
            )
        left = ATTEMPTS - len(recent)
        tries = "try" if left == 1 else "tries"
        return (
            f"{self.wrong} {left} more wrong {tries} will lock {self.locks} for {describe_seconds(DURATION)}.{self.tail}",
            len(recent),
        )

    async def succeeded(self, account_id: int) -> None:
        await self.attempts.clear_failed(account_id)
