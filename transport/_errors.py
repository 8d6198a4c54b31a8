"""Errors of message delivery.

Whose fault: ``UnknownActor`` and ``WouldBlock`` are about the caller's
request; ``ActorDead``, ``AskTimeout``, ``BackpressureTimeout`` and
``RemoteError`` report what happened to a peer; ``SystemClosed`` means the
local system was shut down (by you).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from actorwire.messages import ActorwireError, PeerError, UsageError
from actorwire.messages._errors import AlreadyExists, InvalidArgument, NoSuchFile, NotFound, WrongType
from actorwire.messages.kinds import DownReason, ErrorCode

__all__ = ["AlreadyExists", "InvalidArgument", "NoSuchFile", "NotFound", "WrongType"]  # re-exported from here


class DeliveryError(ActorwireError):
    """A message could not be delivered or answered."""


class UnknownActor(DeliveryError, LookupError):
    """No actor of that name is registered in this system."""

    def __init__(self, name: str, known: Iterable[str] = ()) -> None:
        close = difflib.get_close_matches(name, list(known), n=3)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        super().__init__(f"no actor named {name!r} in this system{hint}")
        self.name = name


class ActorDead(DeliveryError):
    """The target actor is gone (it exited, died, or became unreachable)."""

    def __init__(self, name: str, reason: DownReason, detail: str = "") -> None:
        extra = f": {detail}" if detail else ""
        super().__init__(f"actor {name!r} is {reason.value}{extra}")
        self.name = name
        self.reason = reason
        self.detail = detail


class AskTimeout(DeliveryError, TimeoutError):
    """No reply to an ask within its deadline."""

    def __init__(self, target: str, kind: str, timeout: float) -> None:
        super().__init__(f"no reply from {target!r} to `{kind}` within {timeout:g} s")
        self.target = target
        self.kind = kind
        self.timeout = timeout


class BackpressureTimeout(DeliveryError, TimeoutError):
    """The target did not drain its queue in time for this send to be accepted."""

    def __init__(self, target: str, kind: str, timeout: float, queued: int) -> None:
        super().__init__(
            f"{target!r} still has {queued} unhandled messages from this sender after "
            f"{timeout:g} s; `{kind}` was not sent"
        )
        self.target = target
        self.kind = kind
        self.queued = queued


class WouldBlock(DeliveryError):
    """``send_nowait``: the target's queue is full right now."""


class RemoteError(DeliveryError):
    """The target answered an ask with an error."""

    def __init__(self, target: str, code: ErrorCode, message: str) -> None:
        super().__init__(f"{target!r} failed the request ({code.value}): {message}")
        self.target = target
        self.code = code
        self.remote_message = message


class SystemClosed(ActorwireError):
    """The actor system was shut down; nothing more can be sent or received."""


class JoinRefused(ActorwireError):
    """The root refused this process (wrong run id, protocol version, duplicate name)."""


class ConfigError(UsageError, ValueError):
    """A setting (an ``ACTORWIRE_*`` variable or a config field) has a value it cannot take."""


class NotAnAsk(UsageError, RuntimeError):
    """``reply()`` outside the handling of an ask, or to a message that was not one."""


class WaitTimeout(ActorwireError, TimeoutError):
    """Something this process waited for (the root's answer, an actor's registration) did not come in time."""


class ChildFailed(ActorwireError, RuntimeError):
    """A child process failed: it exited before its actors registered, or with an error status."""


class BadHandle(PeerError, ValueError, LookupError):
    """A tensor handle this plane cannot open: another plane's, malformed, of another process, or released."""
