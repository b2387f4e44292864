"""The HTTP service of `companion run`: sign-in, sessions, operator endpoints (aiohttp, imported where used)."""
