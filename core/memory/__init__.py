"""Memory: context assembly, capture, the memory operations and the tools the model may call."""
