"""The turn: the companion's front door, conversation lanes, bursts, and the responder."""
