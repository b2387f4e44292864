"""Memory that serves normal mode: the tools and the operations behind the chat commands.

Every operation here writes or reads lasting memory, so none is offered to a private
turn (tags in PRIVATE_FORBIDDEN), the chat commands refuse in private mode, and the
store refuses the write while the conversation has an open private segment.
"""

from __future__ import annotations

import re
from typing import Any

from core.memory.tools import CURRENT_TIME, Arguments, Tool, ToolContext, ToolRegistry
from core.ports.tools import ToolServers
from core.values.durations import format_moment, parse_when

MAX_ENTRY = 500
_WORD = re.compile(r"\w+", re.UNICODE)


def words_of(text: str) -> tuple[str, ...]:
    """The words of what a person typed, for recall (at most 16): letters and digits only, so no
    query syntax of any engine comes through (the store writes its own from them)."""
    return tuple(_WORD.findall(text)[:16])


def _text(arguments: Arguments, name: str, *, limit: int = MAX_ENTRY) -> str:
    text = _optional_text(arguments, name, limit=limit)
    if text is None:
        raise ValueError(f"'{name}' is required")
    return text


def _optional_text(arguments: Arguments, name: str, *, limit: int = MAX_ENTRY) -> str | None:
    value = arguments.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise ValueError(f"'{name}' must be text")
    value = " ".join(value.split())
    if len(value) > limit:
        raise ValueError(f"'{name}' is longer than {limit} characters")
    return value


def _id(arguments: Arguments, name: str) -> int:
    value = arguments.get(name)
    if isinstance(value, str) and value.strip().lstrip("#").isdigit():
        value = int(value.strip().lstrip("#"))
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"'{name}' must be a positive whole number")
    return value


def _person(context: ToolContext) -> int:
    if context.conversation.person_id is None:
        raise ValueError("memory is personal: use it in a one-to-one chat")
    return context.conversation.person_id


# --- operations (shared by tools and commands) ------------------------------


async def remember(context: ToolContext, arguments: Arguments) -> str:
    text = _text(arguments, "text")
    entry = await context.stores.memory.remember(_person(context), context.conversation.id, text, context.now)
    return f"Remembered (#{entry}): {text}"


async def recall(context: ToolContext, arguments: Arguments) -> str:
    words = words_of(_text(arguments, "query", limit=200))
    if not words:
        raise ValueError("'query' needs at least one word")
    hits = await context.stores.memory.recall(_person(context), words)
    if not hits:
        return "Nothing found."
    return "\n".join(f"- [{hit.source}] {_clip(hit.text)}" for hit in hits)


async def forget(context: ToolContext, arguments: Arguments) -> str:
    person = _person(context)
    if arguments.get("entry_id") is not None:
        entry = _id(arguments, "entry_id")
        removed = await context.stores.memory.forget_pad_entry(person, context.conversation.id, entry)
        return f"Forgot memory #{entry}." if removed else f"There is no memory #{entry}."
    text = _text(arguments, "text", limit=200)
    removed = await context.stores.memory.forget_pad_matching(person, context.conversation.id, text)
    return f"Forgot {removed} memor{'y' if removed == 1 else 'ies'}." if removed else "No memory matched that."


async def forget_note(context: ToolContext, arguments: Arguments) -> str:
    """A daily note (the capture job's) goes, with its place in recall."""
    note = _id(arguments, "note_id")
    removed = await context.stores.memory.forget_note(_person(context), context.conversation.id, note)
    return f"Forgot note #{note}." if removed else f"There is no note #{note}."


async def list_goals(context: ToolContext, arguments: Arguments) -> str:
    goals = await context.stores.memory.goals(_person(context))
    if not goals:
        return "No active goals."
    return "\n".join(
        f"#{g.id} {g.title}" + (f" (by {format_moment(g.due_at, context.timezone)})" if g.due_at else "") for g in goals
    )


async def set_goal(context: ToolContext, arguments: Arguments) -> str:
    title = _text(arguments, "title", limit=200)
    due_text = _optional_text(arguments, "due", limit=40)
    due = parse_when(due_text, context.now, context.timezone) if due_text else None
    goal = await context.stores.memory.add_goal(_person(context), context.conversation.id, title, due, context.now)
    return f"Goal #{goal} set: {title}"


async def update_goal(context: ToolContext, arguments: Arguments) -> str:
    goal = _id(arguments, "goal_id")
    status = _optional_text(arguments, "status", limit=10)
    if status is not None and status not in {"active", "done", "dropped"}:
        raise ValueError("'status' must be active, done or dropped")
    title = _optional_text(arguments, "title", limit=200)
    if status is None and title is None:
        raise ValueError("give a new 'status' or 'title'")
    changed = await context.stores.memory.update_goal(
        _person(context), context.conversation.id, goal, context.now, status=status, title=title
    )
    return f"Goal #{goal} updated." if changed else f"There is no goal #{goal}."


