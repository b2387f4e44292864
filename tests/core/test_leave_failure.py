"""A `/normal` whose segment close could not be written (issue 14's session notes): the valve holds
the conversation in normal mode and retries; meanwhile a normal turn's answer is not lost to its
analytics run, which the lasting-write guard refuses while the segment is still open."""

from __future__ import annotations

from core.values import copy
from tests.conftest import PASSPHRASE
from tests.helpers.chat import all_rows, say


async def test_a_failed_leave_does_not_turn_the_next_answer_into_an_apology(companion, stores, provider, monkeypatch):
    await say(companion, f"/private {PASSPHRASE}")

    async def disk_error(*args):
        raise OSError("disk I/O error")

    monkeypatch.setattr(stores.modes, "close_open_segments", disk_error)
    monkeypatch.setattr(stores.modes, "close_segment", disk_error)
    assert (await say(companion, "/normal")).text == copy.TRANSITION_FALLBACK
    assert await all_rows(stores, "SELECT count(*) FROM segments WHERE ended_at IS NULL") == [(1,)]
    runs = await all_rows(stores, "SELECT count(*) FROM agent_runs")
    reply = await say(companion, "hello again")
    assert reply is not None and reply.text == f"reply {len(provider.requests)}"  # the answer, not an apology
    assert await all_rows(stores, "SELECT text FROM messages WHERE role = 'assistant' ORDER BY id DESC LIMIT 1") == [
        (reply.text,)
    ]
    # The one lasting row of that reply is left out while the segment is open.
    assert await all_rows(stores, "SELECT count(*) FROM agent_runs") == runs
