"""The store's ports: one Protocol per (consumer, data group), listing only what that consumer calls.

A consumer names the slices it uses in its constructor; bot/bootstrap.py `build_companion` passes
each one query class of adapters/storage/stores.py `Stores`, and mypy checks the port against that
class there. A slice that shares methods with another inherits them (its contract is written once).

| consumer | ports (module: Protocol) | query class (`Stores` field) |
|---|---|---|
| `ModeValve` | modes: `ModeStore`; attempts: `AttemptLog` | `modes`; `passphrase_attempts` |
| `People` | timeline: `AccountStore`; links: `AccountMerge`; chats: `ChatMoveStore` | `timeline`; `links`; `chats` |
| `Companion` (through `Parts`) | timeline: `InboxStore`, `TimelineLog`; quotes: `QuoteStore`, `EditStore` | `timeline`; `quotes` |
| `edits.answer_edit` | quotes: `EditStore`, `QuoteStore`; timeline: `TimelineLog` | `quotes`; `timeline` |
| `quotes.compose` | quotes: `QuoteStore` | `quotes` |
| `Recovery` | modes: `CrashModes`; timeline: `OpenTurnStore`; lifetime: `ArtifactExpiry` | `modes`; `timeline`; `lifetime` |
| `ContextAssembler` | timeline: `ContextStore` | `timeline` |
| `Responder` | timeline: `ReplyStore`; memory: `RunLog`; proactive: `PrefsReader`; the tools' `ToolStores` | `timeline`; `memory`; `proactive` |
| memory tools and commands (`ToolStores`) | memory: `MemoryStore`; timeline: `PadReader`; links: `OriginStore` | `memory`; `timeline`; `links` |
| `CaptureService` | memory: `CaptureStore` | `memory` |
| `Outbox`; `StreamShow` | outbox: `OutboxStore`; `StreamMarks` | `outbox` |
| `ProactiveService`; `timezone_of` | proactive: `ProactiveStore`; `PrefsReader` | `proactive` |
| `CommandRunner` and handlers (`CommandServices`) | timeline: `TimelineLog` (`log`); modes: `OpenSegmentRead` (`segments`); lifetime: `ForgetStore` (`forgetting`), `ExportStore` (`export`); bindings: `BindingStore`; proactive: `NudgeSettings` (`nudges`); links: `LinkStore`; attempts: `AttemptLog` (`link_attempts`); `ToolStores` (`memory`) | `timeline`; `modes`; `lifetime`; `bindings`; `proactive`; `links`; `link_attempts` |
| `NormalPreview` | timeline: `DirectConversations`; modes: `OpenSegmentRead` | `timeline`; `modes` |
| `Transcripts` | timeline: `TranscriptStore` | `timeline` |
| `OwnerControls` (`OwnerReads`) | timeline: `DirectConversations`, `PadReader`; modes: `IntervalList`; memory: `MemoryStore`; proactive: `PrefsReader`, `DecisionLog`; bindings: `BindingList` | `timeline`; `modes`; `memory`; `proactive`; `bindings` |
| `CoreEntry.state`, the intakes | core/ports/chat.py `AdapterStateStore` | `modes` |
"""