async def schedule_followup(context: ToolContext, arguments: Arguments) -> str:
    text = _text(arguments, "text", limit=300)
    due = parse_when(_text(arguments, "when", limit=40), context.now, context.timezone)
    item = await context.stores.memory.add_followup(
        _person(context), context.conversation.id, "reminder", text, due, context.now
    )
    return f"Follow-up #{item} scheduled for {format_moment(due, context.timezone)}: {text}"


async def watch_event(context: ToolContext, arguments: Arguments) -> str:
    text = _text(arguments, "description", limit=300)
    when = _optional_text(arguments, "when", limit=40)
    due = parse_when(when, context.now, context.timezone) if when else None
    item = await context.stores.memory.add_followup(
        _person(context), context.conversation.id, "watch", text, due, context.now
    )
    return f"Watching for #{item}: {text}"


async def list_followups(context: ToolContext, arguments: Arguments) -> str:
    items = await context.stores.memory.followups(_person(context))
    if not items:
        return "No follow-ups."
    lines = []
    for f in items:
        when = format_moment(f.due_at, context.timezone) if f.due_at else "when it happens"
        paused = {"paused": " (paused)", "missed": " (missed: more than 12 hours late)"}.get(f.status, "")
        lines.append(f"#{f.id} {f.kind} {when}: {f.text}{paused}")
    return "\n".join(lines)


async def pause_followup(context: ToolContext, arguments: Arguments) -> str:
    item = _id(arguments, "followup_id")
    changed = await context.stores.memory.set_followup_status(
        _person(context), context.conversation.id, item, "paused", context.now
    )
    return f"Follow-up #{item} paused." if changed else f"There is no open follow-up #{item}."


async def memory_overview(context: ToolContext, origins: dict[str, str] | None = None) -> str:
    """What `/memory` shows. With `origins` (`pad:ID`, `goal:ID`, `followup:ID` to an account's
    name), each line says which account it came from."""
    person = _person(context)
    pad = await context.stores.pads.normal_pad(person)
    parts = ["What I keep about you (normal memory):"]
    parts += [f"#{e.id} {e.text}" for e in pad] or ["(nothing yet)"]
    goals, followups = await list_goals(context, {}), await list_followups(context, {})
    if origins is not None:
        parts = [_from(line, "pad", origins) for line in parts]
        goals = "\n".join(_from(line, "goal", origins) for line in goals.splitlines())
        followups = "\n".join(_from(line, "followup", origins) for line in followups.splitlines())
    parts += ["", "Goals:", goals, "", "Follow-ups:", followups]
    parts += ["", "/forget N or /forget TEXT removes a memory; /goal drop N; /followup cancel N."]
    return "\n".join(parts)


_NUMBERED = re.compile(r"^#(\d+) ")


def _from(line: str, kind: str, origins: dict[str, str]) -> str:
    match = _NUMBERED.match(line)
    origin = origins.get(f"{kind}:{match.group(1)}") if match else None
    return f"{line} (from {origin})" if origin else line


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_I = {"type": "integer"}
# What the handlers above accept, said in the schema too: a server that constrains a model's call to
# the schema (llama.cpp's grammars) then writes only what a handler takes, and a small model cannot
# write a memory for minutes. The pattern is the plainest part of what parse_when reads.
_WHEN = {
    "type": "string",
    "maxLength": 40,
    "pattern": "^([0-9]{1,6}[smhd]|[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9]{1,2}:[0-9]{2})?|[0-9]{1,2}:[0-9]{2})$",
}


def _string(limit: int) -> dict[str, Any]:
    return {"type": "string", "maxLength": limit}


MEMORY_TOOLS = (
    Tool(
        "remember",
        "Store a lasting fact about the person.",
        _schema({"text": _string(MAX_ENTRY)}, ["text"]),
        frozenset({"memory-write"}),
        remember,
    ),
    Tool(
        "recall",
        "Search earlier conversations, notes and memory.",
        _schema({"query": _string(200)}, ["query"]),
        frozenset({"memory-read"}),
        recall,
    ),
    Tool(
        "forget",
        "Remove a memory by id or matching text.",
        _schema({"entry_id": _I, "text": _string(200)}, []),
        frozenset({"memory-write"}),
        forget,
    ),
    Tool("list_goals", "List the person's active goals.", _schema({}, []), frozenset({"goal"}), list_goals),
    Tool(
        "set_goal",
        "Set a goal; due like 3d or 2026-12-24.",
        _schema({"title": _string(200), "due": _WHEN}, ["title"]),
        frozenset({"goal"}),
        set_goal,
    ),
    Tool(
        "update_goal",
        "Change a goal's status (active/done/dropped) or title.",
        _schema(
            {"goal_id": _I, "status": {"type": "string", "enum": ["active", "done", "dropped"]}, "title": _string(200)},
            ["goal_id"],
        ),
        frozenset({"goal"}),
        update_goal,
    ),
    Tool(
        "schedule_followup",
        "Remind the person later; when like 30m, 2h, 3d, 7:00 or 2026-12-24 18:00 (their time zone).",
        _schema({"text": _string(300), "when": _WHEN}, ["text", "when"]),
        frozenset({"follow-up"}),
        schedule_followup,
    ),
    Tool(
        "watch_event",
        "Remember to ask about an upcoming event.",
        _schema({"description": _string(300), "when": _WHEN}, ["description"]),
        frozenset({"follow-up"}),
        watch_event,
    ),
    Tool("list_followups", "List scheduled follow-ups.", _schema({}, []), frozenset({"follow-up"}), list_followups),
    Tool(
        "pause_followup",
        "Pause a follow-up by id.",
        _schema({"followup_id": _I}, ["followup_id"]),
        frozenset({"follow-up"}),
        pause_followup,
    ),
)


