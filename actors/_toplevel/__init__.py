"""actorwire: a typed, replayable message-passing actor framework on ZeroMQ.

Subpackages: :mod:`actorwire.messages` (what is said), :mod:`actorwire.transport`
(how bytes move) and :mod:`actorwire.actors` (who does what).
"""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__"]
