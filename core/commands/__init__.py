"""The chat commands: one registry, the handlers, and the narrow services they may use."""
