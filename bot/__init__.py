"""The process: command line, wiring, lifecycle."""
