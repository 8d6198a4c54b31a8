"""Logging, configured once for the whole package.

structlog with the context of the emitting actor bound (name, rank, message
kind, correlation id).  Human-readable on a TTY, one JSON object per line
otherwise, so that a cluster's logs can be collected and filtered.  Key
material is never passed to a logger.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

import structlog

_lock = threading.Lock()
_configured = False


def configure_logging(level: str | int | None = None, *, json: bool | None = None) -> None:
    """Set up structlog for actorwire; later calls change nothing unless forced by arguments.

    ``level`` defaults to ``$ACTORWIRE_LOG_LEVEL`` or ``WARNING``; ``json``
    defaults to "stderr is not a TTY" (``$ACTORWIRE_LOG_JSON=1`` forces it).
    """
    global _configured
    with _lock:
        if _configured and level is None and json is None:
            return
        level = level if level is not None else os.environ.get("ACTORWIRE_LOG_LEVEL", "WARNING")
        if isinstance(level, str):
            level = logging.getLevelName(level.upper())
            if not isinstance(level, int):
                raise ValueError(f"unknown log level {level!r}")
        if json is None:
            forced = os.environ.get("ACTORWIRE_LOG_JSON")
            json = forced == "1" if forced in ("0", "1") else not sys.stderr.isatty()
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


def get_logger(**bound: Any) -> Any:
    """A structlog logger with ``bound`` context (actor=, rank=, ...)."""
    configure_logging()
    return structlog.get_logger("actorwire").bind(**bound)
