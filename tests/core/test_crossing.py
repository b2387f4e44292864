"""Export and confirmed boundary crossings (seed 001)."""

from __future__ import annotations

import pytest

from core.values import copy
from tests.conftest import PASSPHRASE
from tests.helpers import engines
from tests.helpers.chat import all_rows, say

pytestmark = pytest.mark.engines


async def test_export_in_normal_mode_sends_the_masked_normal_timeline(companion):
    await say(companion, "normal words")
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "EXPORT-CANARY")
    await say(companion, "/normal")
    await say(companion, "more normal words")
    reply = await say(companion, "/export")
    (attachment,) = reply.attachments
    body = attachment.data.decode()
    assert "You: normal words" in body and "You: more normal words" in body
    assert body.count(copy.PLACEHOLDER) == 1 and "EXPORT-CANARY" not in body


async def test_export_in_private_mode_is_unavailable_by_default(companion, stores):
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "private words")
    for command in ("/export", "/export confirm"):
        reply = await say(companion, command)
        assert "Export is not available in private mode" in reply.text and not reply.attachments
    assert await all_rows(stores, "SELECT count(*) FROM crossings") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]


async def test_a_crossing_first_names_the_destination_and_the_new_non_private_artifact(make_companion, stores):
    companion = await make_companion(allow_private_export=True)
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "crossing words")
    reply = await say(companion, "/export")
    assert "NEW, NON-PRIVATE artifact" in reply.text
    assert "a file saved in the terminal's current folder" in reply.text
    assert "kept for 30 days" in reply.text and "/export confirm" in reply.text
    assert not reply.attachments
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]


async def test_only_an_explicit_confirmation_creates_a_separate_artifact(make_companion, stores, clock):
    companion = await make_companion(allow_private_export=True)
    await say(companion, f"/private {PASSPHRASE} 1h")
    await say(companion, "crossing words")
    assert "no crossing waiting" in (await say(companion, "/export confirm")).text
    await say(companion, "/export")
    reply = await say(companion, "/export confirm")
    assert reply.text.startswith("Created non-private artifact #1")
    assert "You: crossing words" in reply.attachments[0].data.decode()
    artifact = await all_rows(stores, "SELECT kind, expires_at - created_at FROM artifacts")
    assert artifact == [("crossing", 30 * 86400.0)]
    # The interval is never relabelled: still private, and still expires with its segment.
    assert await engines.rows_saying(stores, "SELECT DISTINCT mode FROM messages WHERE {saying}", "crossing words") == [
        ("private",)
    ]
    clock.advance(3601)
    await companion.sweep()
    assert await all_rows(stores, "SELECT count(*) FROM messages WHERE text = 'crossing words'") == [(0,)]
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(1,)]  # its own retention


async def test_a_confirmation_after_five_minutes_creates_nothing(make_companion, stores, clock):
    companion = await make_companion(allow_private_export=True, private_idle_seconds=None)
    await say(companion, f"/private {PASSPHRASE}")
    await say(companion, "/export")
    clock.advance(301)
    assert "no crossing waiting" in (await say(companion, "/export confirm")).text
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]


async def test_artifacts_are_deleted_at_their_own_retention(make_companion, stores, clock):
    companion = await make_companion(allow_private_export=True, artifact_retention_seconds=86400.0)
    await say(companion, f"/private {PASSPHRASE} never")
    await say(companion, "/export")
    await say(companion, "/export confirm")
    clock.advance(86401)
    await companion.sweep()
    assert await all_rows(stores, "SELECT count(*) FROM artifacts") == [(0,)]
