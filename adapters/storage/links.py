"""SQL of linked accounts: one-time `/link` codes (hashes only), their lockout log, and the merge
of two people into one, in one transaction that the guard refuses while either is in private mode."""

from __future__ import annotations

import aiosqlite

from adapters.storage.database import Database, inserted_id, present
from adapters.storage.guard import refuse_while_person_private
from core.values.errors import LinkConflict
from core.values.model import Account, PendingLinkCode


class LinkQueries:
    """Implements core.ports.store.links (LinkStore, AccountMerge, OriginStore, AccountList)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # --- codes ------------------------------------------------------------------

    async def save_link_code(self, account_id: int, code_hash: str, now: float, expires_at: float) -> None:
        """Keep the hash of a new code of `account_id`, replacing its pending one (and dropping
        every expired code of anyone)."""
        async with self._db.tx() as db:
            await db.execute("DELETE FROM link_codes WHERE expires_at <= ?", (now,))
            await db.execute(
                "INSERT INTO link_codes (account_id, code_hash, created_at, expires_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (account_id) DO UPDATE SET code_hash = excluded.code_hash,"
                " created_at = excluded.created_at, expires_at = excluded.expires_at",
                (account_id, code_hash, now, expires_at),
            )

    async def pending_link_codes(self, now: float) -> list[PendingLinkCode]:
        rows = await self._db.all(
            "SELECT id, account_id, code_hash FROM link_codes WHERE expires_at > ? ORDER BY id", (now,)
        )
        return [PendingLinkCode(r["id"], r["account_id"], r["code_hash"]) for r in rows]

    async def redeem_link_code(self, code_id: int, account_id: int, now: float) -> int | None:
        """One transaction: use up the code (still pending, not expired) and merge the person of
        `account_id` into the person of the code's account. Returns the person, or None when
        the code is gone (used, expired or replaced): nothing changed then.

        Raises:
            PrivateWriteRefused: a conversation of either person has an open segment; the code
                stays pending and nothing changed.
        """
        async with self._db.tx() as db:
            async with db.execute(
                "DELETE FROM link_codes WHERE id = ? AND expires_at > ? RETURNING account_id", (code_id, now)
            ) as cur:
                row = await cur.fetchone()
            if row is None:
                return None
            return await _merge_accounts(db, row[0], account_id)

    async def merge_accounts(self, into_account_id: int, account_id: int, now: float) -> int:
        """Make the person of `account_id` the person of `into_account_id` (COMPANION_OWNER).
        Returns the person.

        Raises:
            PrivateWriteRefused: a conversation of either person has an open segment.
        """
        async with self._db.tx() as db:
            return await _merge_accounts(db, into_account_id, account_id)

    # --- accounts of a person ---------------------------------------------------------

    async def accounts_of(self, person_id: int) -> list[Account]:
        rows = await self._db.all(
            "SELECT id, person_id, platform, platform_user_id FROM accounts WHERE person_id = ? ORDER BY id",
            (person_id,),
        )
        return [Account(r["id"], r["person_id"], r["platform"], r["platform_user_id"]) for r in rows]

    async def memory_origins(self, person_id: int) -> dict[str, Account]:
        rows = await self._db.all(
            "WITH origin (subject, conversation_id) AS ("
            " SELECT 'pad:' || id, conversation_id FROM pad_entries"
            "  WHERE person_id = :p AND mode = 'normal' AND segment_id IS NULL"
            " UNION ALL SELECT 'goal:' || id, conversation_id FROM goals WHERE person_id = :p"
            " UNION ALL SELECT 'followup:' || id, conversation_id FROM followups WHERE person_id = :p)"
            " SELECT o.subject, a.id, a.person_id, a.platform, a.platform_user_id FROM origin o"
            # Only the person's own chats: one unlinked since belongs to someone else now.
            " JOIN conversations c ON c.id = o.conversation_id AND c.kind = 'direct' AND c.person_id = :p"
            " JOIN accounts a ON a.person_id = c.person_id AND a.platform = c.platform",
            {"p": person_id},
        )
        return {r[0]: Account(r[1], r[2], r[3], r[4]) for r in rows}

    async def unlink_account(self, person_id: int, platform: str, now: float) -> Account | None:
        """Separate the person's account on `platform` into a new person with no memory: its
        conversations (and their timelines) go with it; pad, notes, goals, follow-ups and
        manners stay. None: the person has no such account, or it is their only one.

        Raises:
            PrivateWriteRefused: a conversation of the person has an open segment.
        """
        async with self._db.tx() as db:
            await refuse_while_person_private(db, (person_id,), "unlinking")
            async with db.execute(
                "SELECT id, platform_user_id FROM accounts WHERE person_id = ? ORDER BY id", (person_id,)
            ) as cur:
                rows = list(await cur.fetchall())
            async with db.execute(
                "SELECT id, platform_user_id FROM accounts WHERE person_id = ? AND platform = ? ORDER BY id",
                (person_id, platform),
            ) as cur:
                chosen = list(await cur.fetchall())
            if not chosen or len(chosen) == len(rows):
                return None
            cur = await db.execute("INSERT INTO people (display_name, created_at) VALUES (NULL, ?)", (now,))
            new_person = inserted_id(cur)
            await db.execute(
                "UPDATE accounts SET person_id = ? WHERE person_id = ? AND platform = ?",
                (new_person, person_id, platform),
            )
            moved = "SELECT id FROM conversations WHERE person_id = :old AND platform = :platform"
            names = {"old": person_id, "new": new_person, "platform": platform}
            # The conversation's own messages stay recallable by whoever owns the conversation.
            await db.execute(
                "UPDATE recall_fts SET person_id = :new WHERE source = 'message' AND person_id = :old"
                f" AND rowid / 4 IN (SELECT id FROM messages WHERE conversation_id IN ({moved}))",
                names,
            )
            await db.execute(
                "UPDATE proactive_people SET conversation_id = NULL"
                f" WHERE person_id = :old AND conversation_id IN ({moved})",
                names,
            )
            await db.execute(
                "UPDATE proactive_people SET pinned_conversation_id = NULL"
                f" WHERE person_id = :old AND pinned_conversation_id IN ({moved})",
                names,
            )
            await db.execute(
                "UPDATE conversations SET person_id = :new WHERE person_id = :old AND platform = :platform", names
            )
            account = chosen[0]
            return Account(account["id"], new_person, platform, account["platform_user_id"])


async def _merge_accounts(db: aiosqlite.Connection, into_account_id: int, account_id: int) -> int:
    keep = await _person_of(db, into_account_id)
    drop = await _person_of(db, account_id)
    await refuse_while_person_private(db, (keep, drop), "linking")
    if keep == drop:
        return keep
    async with db.execute(
        "SELECT platform FROM accounts WHERE person_id = ? INTERSECT SELECT platform FROM accounts WHERE person_id = ?",
        (keep, drop),
    ) as cur:
        shared = tuple(sorted(r[0] for r in await cur.fetchall()))
    if shared:
        raise LinkConflict(shared)
    await merge_people(db, keep, drop)
    return keep


async def _person_of(db: aiosqlite.Connection, account_id: int) -> int:
    async with db.execute("SELECT person_id FROM accounts WHERE id = ?", (account_id,)) as cur:
        return int(present(await cur.fetchone())[0])


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
    "INSERT OR IGNORE INTO note_sources (note_id, message_id)"
    " SELECT k.id, s.message_id FROM notes d JOIN notes k ON k.person_id = :keep AND k.day = d.day"
    " AND k.text = d.text JOIN note_sources s ON s.note_id = d.id WHERE d.person_id = :drop",
    "DELETE FROM notes WHERE person_id = :drop AND EXISTS (SELECT 1 FROM notes k"
    " WHERE k.person_id = :keep AND k.day = notes.day AND k.text = notes.text)",
    "UPDATE notes SET person_id = :keep WHERE person_id = :drop",
    # Goals with the same title and status (any case) are one goal.
    "DELETE FROM goals WHERE person_id = :drop AND EXISTS (SELECT 1 FROM goals k WHERE k.person_id = :keep"
    " AND lower(k.title) = lower(goals.title) AND k.status = goals.status)",
    "UPDATE goals SET person_id = :keep WHERE person_id = :drop",
    "DELETE FROM followups WHERE person_id = :drop AND EXISTS (SELECT 1 FROM followups k"
    " WHERE k.person_id = :keep AND k.kind = followups.kind AND k.text = followups.text"
    " AND k.due_at IS followups.due_at AND k.status = followups.status)",
    "UPDATE followups SET person_id = :keep WHERE person_id = :drop",
    "UPDATE proactive_decisions SET person_id = :keep WHERE person_id = :drop",
    # The recall index names its person in a column of its own (rows of deleted duplicates are gone).
    "UPDATE recall_fts SET person_id = :keep WHERE person_id = :drop",
    # Manners: the kept person's settings win, the other's fill what is unset; where nudges go
    # is where the person last wrote, on either account.
    "INSERT OR IGNORE INTO proactive_people (person_id) SELECT :keep FROM proactive_people WHERE person_id = :drop",
    "UPDATE proactive_people SET"
    " conversation_id = CASE WHEN coalesce(d.last_wrote_at, 0) > coalesce(proactive_people.last_wrote_at, 0)"
    "  THEN d.conversation_id ELSE coalesce(proactive_people.conversation_id, d.conversation_id) END,"
    " unanswered = CASE WHEN coalesce(d.last_wrote_at, 0) > coalesce(proactive_people.last_wrote_at, 0)"
    "  THEN d.unanswered ELSE proactive_people.unanswered END,"
    " checkin_open = CASE WHEN coalesce(d.last_wrote_at, 0) > coalesce(proactive_people.last_wrote_at, 0)"
    "  THEN d.checkin_open ELSE proactive_people.checkin_open END,"
    " last_wrote_at = coalesce(max(proactive_people.last_wrote_at, d.last_wrote_at), d.last_wrote_at,"
    "  proactive_people.last_wrote_at),"
    " pinned_conversation_id = coalesce(proactive_people.pinned_conversation_id, d.pinned_conversation_id),"
    " budget = coalesce(proactive_people.budget, d.budget),"
    " quiet = coalesce(proactive_people.quiet, d.quiet),"
    " timezone = coalesce(proactive_people.timezone, d.timezone),"
    " cooldown = coalesce(proactive_people.cooldown, d.cooldown),"
    " last_nudge_at = coalesce(max(proactive_people.last_nudge_at, d.last_nudge_at), d.last_nudge_at,"
    "  proactive_people.last_nudge_at)"
    " FROM (SELECT * FROM proactive_people WHERE person_id = :drop) AS d WHERE proactive_people.person_id = :keep",
    "DELETE FROM proactive_people WHERE person_id = :drop",
    # Conversations keep their timelines; only whose they are changes.
    "UPDATE conversations SET person_id = :keep WHERE person_id = :drop",
    "UPDATE accounts SET person_id = :keep WHERE person_id = :drop",
    # Nothing is left to cascade: the emptied person goes.
    "DELETE FROM people WHERE id = :drop",
)


async def merge_people(db: aiosqlite.Connection, keep: int, drop: int) -> None:
    """Inside the caller's write transaction: move everything of person `drop` to `keep`."""
    for step in _MERGE_STEPS:
        await db.execute(step, {"keep": keep, "drop": drop})
