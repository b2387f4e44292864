-- Served tools (issue 32): a call of a tool served by an MCP server names its server, in its report event
-- (`companion report` counts served calls by server, tool, duration and outcome) and in its tool
-- operation row. NULL: a built-in tool, or any other event.
--
-- A served call in a private turn leaves no row at all (core/turn/responder.py `_record_call`): its
-- arguments and result live in the turn's request alone. The schema refuses the row that would say one
-- happened inside an interval; an event needs no such CHECK, a private turn having no run.
-- The twin of migrations/postgres/0016_served_tool_events.sql.

ALTER TABLE agent_events ADD COLUMN server TEXT;
ALTER TABLE tool_operations ADD COLUMN server TEXT CHECK (server IS NULL OR segment_id IS NULL);
