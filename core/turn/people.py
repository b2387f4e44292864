"""People: who may talk with the companion, which account and conversation a message belongs to,
the owner's accounts (COMPANION_OWNER), and chats that moved to a new id."""

from __future__ import annotations

import logging

from core.ports.clock import Clock
from core.ports.store.chats import ChatMoveStore
from core.ports.store.links import AccountMerge
from core.ports.store.timeline import AccountStore
from core.values import copy
from core.values.errors import LinkConflict, PrivateWriteRefused
from core.values.model import Account, ChatMove, Conversation, InboundMessage, Reply

log = logging.getLogger(__name__)

OWNER_PLATFORMS = frozenset({"terminal"})  # the person at the terminal is the owner
TERMINAL_OWNER = "owner"  # the terminal's one account (adapters/terminal.py)
WEB_OWNER = "web:owner"  # the web's one account: whoever signed in with `companion web-login`
RESOLVED_MAX = 4096


class People:
    """Access, and the account and conversation of each message. Ids never change, so a message's
    records are cached (bounded) and the common turn reads neither table; linking, unlinking and a
    chat move clear the cache."""

    def __init__(
        self,
        accounts: AccountStore,
        merge: AccountMerge,
        chats: ChatMoveStore,
        clock: Clock,
        *,
        allowed_accounts: frozenset[str] = frozenset(),  # "platform:user_id"
        owner_accounts: frozenset[str] = frozenset(),
        web_owner: bool = False,
    ) -> None:
        self._accounts = accounts
        self._merge = merge
        self._chats = chats
        self._clock = clock
        self._allowed = allowed_accounts
        # With the HTTP service on, the signed-in web user is the owner too, linked like COMPANION_OWNER.
        self._owner = owner_accounts | {WEB_OWNER} if web_owner else owner_accounts
        self._refused: set[str] = set()
        self._resolved: dict[tuple[str, str, str], tuple[Account, Conversation]] = {}

    def is_allowed(self, message: InboundMessage) -> bool:
        return message.platform in OWNER_PLATFORMS or message.account in self._allowed or message.account in self._owner

    def refusal(self, message: InboundMessage) -> Reply | None:
        """The answer to someone not allowed: nothing of it is stored; one refusal per account per
        run, then silence."""
        if message.account in self._refused:
            return None
        self._refused.add(message.account)
        # The platform id (never the text) is what the owner needs to allow the account.
        log.warning("refused %s (add it to COMPANION_ALLOWED_USERS)", message.account)
        return Reply(copy.NOT_ALLOWED)

    def accounts_changed(self) -> None:
        """Linking or unlinking moved an account to another person: resolve every chat afresh."""
        self._resolved.clear()

    async def resolve(self, message: InboundMessage) -> tuple[Account, Conversation]:
        key = (message.platform, message.user_id, message.chat_id)
        known = self._resolved.get(key)
        if known is not None:
            return known
        now = self._clock.now()
        account = await self._accounts.ensure_account(message.platform, message.user_id, message.user_name, now)
        conversation = await self._accounts.ensure_conversation(
            message.key, "direct" if message.is_direct else "group", account.person_id, now
        )
        if len(self._resolved) >= RESOLVED_MAX:
            self._resolved.clear()
        self._resolved[key] = (account, conversation)
        return account, conversation

    async def chat_moved(self, platform: str, old_chat_id: str, new_chat_id: str) -> ChatMove:
        """A platform moved a chat to a new id (a Telegram group upgraded to a supergroup): its
        conversation, bindings and pending deliveries follow it in one transaction of the store.
        It waits on no conversation: the store re-keys, and every chat is resolved afresh after."""
        if old_chat_id == new_chat_id:
            return ChatMove()
        moved = await self._chats.move_chat(platform, old_chat_id, new_chat_id, self._clock.now())
        self._resolved.clear()
        log.info(
            "%s: a chat moved to a new id: conversation %s%s, %d bindings, %d pending deliveries follow it%s",
            platform,
            moved.conversation_id,
            f" (conversation {moved.merged_conversation_id} merged into it)" if moved.merged_conversation_id else "",
            moved.bindings,
            moved.deliveries,
            " (refused: not a group conversation without private segments)" if moved.refused else "",
        )
        return moved

    async def owner(self) -> Account:
        """The owner's account at the terminal: its person holds the owner's accounts linked by
        COMPANION_OWNER (and the web chat's, where it is served)."""
        return await self._accounts.ensure_account("terminal", TERMINAL_OWNER, None, self._clock.now())

    async def link_owner(self) -> None:
        """COMPANION_OWNER (and the web's account, with the HTTP service on): the listed accounts and
        the terminal are one person, the owner. Refused (and said in the log) while a conversation
        of theirs is private; the next start tries again."""
        if not self._owner:
            return
        now = self._clock.now()
        terminal = await self._accounts.ensure_account("terminal", TERMINAL_OWNER, None, now)
        for item in sorted(self._owner):
            platform, _, user_id = item.partition(":")
            account = await self._accounts.ensure_account(platform, user_id, None, now)
            try:
                await self._merge.merge_accounts(terminal.id, account.id, now)
            except (PrivateWriteRefused, LinkConflict) as exc:
                log.warning("COMPANION_OWNER: account %s was not linked to the owner (%s)", account.id, exc)
        self.accounts_changed()
