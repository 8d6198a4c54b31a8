"""actors/weights."""
