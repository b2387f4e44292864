"""Linked accounts and proactive messages (issues 14 and 16): a linked person's nudge goes to the
direct chat they last wrote in, in normal mode, on whichever platform; `/memory` and `/export`
say which account said what; `/forget` works across the accounts."""

from __future__ import annotations

import pytest

from tests.conftest import PASSPHRASE
from tests.core import test_links as linked
from tests.core.test_links import DC, TG, link, person_of, tell
from tests.helpers.chat import all_rows
from tests.helpers.fakes import request_text

HOUR = 3600.0
# The fixtures of the linked-accounts tests: a companion serving both platforms, and their fakes.
make = linked.make
senders = linked.senders


async def due_watch(companion, stores, clock, text: str) -> None:
    """An event two hours ago, for the linked person (made from their Telegram chat)."""
    person = await person_of(stores, "telegram", TG)
    (chat,) = await all_rows(stores, "SELECT id FROM conversations WHERE platform = 'telegram' AND chat_id = ?", (TG,))
    await stores.memory.add_followup(person, chat[0], "watch", text, clock.now() - 2 * HOUR, clock.now())


async def nudged(stores, senders) -> list[tuple[str, str]]:
    """(platform, chat) of each nudge sent, in order; each was received by that platform's fake."""
    rows = await all_rows(
        stores,
        "SELECT d.platform, d.chat_id, m.text, d.status FROM deliveries d JOIN messages m ON m.id = d.message_id"
        " WHERE d.kind = 'nudge' ORDER BY d.id",
    )
    assert all(status == "sent" and text in senders[platform].texts() for platform, _, text, status in rows)
    return [(platform, chat) for platform, chat, _, _ in rows]


async def test_a_linked_persons_nudge_goes_to_the_direct_chat_they_last_wrote_in_on_either_platform(
    make, stores, clock, provider, senders
):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, "hello from discord")  # the last normal message: Discord
    await due_watch(companion, stores, clock, "the interview")  # made on Telegram
    clock.advance(HOUR)
    assert (await companion.proactive.tick()).sent == 1
    assert await nudged(stores, senders) == [("discord", DC)]

    await tell(companion, "telegram", TG, "hello from telegram")  # now Telegram is where they are
    await due_watch(companion, stores, clock, "the concert")
    clock.advance(5 * HOUR)  # past the activity window and the cooldown
    assert (await companion.proactive.tick()).sent == 1
    assert await nudged(stores, senders) == [("discord", DC), ("telegram", TG)]


@pytest.mark.engines
async def test_writing_in_private_mode_does_not_move_a_linked_persons_nudges(make, stores, clock, provider, senders):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, f"/private {PASSPHRASE} 30m")
    await tell(companion, "telegram", TG, "hello from telegram")  # the last normal message: Telegram
    await tell(companion, "discord", DC, "said only in private on discord")  # later, but private
    await due_watch(companion, stores, clock, "the interview")
    clock.advance(HOUR)  # the Discord interval has expired
    await companion.sweep()
    assert await all_rows(stores, "SELECT count(*) FROM segments") == [(0,)]
    assert (await companion.proactive.tick()).sent == 1
    assert await nudged(stores, senders) == [("telegram", TG)]
    nudge_requests = [r for r in provider.requests if r.purpose == "nudge"]
    assert nudge_requests and all("said only in private" not in request_text(r) for r in nudge_requests)


async def test_memory_lines_name_the_linked_account_each_was_said_from(make, stores, provider):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, "/remember I play the cello")
    await tell(companion, "telegram", TG, "/goal run a 10k")
    await tell(companion, "discord", DC, "/followup 2h call mum")
    shown = (await tell(companion, "telegram", TG, "/memory")).text.splitlines()
    assert any(line.endswith(f"I play the cello (from Discord {DC})") for line in shown), shown
    assert any(line.endswith(f"run a 10k (from Telegram {TG})") for line in shown), shown
    assert any(line.endswith(f"call mum (from Discord {DC})") for line in shown), shown
    # The model is never told which account said what (the memory tools carry no platform ids).
    await tell(companion, "telegram", TG, "what do you know about me?")
    assert f"Discord {DC}" not in request_text(provider.last_reply_request())


async def test_memory_of_an_unlinked_person_names_no_account(make):
    companion = await make()
    await tell(companion, "discord", DC, "/remember I play the cello")
    shown = (await tell(companion, "discord", DC, "/memory")).text
    assert "I play the cello" in shown and "(from" not in shown


async def test_a_captured_fact_is_attributed_to_the_chat_it_came_from(make, stores, provider, clock):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, "I moved to Lisbon last week")
    person = await person_of(stores, "discord", DC)
    pending = await stores.memory.pending_capture(100)
    ids = [p.message_id for p in pending if p.person_id == person]
    await stores.memory.save_capture(person, "2027-01-01", "moved", ("Lives in Lisbon",), ids, clock.now())
    origins = await stores.links.memory_origins(person)
    (entry,) = await stores.timeline.normal_pad(person)
    assert origins[f"pad:{entry.id}"].platform == "discord"


async def test_export_of_a_linked_person_says_which_account_you_are_in_it(make):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, "hello")
    reply = await tell(companion, "discord", DC, "/export")
    body = reply.attachments[0].data.decode()
    assert f"You: Discord {DC}. Your linked accounts (Telegram {TG}) share memory" in body
    assert "(1 entries)" not in reply.text and "entries)" in reply.text


async def test_forget_by_number_removes_a_memory_said_from_the_other_linked_account(make, stores):
    companion = await make()
    await link(companion)
    await tell(companion, "discord", DC, "/remember I play the cello")
    (entry,) = await stores.timeline.normal_pad(await person_of(stores, "discord", DC))
    await tell(companion, "telegram", TG, f"/forget {entry.id}")
    assert await stores.timeline.normal_pad(await person_of(stores, "telegram", TG)) == []
    recalled = (await tell(companion, "discord", DC, "/recall cello")).text
    assert "I play the cello" not in recalled


async def test_memory_names_no_account_that_was_unlinked_since(make, stores):
    companion = await make(owner_accounts=frozenset({f"telegram:{TG}", f"discord:{DC}"}))
    await tell(companion, "discord", DC, "/remember I play the cello")
    assert (await tell(companion, "telegram", TG, "/unlink discord")).text.startswith("Unlinked")
    shown = (await tell(companion, "telegram", TG, "/memory")).text  # telegram and the terminal still
    assert "I play the cello" in shown and "Discord" not in shown
