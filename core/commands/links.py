"""Linked accounts: `/link` (a one-time code, and using it), `/whoami` and `/unlink PLATFORM`.

A code is 8 digits, valid 10 minutes, single use, kept only as a slow hash; wrong codes lock
linking like wrong passphrases lock private mode (the valve's lockout, its own attempt log).
No answer quotes a code someone sent, and nothing here logs one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from core.commands.call import CommandCall
from core.ports.store.attempts import AttemptLog
from core.privacy.lockout import Lockout
from core.privacy.secrets import PassphraseHash, hash_passphrase
from core.values.durations import describe_seconds
from core.values.errors import LinkConflict, PrivateWriteRefused
from core.values.model import Reply
from core.values.names import PLATFORM_NAMES, describe_account

log = logging.getLogger(__name__)

CODE_DIGITS = 8
CODE_SECONDS = 10 * 60.0

ONLY_DIRECT = (
    "Linking works only in a one-to-one chat with me, never in a group: a code posted here could be "
    "used by anyone who read it. {deleted}Send /link in a direct message instead. Nothing changed."
)
PRIVATE_REFUSED = (
    "I can't {what} accounts while a conversation of yours is in private mode: which memory a chat "
    "reads would change under it. Send /normal there first. Nothing changed."
)


def new_code() -> str:
    return "".join(str(secrets.randbelow(10)) for _ in range(CODE_DIGITS))


async def _accounts_text(call: CommandCall, person_id: int) -> str:
    accounts = await call.services.links.accounts_of(person_id)
    listed = "\n".join(f"- {describe_account(a)}" for a in accounts)
    return f"You are one person across these accounts; they share memory, goals and follow-ups:\n{listed}"


async def link_command(call: CommandCall) -> Reply:
    """`/link`: a new code, and the accounts already linked; `/link CODE`: join this account
    to the person whose code it is."""
    if not call.turn.conversation.is_direct:
        deleted = "I deleted your message where I could. " if call.args else ""
        return Reply(ONLY_DIRECT.format(deleted=deleted))
    if call.args:
        return await _redeem(call, "".join(call.args.split()))
    return await _issue(call)


async def _issue(call: CommandCall) -> Reply:
    services = call.services
    account = call.turn.account
    code = new_code()
    code_hash = await asyncio.to_thread(hash_passphrase, code)
    now = services.clock.now()
    await services.links.save_link_code(account.id, code_hash, now, now + CODE_SECONDS)
    log.info("link code issued for account %s", account.id)
    listed = await _accounts_text(call, account.person_id)
    return Reply(
        f"Your link code: {code}\nSend /link {code} to me from your other account, in a direct message, "
        f"within {describe_seconds(CODE_SECONDS)}. It works once. Linked accounts share memory, goals, "
        "follow-ups and nudges; private mode always stays in the one chat where you turn it on.\n\n" + listed
    )


async def _redeem(call: CommandCall, code: str) -> Reply:
    services = call.services
    links = services.links
    account = call.turn.account
    now = services.clock.now()
    lockout = _lockout(services.link_attempts)
    locked, attempts = await lockout.refusal(account.id, now)
    if locked is not None:
        return Reply(locked)
    match = None
    for pending in await links.pending_link_codes(now):
        if pending.account_id != account.id and await asyncio.to_thread(_matches, pending.code_hash, code):
            match = pending
            break
    if match is None:
        line, tries = await lockout.failed(account.id, now, attempts)
        log.info("link refused for account %s (attempt %d)", account.id, tries)
        return Reply(line)
    try:
        person = await links.redeem_link_code(match.id, account.id, now)
    except PrivateWriteRefused:
        return Reply(PRIVATE_REFUSED.format(what="link"))
    except LinkConflict as exc:
        shared = ", ".join(PLATFORM_NAMES.get(p, p) for p in exc.platforms)
        return Reply(
            f"Both already have an account on {shared}; a person links one account per platform. "
            "/unlink PLATFORM on one of them first. Nothing changed."
        )
    if person is None:
        return Reply("That code expired or was used a moment ago. Send /link on the other account for a new one.")
    await lockout.succeeded(account.id)
    services.accounts_changed()
    log.info("account %s linked to person %s", account.id, person)
    return Reply("Linked. " + await _accounts_text(call, person))


def _matches(code_hash: str, code: str) -> bool:
    try:
        return PassphraseHash.parse(code_hash).verify(code)
    except ValueError:
        return False


async def whoami_command(call: CommandCall) -> Reply:
    """`/whoami`: the accounts of this person (in a direct chat only: a group would learn their ids)."""
    if not call.turn.conversation.is_direct:
        return Reply("I list your accounts only in a one-to-one chat with me. Nothing changed.")
    return Reply(await _accounts_text(call, call.turn.account.person_id))


async def unlink_command(call: CommandCall) -> Reply:
    """`/unlink PLATFORM`: separate that account into a new person with no memory."""
    platform = call.args.strip().lower()
    if platform not in PLATFORM_NAMES:
        return Reply("Usage: /unlink telegram|discord|terminal. Nothing changed.")
    services = call.services
    try:
        separated = await services.links.unlink_account(call.turn.account.person_id, platform, services.clock.now())
    except PrivateWriteRefused:
        return Reply(PRIVATE_REFUSED.format(what="unlink"))
    if separated is None:
        return Reply(f"No other account of yours is on {PLATFORM_NAMES[platform]}: nothing to unlink. Nothing changed.")
    services.accounts_changed()
    log.info("account %s unlinked into person %s", separated.id, separated.person_id)
    return Reply(
        f"Unlinked {describe_account(separated)}: it starts as a new person, with no memory of yours; "
        "its own conversations stay with it."
    )


def _lockout(attempts: AttemptLog) -> Lockout:
    """Wrong link codes lock linking as wrong passphrases lock private mode: one policy, its own log."""
    return Lockout(
        "Linking",
        "linking",
        "code",
        "That code is not right, or it expired or was used.",
        attempts,
        tail=" Nothing changed.",
    )
