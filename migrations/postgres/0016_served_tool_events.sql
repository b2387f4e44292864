-- Served tools (issue 32): a call of a tool served by an MCP server names its server, in its report event
-- (`companion report` counts served calls by server, tool, duration and outcome) and in its tool
-- operation row. NULL: a built-in tool, or any other event. A served call in a private turn leaves no row
-- at all, and the schema refuses the one that would say it happened inside an interval.
-- The twin of migrations/0016_served_tool_events.sql.

ALTER TABLE agent_events ADD COLUMN server text;
ALTER TABLE tool_operations ADD COLUMN server text CHECK (server IS NULL OR segment_id IS NULL);
