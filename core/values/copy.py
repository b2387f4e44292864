"""Every fixed sentence the companion says or sends to a model, in one place.

The placeholder and the transition instruction are hand-written constants on
purpose (seed 000): text generated from a private interval would be a leakage
channel, so nothing here is ever derived from conversation content.
"""

# The one line that stands for a whole private interval in the normal-mode view.
PLACEHOLDER = (
    "[There was an earlier private interval here. It need not be repeated or referred to; "
    "everyday conversation has resumed.]"
)

DEFAULT_PERSONA = (
    "You are a warm, attentive personal companion. You speak naturally and briefly, "
    "remember what the person shares in ordinary conversation, and never pretend to be human."
)

# Sent as the whole input of the transition request: no conversation content at all.
TRANSITION_INSTRUCTION = (
    "The person has just left a private conversation and returned to ordinary conversation. "
    "Write one or two short, warm sentences that show care, gently offer them a glass of water, "
    "and welcome them back to everyday conversation. Mention no specifics of anything discussed; "
    "you do not know them. Vary your wording. Reply with the sentences only."
)
TRANSITION_FALLBACK = "Welcome back. Take a breath, maybe a glass of water; I'm here for whatever comes next."
# What /help says of the line on leaving private mode.
TRANSITION_CONSTANT_NOTE = "Leaving private mode, I say one fixed line; it holds nothing of what was said."
TRANSITION_GENERATED_NOTE = (
    "Leaving private mode, I say a short line the model words from a fixed instruction that holds "
    "nothing of what was said."
)

# The private system line: explains the mode so the companion does not offer what it cannot do.
# It is courtesy, not the wall: the tools are already absent from the request.
PRIVATE_SYSTEM_LINE = (
    "This conversation is in private mode. You may use what you already know about the person, "
    "but nothing said here will be remembered later, recalled, turned into goals, reminders or "
    "follow-ups, or delivered anywhere else; you have no tools for that, so do not offer it."
)

MEMORY_HEADER = "What you know about the person (long-term memory):"
PRIVATE_MEMORY_HEADER = "Private-mode notes (only ever shown in private mode):"
SUMMARY_HEADER = "Summary of the earlier conversation:"

SUMMARY_INSTRUCTION = (
    "Fold the conversation below into the running summary. Keep names, facts, plans and the "
    "emotional thread; drop small talk. Answer in this form:\n"
    "SUMMARY:\n<the new summary, at most 12 sentences>\n"
    "FACTS:\n- <a stable fact about the person worth remembering long-term, one per line, or none>"
)

# Ends a message shortened to fit the model's context (the stored message stays whole).
SHORTENED_MARKER = "[... the rest of this long message was left out to fit]"

# What the person reads when the model call fails; each says what went wrong, none loses the message.
PROVIDER_FAILED = (
    "Sorry, I couldn't reach my language model just now (or it took too long to answer). "
    "Your message is saved; please try again in a moment."
)
PROVIDER_KEY_REFUSED = (
    "Sorry, the model server refused the API key, so I couldn't answer. Your message is saved; "
    "whoever runs me should check the COMPANION_LLM_API_KEY setting."
)
PROVIDER_TOO_LONG = (
    "Sorry, that was too long for my language model to take in. Your message is saved; a shorter message may work."
)
PROVIDER_SERVER_FAILED = (
    "Sorry, my language model's server failed to answer just now. Your message is saved; please try again in a moment."
)
# The model answered only with tool syntax its server did not parse, also when asked again without tools.
MODEL_ANSWER_UNUSABLE = (
    "Sorry, my language model answered with a garbled tool call instead of words, so I have no answer "
    "this time. Your message is saved; please try again, perhaps in other words."
)

# Said by /help while the model server takes no tools (COMPANION_LLM_TOOLS=false, or it refused them).
TOOLS_OFF_NOTE = (
    "My model cannot use tools here, so I keep only what you ask me to: memory, goals and "
    "reminders work through /remember, /recall, /forget, /goal and /followup."
)

# Appended to a reply the model stopped early because it reached its token limit.
CUT_OFF_MARKER = " (cut off)"

# Shown under a reply being written while the model uses a tool (never the tool or its arguments).
STREAM_WORKING = "(one moment…)"

# What a message of a reply cut off mid-stream by a restart (or a crash) becomes when no answer
# took it over: the partial words are replaced, not kept.
STREAM_CUT_OFF = "(This answer was cut off by a restart.)"

