"""The webhook's route on the HTTP service (adapters/web/webhook.py): the secret checked before anything is read or
stored, the body bounded, the update handed to the store on the core's loop before the 200, a failure to store a 503."""

from __future__ import annotations

import json

from adapters.storage.stores import Stores
from adapters.web.webhook import MAX_BODY_BYTES, SECRET_HEADER, WebhookRoute
from tests.helpers.fakes import FakeClock
from tests.helpers.web import served

SECRET = "s3cret_-token"
UPDATE = json.dumps({"update_id": 41, "message": {"text": "hello"}})


class Sink:
    def __init__(self, fails: bool = False) -> None:
        self.stored: list[tuple[int, str]] = []
        self.fails = fails

    async def __call__(self, update_id: int, body: str) -> bool:
        if self.fails:
            raise OSError("the disk is full")
        self.stored.append((update_id, body))
        return True


async def test_an_update_with_its_secret_is_stored_before_the_200_and_no_session_or_csrf_token_is_asked(
    stores: Stores,
) -> None:
    sink = Sink()
    route = WebhookRoute("/telegram/hook", SECRET, sink)
    async with served(stores, FakeClock(), routes=[route.install]) as web:
        answer = await web.client.post("/telegram/hook", content=UPDATE, headers={SECRET_HEADER: SECRET})
    assert answer.status_code == 200
    assert sink.stored == [(41, UPDATE)]


async def test_a_missing_or_wrong_secret_is_refused_counted_and_nothing_is_stored(stores: Stores) -> None:
    sink = Sink()
    refused: list[int] = []
    route = WebhookRoute("/telegram/hook", SECRET, sink, refused=lambda: refused.append(1))
    async with served(stores, FakeClock(), routes=[route.install]) as web:
        missing = await web.client.post("/telegram/hook", content=UPDATE)
        wrong = await web.client.post("/telegram/hook", content=UPDATE, headers={SECRET_HEADER: SECRET + "x"})
        empty = await web.client.post("/telegram/hook", content=UPDATE, headers={SECRET_HEADER: ""})
    assert (missing.status_code, wrong.status_code, empty.status_code) == (401, 403, 403)
    assert sink.stored == [] and len(refused) == 3


async def test_a_body_too_long_or_not_an_update_is_refused_and_a_store_that_fails_answers_503(stores: Stores) -> None:
    sink = Sink()
    failing = Sink(fails=True)
    routes = [WebhookRoute("/hook", SECRET, sink).install, WebhookRoute("/broken", SECRET, failing).install]
    headers = {SECRET_HEADER: SECRET}
    async with served(stores, FakeClock(), routes=routes) as web:
        long = await web.client.post("/hook", content=b"x" * (MAX_BODY_BYTES + 1), headers=headers)
        not_json = await web.client.post("/hook", content=b"{not json", headers=headers)
        no_id = await web.client.post("/hook", content=b'{"message": {}}', headers=headers)
        not_stored = await web.client.post("/broken", content=UPDATE, headers=headers)
    assert (long.status_code, not_json.status_code, no_id.status_code) == (413, 400, 400)
    assert not_stored.status_code == 503
    assert sink.stored == []
