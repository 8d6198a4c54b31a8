"""The exception tree shared by every layer.

``ActorwireError`` is the root, and every error actorwire raises derives
from it.  Below it, whose fault it is:

* :class:`UsageError`: the caller broke a rule of the API (a bad argument, a
  reply outside an ask, a bad ``ACTORWIRE_*`` value).  Fix the calling code.
* :class:`PeerError`: another process broke a rule of the protocol (bad
  bytes, a forged name, a refusal it had no right to give).  The receiver
  logs it and keeps serving.

Errors raised while turning bytes into messages derive from
:class:`DecodeError`, a :class:`PeerError` that is also a ``ValueError`` (as
msgspec's own decode errors are), so ``except ValueError`` keeps working for
callers who do not care about our tree.
"""

from __future__ import annotations


class ActorwireError(Exception):
    """Base class of every error actorwire raises on purpose."""


class UsageError(ActorwireError):
    """Local misuse: the calling code broke a rule of the API."""


class InvalidArgument(UsageError, ValueError):
    """An argument the call cannot take (a name already in use, an endpoint that cannot be reached)."""


class WrongType(UsageError, TypeError):
    """An argument of the wrong type (``spawn()`` of something that is not an Actor)."""


class NotFound(UsageError, LookupError):
    """A lookup by a name or id the caller gave found nothing (a message kind, a consumer's ring)."""


class NoSuchFile(UsageError, FileNotFoundError):
    """A path the caller gave does not exist (a recording, a key file)."""


class AlreadyExists(UsageError, FileExistsError):
    """A file the call would create is already there."""


class PeerError(ActorwireError):
    """A peer misbehaved: it sent what the protocol does not allow."""


class DecodeError(PeerError, ValueError):
    """Bytes from a peer could not be turned into a valid message.

    This is a *remote* fault: the sender (or the network) produced the bad
    bytes.  The receiver logs it and keeps serving.
    """


class MalformedMessage(DecodeError):
    """The bytes are msgpack, but not a valid message of the named kind.

    ``kind`` is the message kind when it could be read (else ``None``) and
    ``path`` the JSON-path of the offending field, e.g. ``$.shape[1]``.
    """

    def __init__(self, detail: str, *, kind: str | None = None, path: str | None = None) -> None:
        where = f"`{kind}`" if kind else "message"
        super().__init__(f"invalid {where}: {detail}")
        self.kind = kind
        self.path = path
        self.detail = detail


class UnknownMessage(DecodeError):
    """The message's tag names no kind in this catalog (a newer peer, or garbage)."""

    def __init__(self, kind: object) -> None:
        super().__init__(f"unknown message kind {kind!r}")
        self.kind = kind


class MessageTooLarge(DecodeError):
    """A message is over the configured size cap; it was rejected before decoding."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message of {size} bytes is over the {limit}-byte limit")
        self.size = size
        self.limit = limit


class ProtocolVersionMismatch(DecodeError):
    """The envelope carries a protocol version this build does not speak."""

    def __init__(self, got: object, expected: int) -> None:
        super().__init__(f"protocol version {got!r} is not supported (this build speaks {expected})")
        self.got = got
        self.expected = expected
