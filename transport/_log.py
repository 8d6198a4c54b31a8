"""Logging: structlog events with the emitting actor's context bound; configured only on request.

A library must not configure its host.  :func:`get_logger` never calls
``structlog.configure`` nor touches the root logger:

* when the host configured structlog, our events go through its processors;
* otherwise they go to the standard library logger ``"actorwire"``, rendered
  as ``key=value`` text, so the host's ``logging`` setup (levels, handlers)
  decides what is shown; with none, Python prints warnings and errors to
  stderr, as it does for any library.

:func:`configure_logging` is the one call that turns on our own format
(human-readable on a TTY, one JSON object per line otherwise).  The command
line and the processes it starts make it; an embedding trainer may.  Key
material is never passed to a logger.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import structlog

from actorwire.transport._errors import InvalidArgument

_lock = threading.Lock()
_configured = False

#: Events of a host that did not configure structlog, rendered for the stdlib logger.
_STDLIB_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
    structlog.processors.format_exc_info,
    structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
]


def configure_logging(level: str | int | None = None, *, json: bool | None = None) -> None:
    """Configure structlog, process-wide, with actorwire's format; later calls change nothing unless forced.

    ``level`` defaults to ``$ACTORWIRE_LOG_LEVEL`` or ``WARNING``; ``json``
    defaults to "stderr is not a TTY" (``$ACTORWIRE_LOG_JSON=1`` forces it).
    Call it from a program's ``main``, never from library code.
    """
    from actorwire.transport._settings import settings

    global _configured
    with _lock:
        if _configured and level is None and json is None:
            return
        level = level if level is not None else settings().log_level
        if isinstance(level, str):
            name = level
            level = logging.getLevelName(level.upper())
            if not isinstance(level, int):
                raise InvalidArgument(f"unknown log level {name!r} (use debug, info, warning or error)")
        if json is None:
            forced = settings().log_json
            json = forced if forced is not None else not sys.stderr.isatty()
        renderer: Any = (
            structlog.processors.JSONRenderer()
            if json
            else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        )
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                renderer,
            ],
            wrapper_class=structlog.make_filtering_bound_logger(level),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
            cache_logger_on_first_use=False,
        )
        _configured = True


class _Logger:
    """Bound context, and a destination chosen at each event: the host may configure structlog later."""

    __slots__ = ("_bound",)

    def __init__(self, bound: dict[str, Any]) -> None:
        self._bound = bound

    def bind(self, **more: Any) -> _Logger:
        return _Logger({**self._bound, **more})

    def _target(self) -> Any:
        if structlog.is_configured():
            return structlog.get_logger("actorwire").bind(**self._bound)
        return structlog.wrap_logger(logging.getLogger("actorwire"), processors=_STDLIB_PROCESSORS,
                                     wrapper_class=structlog.stdlib.BoundLogger).bind(**self._bound)

    def debug(self, event: str, **kw: Any) -> None:
        self._target().debug(event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._target().info(event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._target().warning(event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._target().error(event, **kw)

    def exception(self, event: str, **kw: Any) -> None:
        self._target().exception(event, **kw)


def get_logger(**bound: Any) -> Any:
    """A logger with ``bound`` context (actor=, rank=, ...); configures nothing (see the module doc)."""
    return _Logger(bound)