# What the messages of a private answer become when its interval ends (expiry, /normal, /forget
# private, the idle timeout, a restart) before the answer was finally sent: its words are replaced
# by this line, once, and nothing more of it is posted or edited.
INTERVAL_ENDED_SHOWN = "(Private mode ended before this answer was finished; its words are not shown any more.)"

RESTART_ENDED_PRIVATE = "I restarted, so private mode ended. You are in normal mode now."

# A message sent before a restart ended private mode, arriving only now (a redelivery, or
# one sent while the companion was down): it belongs to the interval and is not read.
RESTART_KEPT_PRIVATE = (
    "Private mode ended when I restarted. Your message was sent before that, so I kept it "
    "private with the rest of that interval and did not read it. Send it again to talk about "
    "it in normal mode, or use /private to go back to private mode first."
)

# The mode could not be read: the message was neither stored nor shown to the model.
MODE_UNREADABLE = (
    "Sorry, I couldn't check which mode this conversation is in just now, so I didn't read or "
    "keep your message. Please send it again in a moment."
)

# A turn that a restart cut off long ago (more than ten minutes): asked again, not guessed at.
MISSED_IN_RESTART = "I was restarted and missed this; could you say it again?"

HANDLER_FAILED = "Sorry, something went wrong on my side. Please try again in a moment."

DELETE_SECRET_NOTE = "Please delete your message that carried the passphrase; I could not delete it myself here."  # noqa: S105 - a sentence about a passphrase, not one

NOT_ALLOWED = "Hello! I'm a personal companion and I only talk with the people I'm set up for. Sorry!"

# /tools in private mode, when tools served by other programs are configured.
SERVED_TOOLS_IN_PRIVATE = (
    "In private mode I use a tool of another program only when the owner named it for private mode; "
    "that program sees what I send it, and I keep nothing of the call past this interval."
)
# One sentence per mode, used by /help and /mode alike, so the copy never drifts.
NORMAL_MODE_MEANS = (
    "Normal mode: I keep a rolling summary of our conversation, daily notes and long-term memory "
    "about you, and use them later; /memory shows what I keep and /forget removes it."
)
PRIVATE_MODE_MEANS = (
    "Private mode is incognito, not a blank slate: I still read what I already know about you, "
    "but nothing said here is added to memory, notes, recall, goals, follow-ups or analytics, "
    "nothing is delivered elsewhere, normal mode sees one placeholder line in its place, "
    "and it is deleted when its expiry comes."
)

CAPTURE_INSTRUCTION = (
    "Below are messages from today's ordinary conversation with the person. Write a short daily "
    "note of what mattered, and list stable facts about the person worth keeping long-term. "
    "Answer in this form:\nNOTE:\n<two to five sentences>\nFACTS:\n- <one fact per line, or none>"
)

PRIVATE_REFUSES = (
    "Private mode writes nothing that outlives it, so /{command} is not available here. /normal leaves private mode."
)

# A tool's lasting write the store refused because the conversation turned private: the model
# reads this, so it tells the person the truth rather than "there is no goal #N".
TOOL_PRIVATE_REFUSED = (
    "refused: this conversation is in private mode, which writes nothing that outlives it; nothing changed"
)


# Mirrors (issue 13). Never a word of any message: ids, platforms and kinds only.
MIRROR_HELLO = "Mirroring {source} here. /unmirror in the source stops it."
MIRROR_DISABLED = (
    "I stopped mirroring to {target}: it refused my messages for good ({reason}), for example because "
    "the bot was removed or blocked there, or the chat does not exist. /mirror shows your mirrors."
)
MIRROR_MEANS = (
    "What is mirrored: each normal exchange (your message and my answer). Never mirrored: commands, "
    "passphrases, exports, the line I say when you leave private mode, refusals, or anything of private mode."
)


# --- reminders and nudges ---------------------------------------------------------------------

REMINDER = "Reminder: {text}"
REMINDER_LATE = " (late: due at {time})"
# What the model answers when now is not the moment: recorded as a silence, never sent.
NUDGE_SILENCE = "SILENCE"
NUDGE_INSTRUCTION = (
    "You may send the person one short, unprompted message now, because {why}. Write it as you "
    "would in chat: one or two warm sentences, one question at most, nothing about any private "
    "interval. If a message now would be unwelcome, pointless or repetitive, answer exactly "
    f"{NUDGE_SILENCE} and nothing else; staying silent is a good answer."
)
NUDGE_WHY = {
    "watch": "they mentioned this event, which should have happened by now: {text}",
    "goal": "they set this goal and it has been a while: {text}",
    "checkin": "you have not heard from them for a few days",
}
# The offline responder's nudge: fixed and honest about what it is.
OFFLINE_NUDGE = (
    "Checking in: how are things going? (This is the built-in offline responder, not a language model, "
    "so this check-in is a fixed line.)"
)
NUDGES_MEAN = (
    "Reminders you ask for come at their time, also in quiet hours. Nudges (asking how an event went, "
    "a goal, a check-in after a long silence) keep to your daily budget, your quiet hours and a "
    "cooldown, stop after {backoff} go unanswered, and never go to a conversation in private mode."
)