async def cancel_followup(context: ToolContext, arguments: Arguments) -> str:
    item = _id(arguments, "followup_id")
    changed = await context.stores.memory.set_followup_status(
        _person(context), context.conversation.id, item, "cancelled", context.now
    )
    return f"Follow-up #{item} cancelled." if changed else f"There is no open follow-up #{item}."


def _first_word_id(args: str) -> tuple[str, str]:
    head, _, rest = args.strip().partition(" ")
    return head.lower(), rest.strip()


# --- the chat commands, for people whose model cannot call tools: same operations, same checks.
# Each raises ValueError for bad arguments (in words fit for the person; nothing changed) and
# core.values.errors.PrivateWriteRefused when the conversation is private.


async def memory_command(context: ToolContext, args: str) -> str:
    person = context.conversation.person_id
    if person is None or not context.conversation.is_direct:
        return await memory_overview(context)
    # Only the command says whose accounts share it: the model's memory tool never reads platform ids.
    from core.values.names import describe_account

    accounts = await context.stores.origins.accounts_of(person)
    if len(accounts) < 2:
        return await memory_overview(context)
    # Linked: each line says which account it was said from (only here, never to the model).
    origins = {key: describe_account(a) for key, a in (await context.stores.origins.memory_origins(person)).items()}
    overview = await memory_overview(context, origins)
    return f"{overview}\n\nShared by your linked accounts: {', '.join(describe_account(a) for a in accounts)}."


async def remember_command(context: ToolContext, args: str) -> str:
    return await remember(context, {"text": args})


async def recall_command(context: ToolContext, args: str) -> str:
    return await recall(context, {"query": args})


async def forget_command(context: ToolContext, args: str) -> str:
    if not args:
        raise ValueError("Usage: /forget N (a memory's number from /memory) or /forget TEXT")
    verb, rest = _first_word_id(args)
    if verb == "note" and rest.lstrip("#").isdigit():  # a daily note (the web's memory page lists them)
        return await forget_note(context, {"note_id": rest})
    key = "entry_id" if args.lstrip("#").isdigit() else "text"
    return await forget(context, {key: args})


async def goals_command(context: ToolContext, args: str) -> str:
    return await list_goals(context, {})


_GOAL_VERBS = {"done": "done", "drop": "dropped", "dropped": "dropped", "reopen": "active"}


async def goal_command(context: ToolContext, args: str) -> str:
    verb, rest = _first_word_id(args)
    if verb in _GOAL_VERBS and rest:
        return await update_goal(context, {"goal_id": rest, "status": _GOAL_VERBS[verb]})
    if not args:
        raise ValueError("Usage: /goal TITLE, /goal done N or /goal drop N")
    return await set_goal(context, {"title": args})


async def followups_command(context: ToolContext, args: str) -> str:
    return await list_followups(context, {})


async def followup_command(context: ToolContext, args: str) -> str:
    verb, rest = _first_word_id(args)
    if verb == "cancel" and rest:
        return await cancel_followup(context, {"followup_id": rest})
    if verb == "pause" and rest:
        return await pause_followup(context, {"followup_id": rest})
    when, _, text = args.partition(" ")
    if when.lower() == "in":
        amount, _, text = text.partition(" ")
        when = f"in {amount}"
    if not text.strip():
        raise ValueError(
            "Usage: /followup WHEN TEXT (WHEN like 30m, 2h, 3d, 7:00 or 2026-12-24), /followup pause N or /followup cancel N"
        )
    return await schedule_followup(context, {"text": text, "when": when})


async def watch_command(context: ToolContext, args: str) -> str:
    return await watch_event(context, {"description": args})


def default_tools(servers: ToolServers | None = None) -> ToolRegistry:
    """Every tool: the clock, the memory tools and what `servers` serve (a turn is offered the subset
    its mode allows)."""
    return ToolRegistry([CURRENT_TIME, *MEMORY_TOOLS], servers)
