"""actorwire.actors: who does what.

The actor base, the runtime, the built-in actors, the embedded Worker API,
launch, replay and the command line.
"""

from __future__ import annotations

__all__: list[str] = []
