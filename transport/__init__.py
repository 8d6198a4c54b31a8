"""actorwire.transport: how bytes move.

ZeroMQ sockets, addressing, security, recording taps and bulk tensor planes.
Imports ``actorwire.messages``, never ``actorwire.actors``.
"""

from __future__ import annotations

from ._log import configure_logging, get_logger

__all__ = ["configure_logging", "get_logger"]
