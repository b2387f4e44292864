"""The webhook inbox's reader on a shared database (adapters/telegram/webhook.py `InboxReader`): a chat this
process is not known to hold has one update taken at a time, until the core's claim is decided; an update whose
conversation another process holds is left, and taken again once this process might hold it; the chat of an
update is read from its JSON when it is stored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from adapters.telegram.webhook import InboxReader, StoredUpdate, WebhookSetup, chat_of


@dataclass(frozen=True)
class Row:
    update_id: int
    body: str
    chat_id: str | None


class Inbox:
    """The rows stored, as the port gives them (`skip` honoured), by update id."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.done: list[int] = []

    async def put(self, platform: str, update_id: int, body: str, chat_id: str | None = None) -> bool:
        self.rows.append(Row(update_id, body, chat_id))
        return True

    async def take(self, platform: str, limit: int, skip: Collection[int] = ()) -> Sequence[StoredUpdate]:
        return [row for row in self.rows if row.update_id not in skip and row.update_id not in self.done][:limit]

    async def done(self, platform: str, update_id: int) -> None:
        self.done.append(update_id)

    async def depth(self, platform: str) -> int:
        return len(self.rows) - len(self.done)

    async def tidy(self) -> None:
        return None

    def arrivals(self) -> None:
        return None  # alone: woken by its own puts


async def no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


def reader_of(inbox: Inbox, *, shared: bool) -> InboxReader:
    setup = WebhookSetup("https://h.example/hook", "s", inbox, shared=shared)
    return InboxReader(setup, sleep=no_sleep, backoff=0.01, repoll_interval=0.01)


async def run_until(reader: InboxReader, begun: list[int], count: int) -> None:
    """Run the reader until `count` updates were begun (or a while passed), then stop it."""

    async def begin(row: StoredUpdate) -> None:
        begun.append(row.update_id)

    closing = False
    task = asyncio.create_task(reader.run(begin, closing=lambda: closing))
    for _ in range(50):
        if len(begun) >= count:
            break
        await asyncio.sleep(0.01)
    closing = True
    await asyncio.wait_for(task, 5)


ROWS = [Row(1, "{}", "10"), Row(2, "{}", "10"), Row(3, "{}", "20"), Row(4, "{}", "10")]


async def test_a_chat_not_known_held_has_one_update_taken_until_its_claim_is_decided() -> None:
    inbox = Inbox(list(ROWS))
    reader = reader_of(inbox, shared=True)
    begun: list[int] = []
    await run_until(reader, begun, 3)
    assert begun == [1, 3]  # chat 10's next ones wait for its first one's outcome
    await reader.settled(1)  # answered here: the chat is this process's, its updates are taken as they come
    await run_until(reader, begun, 4)
    assert begun == [1, 3, 2, 4]


async def test_an_update_left_for_the_process_holding_its_chat_is_taken_again_later() -> None:
    inbox = Inbox(list(ROWS))
    reader = reader_of(inbox, shared=True)
    begun: list[int] = []
    await run_until(reader, begun, 2)
    assert begun == [1, 3]
    reader.left(1)  # another process holds chat 10: not in hand here any more, nor its chat's turn
    await run_until(reader, begun, 3)
    assert begun[2] == 1  # taken again (the store leaves it out while another process holds its chat)


async def test_alone_every_stored_update_is_taken_in_order() -> None:
    inbox = Inbox(list(ROWS))
    begun: list[int] = []
    await run_until(reader_of(inbox, shared=False), begun, 4)
    assert begun == [1, 2, 3, 4]


def test_the_chat_of_an_update_is_read_from_its_json() -> None:
    message = {"message_id": 1, "chat": {"id": -100123, "type": "supergroup"}, "text": "hi"}
    assert chat_of(json.dumps({"update_id": 1, "message": message})) == "-100123"
    assert chat_of(json.dumps({"update_id": 2, "edited_message": {**message, "chat": {"id": 7}}})) == "7"
    assert chat_of(json.dumps({"update_id": 3, "callback_query": {"id": "q", "message": message}})) == "-100123"
    assert chat_of(json.dumps({"update_id": 4, "callback_query": {"id": "q"}})) is None
    assert chat_of(json.dumps({"update_id": 5, "message": {"chat": {"id": True}}})) is None
    assert chat_of("not json") is None
