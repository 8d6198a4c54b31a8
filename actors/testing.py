"""actorwire.actors.testing: drive one actor with a virtual clock; no threads, sockets or sleeps.

:class:`ActorHarness` runs an actor's handlers against a :class:`FakeContext`
that records every effect (as :class:`Sent`) instead of performing it, and
keeps time itself: ``deliver`` a message, ``advance`` the clock, assert on
what came out.  docs/runtime.md shows it at work.
"""

from __future__ import annotations

from actorwire.actors.runtime._testkit import ActorHarness, FakeContext, Sent
from actorwire.messages._public import publish as _publish

__all__ = ["ActorHarness", "FakeContext", "Sent"]
_publish(globals(), __all__)
