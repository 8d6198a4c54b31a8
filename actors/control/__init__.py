"""actors/control."""
