"""actors/cli."""
