-- Served tools (issue 32): a report event of a call to a tool served by an MCP server names its server,
-- so `companion report` counts served calls by server, tool, duration and outcome. NULL: a built-in tool,
-- or any other event. Written for normal turns only: a private turn has no run, so no event, and a served
-- call in a private turn writes no tool_operations row either (core/turn/responder.py `_record_call`).
-- The twin of migrations/postgres/0016_served_tool_events.sql.

ALTER TABLE agent_events ADD COLUMN server TEXT;
