"""The Discord adapter; discord.py is imported only here, and only when Discord is configured."""

from adapters.discord.adapter import DiscordAdapter, DiscordStartError
from adapters.discord.client import MESSAGE_LIMIT

__all__ = ["MESSAGE_LIMIT", "DiscordAdapter", "DiscordStartError"]
