"""The ports the core depends on: adapters implement them, tests pass fakes of the same shape.

Nothing is re-exported here (importing a platform loads only the ports it names); import each
from its module:

- core/ports/chat.py: a chat platform's three parts (`BaseIntake`, `BaseSender`/`ChatSender`,
  `BaseStreamer`, built together as a `Platform`), `ChatCore` (what an intake hands events to) and
  `AdapterStateStore` (an intake's offsets and cursors).
- core/ports/model.py: `BaseProvider` (a language model), `Transcriber` (speech to text),
  `PartialSink` (where a streamed completion goes).
- core/ports/clock.py: `Clock`, `SystemClock`.
- core/ports/metrics.py: `Metrics` (what an operator may count), `NoMetrics`, `NO_METRICS`.
- core/ports/tools.py: `ToolServers` (tools served by MCP servers: the catalogue and the call),
  `ServedTool`, `ServedResult`, `ServerState`.
- core/ports/store/: the store, one Protocol per (consumer, data group), each listing only the
  methods that consumer calls; core/ports/store/__init__.py tables which consumer takes which
  port and which query class of adapters/storage/ implements it.
"""