# --- media (photos, voice notes, stickers ...): constant lines, never words of the message ----------

# Said before the answer to a caption when the model cannot see images (COMPANION_LLM_VISION unset).
IMAGES_NOT_READ = "(I can't see images with the model I run on, so I only read your caption.)"
IMAGE_NOT_READ_ALONE = (
    "I can't see images with the model I run on, so I couldn't look at that. Tell me about it in words?"
)
# Told to the model in place of an image its server refused: it can then say so honestly.
IMAGE_NOT_SENT_TO_MODEL = "(The person attached an image, but this model cannot see images; say so if it matters.)"
VOICE_NOT_SET_UP = (
    "I can't listen to voice notes or audio here: speech-to-text is not set up. Could you type it instead?"
)
VOICE_FAILED = "Sorry, I couldn't transcribe that voice note just now. Could you try again, or type it?"
VOICE_NO_WORDS = "I couldn't make out any words in that recording. Could you try again, or type it?"
MEDIA_TOO_LARGE = "That file is too large for me to fetch (20 MB at most)."
MEDIA_FETCH_FAILED = "Sorry, I couldn't fetch that file just now. Could you send it again?"
# What each kind the companion cannot read gets: short and honest.
MEDIA_NOT_READ = {
    "sticker": "I can't see stickers, but I'm here. What's on your mind?",
    "document": "I can't open documents or files; I read text{also}. Could you paste the part that matters?",
    "location": "I can't use locations; I read text{also}.",
    "video": "I can't watch videos; I read text{also}.",
    "video_note": "I can't watch video messages; I read text{also}.",
    "animation": "I can't watch GIFs or animations; I read text{also}.",
    "contact": "I can't use shared contacts; I read text{also}.",
    "poll": "I can't take part in polls; I read text{also}.",
}
MEDIA_NOT_READ_OTHER = "I can't read that kind of message; I read text{also}."
# `{also}` in the lines above: what else this companion reads, as configured.
ALSO_IMAGES_AND_VOICE = ", photos and voice notes"
ALSO_IMAGES = " and photos"
ALSO_VOICE = " and voice notes"

# --- quotes, forwards, speakers, edits (issue 15) ---------------------------------------------
# Lines put before a message's text in what is stored and sent to the model. None of them is
# derived from private content: a quoted private message stands as the PLACEHOLDER itself.
QUOTE_LINE = "(replying to: {text})"
# A message the companion never saw (a group message not addressed to it), quoted from the platform.
QUOTE_UNSEEN_LINE = "(replying to a message I did not see, quoted: {text})"
# A quoted message this mode cannot vouch for (not stored, or gone with its interval): no text.
QUOTE_WITHHELD_LINE = "(replying to an earlier message)"
FORWARD_LINE = "(forwarded from {name})"
# A forwarded message of the companion's own chats that this mode may not read, and cannot vouch
# for (not kept, or gone with its interval): its words stay out (a private one is the PLACEHOLDER).
FORWARD_WITHHELD = "[a forwarded message I do not keep; its words are not shown]"
# What a mirror copies of a forward whose words are not read: nothing of them, nothing of why.
FORWARD_UNREAD_SAID = "(a forwarded message)"
# Said once (per conversation and run), in normal mode, before the answer to such a forward.
FORWARD_NOT_READ = (
    "I don't read forwarded messages from private mode (or ones I no longer keep) here; "
    "type again what you want me to know."
)
# Appended to the request when the person edited the message just answered.
EDIT_CORRECTION = (
    "The person has just edited their last message (shown above as it reads now) after your answer "
    "to the earlier wording. Answer the edited version, briefly acknowledging the correction."
)
# Heads an edit made in private mode of a message outside the open interval: the new words are
# kept in the interval as a message of their own, and the edited message keeps its words.
EDIT_KEPT_PRIVATE_LINE = "(an edit, made in private mode, of an earlier message)"
EDIT_NOT_KEPT = "That edit looked like it carries a passphrase or code; nothing of it was kept."
