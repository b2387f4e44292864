"""The ports of linked accounts: one-time codes (hashes only), merging two people into one, the
accounts a person speaks from (adapters.storage.links.LinkQueries implements all)."""

from __future__ import annotations

from typing import Protocol

from core.values.model import Account, PendingLinkCode


class AccountList(Protocol):
    """The accounts of a person (export, `/memory`)."""

    async def accounts_of(self, person_id: int) -> list[Account]: ...


class OriginStore(AccountList, Protocol):
    """Which account each normal memory was said from (`/memory` of linked accounts)."""

    async def memory_origins(self, person_id: int) -> dict[str, Account]:
        """Which account each normal memory (`pad:ID`), goal (`goal:ID`) and follow-up
        (`followup:ID`) of the person was said from: the account of the direct conversation it
        came from. Ids only; what is not known (a group, a capture from two chats) is absent."""
        ...


class AccountMerge(Protocol):
    """The owner's accounts made one person at start-up (core.turn.people.People)."""

    async def merge_accounts(self, into_account_id: int, account_id: int, now: float) -> int: ...


class LinkStore(AccountList, Protocol):
    """`/link` and `/unlink`: pending one-time codes (hashes only) and merging two people into one in
    one transaction (pad, notes, recall, goals, follow-ups, manners; nothing lost, nothing
    duplicated). Linking and unlinking raise PrivateWriteRefused, changing nothing, while any
    conversation of the people concerned has an open segment."""

    async def save_link_code(self, account_id: int, code_hash: str, now: float, expires_at: float) -> None: ...

    async def pending_link_codes(self, now: float) -> list[PendingLinkCode]: ...

    async def redeem_link_code(self, code_id: int, account_id: int, now: float) -> int | None:
        """Use up the code and merge the person of `account_id` into that of the code's account.

        Returns:
            The person now holding both accounts; None when the code was used or expired.
        Raises:
            core.values.errors.PrivateWriteRefused: either person is in private mode somewhere.
        """
        ...

    async def unlink_account(self, person_id: int, platform: str, now: float) -> Account | None:
        """Separate the person's account on `platform` into a new person with no memory.

        Returns:
            The account with its new person; None when there is no such account or it is the only one.
        Raises:
            core.values.errors.PrivateWriteRefused: a conversation of the person is in private mode.
        """
        ...
