"""The lifecycle matrix (issue 21): `companion run`, a real subprocess on the fake Telegram or Discord
or serving the web chat, stopped (SIGTERM) or killed (SIGKILL) at each step of a turn, in a DM and in
a group, then started again: every message is answered exactly once. The steps: a burst held (stored,
waiting for the rest of the burst), the model answering (within the stop grace, or past it), the reply
written but refused by the platform (502) or hung on, and (SIGKILL only) the platform having taken the
reply while its answer has not reached us. Each platform runs the cells it has (issue 30): the web
chat is one direct chat, and its send is a publish to the pages open in the gateway's process, which
nothing outside can refuse, hold or take; so it runs the burst and model steps, in its DM, with no
platform fault.

Run with the defaults as shipped: COMPANION_BURST_SECONDS is not touched, and neither is
COMPANION_STOP_GRACE, except in the cells that must wait the whole grace out (the model or the
platform slower than it): one of each of those (Telegram, a DM) waits the shipped 25 s; the others
run the same flow with a 3 s grace, since what they prove does not depend on its length and the
suite must stay quick. The wait for Discord's guilds after READY is the other wire tests' short one
(tests/helpers/proc.py): it is over before "gateway running", before any step of a turn.
Two cells also run on PostgreSQL (COMPANION_DATABASE_URL): a kill while the model answers (the
cut-off turn answered once by the restart) and a kill while the platform refuses the reply (the
pending delivery sent once by the restart); the matrix is about the gateway, not the engine, so
the rest stay on SQLite alone.
Telegram's at-least-once window (PRIVACY.md "Deliveries are at least once on Telegram") is the one
documented exception: a kill between Telegram taking a reply and our mark sends it again."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_discord import FakeDiscordServer
from tests.helpers.fake_openai import FakeOpenAIServer
from tests.helpers.fake_telegram import FakeTelegramServer
from tests.helpers.platforms import Fault, Where, WirePlatform
from tests.helpers.platforms.discord import DiscordWire
from tests.helpers.platforms.telegram import TelegramWire
from tests.helpers.platforms.web import WebWire
from tests.helpers.ports import free_port
from tests.helpers.proc import companion_env
from tests.helpers.running import Running
from tests.helpers.wire_platforms import rows, shipped

pytestmark = pytest.mark.wire

MODEL_SECONDS = 4.0  # the model of the report: a stop lands in the middle of its answer
FAULTS: dict[str, Fault] = {"refused": "refuse", "hangs": "hang", "taken": "take"}
# What each stop leaves behind at each step, before the restart.
LEFT = {
    (signal.SIGTERM, "burst"): "answered",  # the stop answers a held burst now, and sends it
    (signal.SIGTERM, "model"): "answered",  # the turn finishes within the grace, and is sent
    (signal.SIGTERM, "model-past-grace"): "open turn",  # cut off when the grace runs out
    (signal.SIGTERM, "refused"): "pending delivery",  # the bounded flush gives up; the row waits
    (signal.SIGTERM, "hangs"): "pending delivery",
    (signal.SIGKILL, "burst"): "open turn",  # stored; the next start answers it
    (signal.SIGKILL, "model"): "open turn",
    (signal.SIGKILL, "refused"): "pending delivery",
    (signal.SIGKILL, "hangs"): "pending delivery",
    (signal.SIGKILL, "taken"): "taken, not marked",
}
# These wait the whole stop grace out, for the model or for the platform.
WAITS_OUT_THE_GRACE = {(signal.SIGTERM, "model-past-grace"), (signal.SIGTERM, "refused"), (signal.SIGTERM, "hangs")}
SHORT_GRACE = "3"  # for those cells but the one of each that waits the shipped grace (see above)


def _grace(platform: str, how: signal.Signals, step: str, where: str) -> str:
    if (how, step) in WAITS_OUT_THE_GRACE and (platform, where) != ("telegram", "dm"):
        return SHORT_GRACE
    return shipped("stop_grace")


# The cells that run on PostgreSQL too (see above).
ON_POSTGRES = {("telegram", signal.SIGKILL, "model", "dm"), ("telegram", signal.SIGKILL, "refused", "dm")}

WIRES = {"telegram": TelegramWire, "discord": DiscordWire, "web": WebWire}  # each with its `wheres` and `faults`

CELLS = [
    pytest.param(
        platform,
        how,
        step,
        where,
        engine,
        id=f"{platform}-{how.name}-{step}-{where}" + ("-postgres" if engine == "postgres" else ""),
        # The shipped grace waited out: `-m "not slow"` leaves these three out.
        marks=[pytest.mark.slow]
        if _grace(platform, how, step, where) != SHORT_GRACE and (how, step) in WAITS_OUT_THE_GRACE
        else [],
    )
    for platform, wire in WIRES.items()
    for (how, step) in LEFT
    for where in wire.wheres
    if step not in FAULTS or FAULTS[step] in wire.faults
    for engine in ("sqlite", "postgres")
    if engine == "sqlite" or (platform, how, step, where) in ON_POSTGRES
]


@pytest.fixture
def model() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer.run_in_thread() as server:
        server.responder = answer
        yield server


@pytest.fixture
def platform(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WirePlatform]:
    """The platform of the cell (parametrised indirectly), one fake server for both processes."""
    if request.param == "telegram":
        with FakeTelegramServer.run_in_thread() as telegram:
            yield TelegramWire(telegram)
    elif request.param == "discord":
        with FakeDiscordServer.run_in_thread() as discord_server:
            yield DiscordWire(discord_server)
    else:
        web = WebWire(tmp_path)
        try:
            yield web
        finally:
            web.close()


def answer(body: dict) -> str:
    """The model names what it answers, so a copy can be told from another reply."""
    said = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return f"answer to {said}"


def lifecycle_env(
    tmp_path: Path, model: FakeOpenAIServer, *wires: WirePlatform, grace: str | None = None, url: str | None = None
) -> dict[str, str]:
    """`url`: the PostgreSQL database to run on (COMPANION_DATABASE_URL) instead of the SQLite file."""
    settings: dict[str, str] = {
        "COMPANION_LLM_BASE_URL": model.base_url,
        "COMPANION_ALLOWED_USERS": ",".join(w.account for w in wires if w.account is not None),
        "COMPANION_LOG_LEVEL": "INFO",
        # companion_env shortens the burst window for the other wire tests; these run it as shipped,
        # since the window is one of the steps a stop can land in.
        "COMPANION_BURST_SECONDS": shipped("burst_seconds"),
        # On, as shipped (companion_env turns it off), on a free port: the fixed default would collide with
        # another gateway on this machine. A web cell's own settings give its port.
        "COMPANION_HTTP_PORT": str(free_port()),
    }
    if grace is not None:
        settings["COMPANION_STOP_GRACE"] = grace
    if url is not None:
        settings["COMPANION_DATABASE_URL"] = url
    for w in wires:
        settings.update(w.settings())
    return companion_env(tmp_path, **settings)


def open_turns(db: Path | str) -> int:
    return rows(db, "SELECT count(*) FROM messages WHERE turn = 'open'")[0][0]


def settled(db: Path | str) -> bool:
    """No turn open, no delivery pending, and a reply written."""
    return rows(
        db,
        "SELECT (SELECT count(*) FROM messages WHERE turn = 'open')"
        " + (SELECT count(*) FROM deliveries WHERE status <> 'sent')"
        " = 0 AND EXISTS (SELECT 1 FROM messages WHERE role = 'assistant')",
    ) == [(1,)]


@pytest.mark.parametrize(("platform", "how", "step", "where", "engine"), CELLS, indirect=["platform"])
def test_every_message_is_answered_exactly_once_across_a_stop_at_any_step_of_its_turn(
    platform: WirePlatform,
    model: FakeOpenAIServer,
    tmp_path: Path,
    how: signal.Signals,
    step: str,
    where: Where,
    engine: str,
    request: pytest.FixtureRequest,
) -> None:
    # The database the rows below are read from: the SQLite file, or the PostgreSQL database's URL.
    url = str(request.getfixturevalue("postgres_url")) if engine == "postgres" else None
    db: Path | str = url or tmp_path / "companion.db"
    grace = _grace(platform.name, how, step, where)
    env = lifecycle_env(tmp_path, model, platform, grace=grace, url=url)
    said = ["first of two", "second of two"] if step == "burst" else ["hello"]
    with Running(env) as gateway:
        gateway.wait_running()
        if step.startswith("model"):
            model.reply_delay(MODEL_SECONDS if step == "model" else float(grace) + 30.0)
        elif step in FAULTS:
            platform.fault(FAULTS[step])
        for text in said:
            platform.say(where, text)
        if step == "burst":
            gateway.wait_for(lambda: open_turns(db) == len(said), "the burst stored")
            assert not model.requests, "the burst window passed before the signal: this cell proves nothing"
        elif step.startswith("model"):
            gateway.wait_for(lambda: len(model.requests) == 1, "the model asked")
        else:
            gateway.wait_for(platform.faulted, f"a send meeting the fault ({FAULTS[step]})")
        code, stderr = gateway.end(how, timeout=float(shipped("stop_grace")) + 30)
    if how == signal.SIGTERM:
        assert code == 0, stderr

    # What the stop left, step by step.
    left = LEFT[(how, step)]
    replies = platform.replies(where)
    if left == "answered":
        assert rows(db, "SELECT kind, status FROM deliveries") == [("reply", "sent")]
        assert len(replies) == 1
    elif left == "open turn":
        assert rows(db, "SELECT count(*) FROM messages WHERE role = 'assistant'") == [(0,)]
        assert open_turns(db) == len(said)
        assert replies == []
    else:
        assert rows(db, "SELECT kind, status FROM deliveries") == [("reply", "pending")]
        assert len(replies) == (1 if left == "taken, not marked" else 0)

    platform.release()
    asked = len(model.requests)
    with Running(env) as gateway:
        gateway.wait_running()
        gateway.wait_for(lambda: settled(db), "every message answered and every delivery sent")
        code, stderr = gateway.end(signal.SIGTERM)
    assert code == 0, stderr
    # An open turn is answered once more; a written reply is only sent, the model never asked again.
    assert len(model.requests) - asked == (1 if left == "open turn" else 0)

    # Every message stored once and answered; one reply, delivered.
    assert rows(db, "SELECT turn FROM messages WHERE role = 'user'") == [("done",)] * len(said)
    ((reply,),) = rows(db, "SELECT text FROM messages WHERE role = 'assistant'")
    assert reply.startswith("answer to ") and reply.endswith(said[-1])
    assert rows(db, "SELECT kind, status FROM deliveries") == [("reply", "sent")]
    if url is not None:
        assert not (tmp_path / "companion.db").exists()  # it ran on PostgreSQL alone
    if left == "taken, not marked" and platform.name == "telegram":
        # The documented at-least-once window: the Bot API has no idempotency key.
        assert platform.replies(where) == [reply, reply]
    else:
        assert platform.replies(where) == [reply]
    if left == "taken, not marked" and isinstance(platform, DiscordWire):
        # Sent again after the restart, with the same nonce: Discord returned the first message.
        first, again = platform.posts(where)
        assert first == again
