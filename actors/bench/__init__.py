"""actors/bench."""
