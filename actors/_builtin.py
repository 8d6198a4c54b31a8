"""The built-in actors, loaded for replay: the runtime knows them only by registration.

``actorwire.actors.runtime`` imports nothing above it; each built-in actor's module registers its
classes (``register_replayable``) and the rank protocol its log replayer.  ``replay`` here loads
those modules, then replays: it is the ``actorwire.actors.replay`` users call.
"""

from __future__ import annotations

from typing import Any

from actorwire.actors.runtime import _replay


def load() -> None:
    """Import every module that registers a built-in actor or log replayer."""
    import actorwire.actors.bench._bus
    import actorwire.actors.control
    import actorwire.actors.control._rank_record
    import actorwire.actors.weights  # noqa: F401


def replay(*args: Any, **kwargs: Any) -> _replay.ReplayReport:
    load()
    return _replay.replay(*args, **kwargs)


replay.__doc__ = _replay.replay.__doc__
