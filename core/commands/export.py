"""Export and boundary crossings (seed 001).

Normal mode exports the masked normal timeline. Private mode exports nothing by
default; when the operator allows it, a crossing is two steps: the first names the
destination and says the result is a new non-private artifact with its own
retention; only `/export confirm` creates it, as a separate artifact row. The
private segment is never relabelled.
"""

from __future__ import annotations

from core.commands.call import CommandCall
from core.commands.services import CommandServices
from core.values import copy
from core.values.durations import describe_seconds
from core.values.model import Attachment, Confirmation, Conversation, Reply
from core.values.modes import ModeState, PrivateState
from core.values.names import describe_account, speaker

CONFIRM_WINDOW = 5 * 60.0


def destination_for(platform: str) -> str:
    if platform == "terminal":
        return "a file saved in the terminal's current folder"
    return f"a file sent to you in this {platform} chat"


async def export_command(call: CommandCall) -> Reply:
    return await _export(call.services, call.turn.conversation, call.state, call.args)


async def _export(services: CommandServices, conversation: Conversation, state: ModeState, args: str) -> Reply:
    now = services.clock.now()
    stamp = await services.format_time(conversation, now)
    if not isinstance(state, PrivateState):
        lines = [
            f"Companion export: {conversation.platform} conversation, normal mode, {stamp}.",
            "Each private interval appears as one placeholder line.",
            "",
        ]
        if said_by := await _linked_speaker(services, conversation):
            lines.insert(2, said_by)
        header = len(lines)
        async for item in services.export.export_items(conversation.id, visible_segment=None):
            lines.append(
                copy.PLACEHOLDER if item.is_placeholder else f"{speaker(item.role, person='You')}: {item.text}"
            )
        body = "\n".join(lines) + "\n"
        name = f"companion-export-{int(now)}.txt"
        return Reply(
            f"Here is our normal conversation ({len(lines) - header} entries).",
            attachments=[Attachment(name, body.encode("utf-8"))],
        )
    if not services.settings.allow_private_export:
        return Reply(
            "Export is not available in private mode: what is said here does not leave this "
            "private thread. (An operator can allow confirmed crossings with COMPANION_ALLOW_PRIVATE_EXPORT.)"
        )
    segment = state.segment
    retention = services.settings.artifact_retention_seconds
    kept = f"kept for {describe_seconds(retention)}" if retention else "kept until deleted"
    if args.strip().lower() != "confirm":
        destination = destination_for(conversation.platform)
        await services.export.request_crossing(segment.id, destination, now, now + CONFIRM_WINDOW)
        return Reply(
            f"Crossing the boundary: this creates a NEW, NON-PRIVATE artifact, {destination}, holding this "
            f"private conversation. It will not be private: it is {kept}, on its own schedule, and survives "
            "this private interval's expiry and backups. This interval itself stays private. To create it, "
            "send /export confirm within 5 minutes; anything else cancels nothing and creates nothing.",
            confirm=Confirmation("Create the non-private file", "/export confirm"),
        )
    items = await services.export.segment_items(segment.id)
    body = (
        "\n".join(
            [f"Companion crossing artifact (non-private), created {stamp}.", ""]
            + [f"{speaker(i.role, person='You')}: {i.text}" for i in items]
        )
        + "\n"
    )
    name = f"companion-crossing-{int(now)}.txt"
    artifact = await services.export.confirm_crossing(
        segment.id, conversation.id, name, body, now, None if retention is None else now + retention
    )
    if artifact is None:
        return Reply("There is no crossing waiting for confirmation (it lasts 5 minutes). Send /export first.")
    return Reply(
        f"Created non-private artifact #{artifact}, {kept}.", attachments=[Attachment(name, body.encode("utf-8"))]
    )


async def _linked_speaker(services: CommandServices, conversation: Conversation) -> str | None:
    """For a person with linked accounts: which of them "You" is in this file."""
    if conversation.person_id is None or not conversation.is_direct:
        return None
    accounts = await services.links.accounts_of(conversation.person_id)
    here = [a for a in accounts if a.platform == conversation.platform]
    if len(accounts) < 2 or len(here) != 1:
        return None
    others = ", ".join(describe_account(a) for a in accounts if a is not here[0])
    return (
        f"You: {describe_account(here[0])}. Your linked accounts ({others}) share memory, not this conversation;"
        " their conversations are not in this file."
    )
