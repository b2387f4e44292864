"""SQL of linked accounts: one-time `/link` codes (hashes only), their lockout log, and the merge
of two people into one, in one transaction that the guard refuses while either is in private mode."""

from __future__ import annotations

from adapters.storage.engine import Database as Engine
from adapters.storage.engine import Dialect, Fetch, Ref, Row, Statement, Tx
from adapters.storage.guard import refusing_while_person_private
from core.values.errors import LinkConflict, StoreError
from core.values.model import Account, PendingLinkCode


class LinkQueries:
    """Implements core.ports.store.links (LinkStore, AccountMerge, OriginStore, AccountList) over the engine
    interface (adapters/storage/engine.py)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # --- codes ------------------------------------------------------------------

    async def save_link_code(self, account_id: int, code_hash: str, now: float, expires_at: float) -> None:
        """Keep the hash of a new code of `account_id`, replacing its pending one (and dropping
        every expired code of anyone)."""
        await self._engine.write(
            Statement("DELETE FROM link_codes WHERE expires_at <= :now", {"now": now}),
            Statement(
                "INSERT INTO link_codes (account_id, code_hash, created_at, expires_at)"
                " VALUES (:a, :hash, :now, :expires)"
                " ON CONFLICT (account_id) DO UPDATE SET code_hash = excluded.code_hash,"
                " created_at = excluded.created_at, expires_at = excluded.expires_at",
                {"a": account_id, "hash": code_hash, "now": now, "expires": expires_at},
            ),
        )

    async def pending_link_codes(self, now: float) -> list[PendingLinkCode]:
        (found,) = await self._engine.read(
            Statement(
                "SELECT id, account_id, code_hash FROM link_codes WHERE expires_at > :now ORDER BY id",
                {"now": now},
                Fetch.ALL,
            )
        )
        return [PendingLinkCode(r["id"], r["account_id"], r["code_hash"]) for r in found.rows]

    async def redeem_link_code(self, code_id: int, account_id: int, now: float) -> int | None:
        """One transaction: use up the code (still pending, not expired) and merge the person of
        `account_id` into the person of the code's account. Returns the person, or None when
        the code is gone (used, expired or replaced): nothing changed then.

        Raises:
            PrivateWriteRefused: a conversation of either person has an open segment; the code
                stays pending and nothing changed.
        """
        async with self._engine.tx() as tx:
            (used,) = await tx.run(
                Statement(
                    "DELETE FROM link_codes WHERE id = :id AND expires_at > :now RETURNING account_id",
                    {"id": code_id, "now": now},
                    Fetch.ONE,
                )
            )
            if used.one is None:
                return None
            return await self._merge_accounts(tx, int(used.scalar), account_id)

    async def merge_accounts(self, into_account_id: int, account_id: int, now: float) -> int:
        """Make the person of `account_id` the person of `into_account_id` (COMPANION_OWNER).
        Returns the person.

        Raises:
            PrivateWriteRefused: a conversation of either person has an open segment.
        """
        async with self._engine.tx() as tx:
            return await self._merge_accounts(tx, into_account_id, account_id)

    # --- accounts of a person ---------------------------------------------------------

    async def accounts_of(self, person_id: int) -> list[Account]:
        (found,) = await self._engine.read(
            Statement(
                "SELECT id, person_id, platform, platform_user_id FROM accounts WHERE person_id = :p ORDER BY id",
                {"p": person_id},
                Fetch.ALL,
            )
        )
        return [Account(r["id"], r["person_id"], r["platform"], r["platform_user_id"]) for r in found.rows]

    async def memory_origins(self, person_id: int) -> dict[str, Account]:
        (found,) = await self._engine.read(
            Statement(
                "WITH origin (subject, conversation_id) AS ("
                " SELECT 'pad:' || CAST(id AS TEXT), conversation_id FROM pad_entries"
                "  WHERE person_id = :p AND mode = 'normal' AND segment_id IS NULL"
                " UNION ALL SELECT 'goal:' || CAST(id AS TEXT), conversation_id FROM goals WHERE person_id = :p"
                " UNION ALL SELECT 'followup:' || CAST(id AS TEXT), conversation_id FROM followups"
                "  WHERE person_id = :p)"
                " SELECT o.subject, a.id, a.person_id, a.platform, a.platform_user_id FROM origin o"
                # Only the person's own chats: one unlinked since belongs to someone else now.
                " JOIN conversations c ON c.id = o.conversation_id AND c.kind = 'direct' AND c.person_id = :p"
                " JOIN accounts a ON a.person_id = c.person_id AND a.platform = c.platform",
                {"p": person_id},
                Fetch.ALL,
            )
        )
        return {
            r["subject"]: Account(r["id"], r["person_id"], r["platform"], r["platform_user_id"]) for r in found.rows
        }

    async def unlink_account(self, person_id: int, platform: str, now: float) -> Account | None:
        """Separate the person's account on `platform` into a new person with no memory: its
        conversations (and their timelines) go with it; pad, notes, goals, follow-ups and
        manners stay. None: the person has no such account, or it is their only one.

        Raises:
            PrivateWriteRefused: a conversation of the person has an open segment.
        """
        dialect = self._engine.dialect
        async with self._engine.tx() as tx:  # whether to write depends on the accounts read first
            *_, everyone, chosen = await tx.run(
                *refusing_while_person_private(dialect, (person_id,), "unlinking"),
                Statement(
                    f"SELECT id FROM accounts WHERE person_id = :p ORDER BY id{dialect.for_update}",
                    {"p": person_id},
                    Fetch.ALL,
                ),
                Statement(
                    "SELECT id, platform_user_id FROM accounts WHERE person_id = :p AND platform = :platform"
                    " ORDER BY id",
                    {"p": person_id, "platform": platform},
                    Fetch.ALL,
                ),
            )
            if not chosen.rows or len(chosen.rows) == len(everyone.rows):
                return None
            moved = "SELECT id FROM conversations WHERE person_id = :old AND platform = :platform"
            names: dict[str, object] = {"old": person_id, "new": Ref(0), "platform": platform}
            (made, *_) = await tx.run(
                Statement(
                    "INSERT INTO people (display_name, created_at) VALUES (NULL, :now) RETURNING id",
                    {"now": now},
                    Fetch.ONE,
                    inserts="people",
                ),
                Statement(
                    "UPDATE accounts SET person_id = :new WHERE person_id = :old AND platform = :platform", names
                ),
                # The conversation's own messages stay recallable by whoever owns the conversation.
                Statement(_RECALL_MOVES_WITH_ITS_CONVERSATIONS[dialect.name].format(moved=moved), names),
                Statement(
                    "UPDATE proactive_people SET conversation_id = NULL"
                    f" WHERE person_id = :old AND conversation_id IN ({moved})",
                    names,
                ),
                Statement(
                    "UPDATE proactive_people SET pinned_conversation_id = NULL"
                    f" WHERE person_id = :old AND pinned_conversation_id IN ({moved})",
                    names,
                ),
                Statement(
                    "UPDATE conversations SET person_id = :new WHERE person_id = :old AND platform = :platform", names
                ),
            )
            account = chosen.rows[0]
            return Account(account["id"], int(made.scalar), platform, account["platform_user_id"])

    async def _merge_accounts(self, tx: Tx, into_account_id: int, account_id: int) -> int:
        """Inside `tx`: the person of `account_id` merged into the person of `into_account_id`, refused
        while either is in private mode, or when both have an account on one platform."""
        dialect = self._engine.dialect
        lock = dialect.for_update
        keep_row, drop_row = await tx.run(
            Statement(f"SELECT person_id FROM accounts WHERE id = :a{lock}", {"a": into_account_id}, Fetch.ONE),
            Statement(f"SELECT person_id FROM accounts WHERE id = :a{lock}", {"a": account_id}, Fetch.ONE),
        )
        keep, drop = int(present_row(keep_row.one)["person_id"]), int(present_row(drop_row.one)["person_id"])
        *_, shared = await tx.run(
            *refusing_while_person_private(dialect, (keep, drop), "linking"),
            Statement(
                "SELECT platform FROM accounts WHERE person_id = :keep"
                " INTERSECT SELECT platform FROM accounts WHERE person_id = :drop",
                {"keep": keep, "drop": drop},
                Fetch.ALL,
            ),
        )
        if keep == drop:
            return keep
        platforms = tuple(sorted(r["platform"] for r in shared.rows))
        if platforms:
            raise LinkConflict(platforms)
        await tx.run(*merging_people(dialect, keep, drop))
        return keep


# The recall index names its person in a column of its own: FTS5's on SQLite (rowid = id * 4 + source),
# recall_index's on PostgreSQL.
_RECALL_MOVES_WITH_ITS_CONVERSATIONS = {
    "sqlite": "UPDATE recall_fts SET person_id = :new WHERE source = 'message' AND person_id = :old"
    " AND rowid / 4 IN (SELECT id FROM messages WHERE conversation_id IN ({moved}))",
    "postgres": "UPDATE recall_index SET person_id = :new WHERE source = 'message' AND person_id = :old"
    " AND ref IN (SELECT id FROM messages WHERE conversation_id IN ({moved}))",
}
_RECALL_MOVES_WITH_ITS_PERSON = {
    "sqlite": "UPDATE recall_fts SET person_id = :keep WHERE person_id = :drop",
    "postgres": "UPDATE recall_index SET person_id = :keep WHERE person_id = :drop",
}


def present_row(row: Row | None) -> Row:
    """The row of an account named by a row that exists (a code's, or one a turn just used)."""
    if row is None:
        raise StoreError("no such account")
    return row


# Each statement moves one kind of row from person :drop to person :keep; a row :keep already
# has the same of (same text, same day...) is deleted instead, so nothing is duplicated. Run in
# the order written, inside the caller's transaction: a failure anywhere rolls back all of it.
_MERGE_STEPS: tuple[str, ...] = (
    # The normal pad: an entry the kept person has word for word is a duplicate.
    "DELETE FROM pad_entries WHERE person_id = :drop AND mode = 'normal' AND EXISTS (SELECT 1 FROM pad_entries k"
    " WHERE k.person_id = :keep AND k.mode = 'normal' AND k.text = pad_entries.text)",
    # Private pad entries move too: they stay owned by (and die with) their own segment, and are
    # loaded only in private mode, never by a normal turn.
    "UPDATE pad_entries SET person_id = :keep WHERE person_id = :drop",
    # Notes of the same day and text: the kept note takes over the sources of the duplicate.
    "INSERT INTO note_sources (note_id, message_id)"
    " SELECT k.id, s.message_id FROM notes d JOIN notes k ON k.person_id = :keep AND k.day = d.day"
    " AND k.text = d.text JOIN note_sources s ON s.note_id = d.id WHERE d.person_id = :drop ON CONFLICT DO NOTHING",
    "DELETE FROM notes WHERE person_id = :drop AND EXISTS (SELECT 1 FROM notes k"
    " WHERE k.person_id = :keep AND k.day = notes.day AND k.text = notes.text)",
    "UPDATE notes SET person_id = :keep WHERE person_id = :drop",
    # Goals with the same title and status (any case) are one goal.
    "DELETE FROM goals WHERE person_id = :drop AND EXISTS (SELECT 1 FROM goals k WHERE k.person_id = :keep"
    " AND lower(k.title) = lower(goals.title) AND k.status = goals.status)",
    "UPDATE goals SET person_id = :keep WHERE person_id = :drop",
    "DELETE FROM followups WHERE person_id = :drop AND EXISTS (SELECT 1 FROM followups k"
    " WHERE k.person_id = :keep AND k.kind = followups.kind AND k.text = followups.text"
    " AND k.due_at IS NOT DISTINCT FROM followups.due_at AND k.status = followups.status)",
    "UPDATE followups SET person_id = :keep WHERE person_id = :drop",
    "UPDATE proactive_decisions SET person_id = :keep WHERE person_id = :drop",
    # Here the recall index moves with its person (_RECALL_MOVES_WITH_ITS_PERSON; rows of deleted duplicates
    # are gone).
    # Manners: the kept person's settings win, the other's fill what is unset; where nudges go
    # is where the person last wrote, on either account.
    "INSERT INTO proactive_people (person_id) SELECT :keep FROM proactive_people WHERE person_id = :drop"
    " ON CONFLICT (person_id) DO NOTHING",
    "UPDATE proactive_people SET"
    " conversation_id = CASE WHEN coalesce(d.last_wrote_at, 0) > coalesce(proactive_people.last_wrote_at, 0)"
    "  THEN d.conversation_id ELSE coalesce(proactive_people.conversation_id, d.conversation_id) END,"
    " unanswered = CASE WHEN coalesce(d.last_wrote_at, 0) > coalesce(proactive_people.last_wrote_at, 0)"
    "  THEN d.unanswered ELSE proactive_people.unanswered END,"
    " checkin_open = CASE WHEN coalesce(d.last_wrote_at, 0) > coalesce(proactive_people.last_wrote_at, 0)"
    "  THEN d.checkin_open ELSE proactive_people.checkin_open END,"
    # The later of the two (either when the other is NULL).
    " last_wrote_at = CASE WHEN d.last_wrote_at IS NULL OR proactive_people.last_wrote_at >= d.last_wrote_at"
    "  THEN coalesce(proactive_people.last_wrote_at, d.last_wrote_at) ELSE d.last_wrote_at END,"
    " pinned_conversation_id = coalesce(proactive_people.pinned_conversation_id, d.pinned_conversation_id),"
    " budget = coalesce(proactive_people.budget, d.budget),"
    " quiet = coalesce(proactive_people.quiet, d.quiet),"
    " timezone = coalesce(proactive_people.timezone, d.timezone),"
    " cooldown = coalesce(proactive_people.cooldown, d.cooldown),"
    " last_nudge_at = CASE WHEN d.last_nudge_at IS NULL OR proactive_people.last_nudge_at >= d.last_nudge_at"
    "  THEN coalesce(proactive_people.last_nudge_at, d.last_nudge_at) ELSE d.last_nudge_at END"
    " FROM (SELECT * FROM proactive_people WHERE person_id = :drop) AS d WHERE proactive_people.person_id = :keep",
    "DELETE FROM proactive_people WHERE person_id = :drop",
    # Conversations keep their timelines; only whose they are changes.
    "UPDATE conversations SET person_id = :keep WHERE person_id = :drop",
    "UPDATE accounts SET person_id = :keep WHERE person_id = :drop",
    # Nothing is left to cascade: the emptied person goes.
    "DELETE FROM people WHERE id = :drop",
)


def merging_people(dialect: Dialect, keep: int, drop: int) -> list[Statement]:
    """The statements that move everything of person `drop` to `keep`, in order, for the caller's write."""
    names = {"keep": keep, "drop": drop}
    steps = [Statement(step, names) for step in _MERGE_STEPS]
    at = _MERGE_STEPS.index("UPDATE proactive_decisions SET person_id = :keep WHERE person_id = :drop") + 1
    steps.insert(at, Statement(_RECALL_MOVES_WITH_ITS_PERSON[dialect.name], names))
    return steps
