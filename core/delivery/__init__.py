"""Delivery: the outbox, which sends delivery rows in per-target lanes, and mirror labels."""
