-- Served tools (issue 32): a report event of a call to a tool served by an MCP server names its server,
-- so `companion report` counts served calls by server, tool, duration and outcome. NULL: a built-in tool,
-- or any other event. The twin of migrations/0016_served_tool_events.sql.

ALTER TABLE agent_events ADD COLUMN server text;
