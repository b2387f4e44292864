"""Proactive messages: reminders and nudges, with their manners."""
