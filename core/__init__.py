"""The companion's domain: modes, masking, context, turns. No platform, transport or adapter imports."""
