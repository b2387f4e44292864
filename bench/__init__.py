"""Benchmarks of the companion: run `python -m bench.run` (see bench/README.md)."""
