"""The envelope: who sent a message to whom, when, and what it answers.

It travels as its own frame, a msgpack *array* (positional, append-only), so
that routing and recording can read it without decoding the body.
"""

from __future__ import annotations

import msgspec

from ._base import Count

#: The wire protocol this build speaks.  Bumped only for a change that an
#: older receiver cannot ignore; additive changes (a new field with a default,
#: a new message kind) keep the number.
PROTOCOL_VERSION = 1


class Envelope(msgspec.Struct, frozen=True, array_like=True, kw_only=True):
    """Routing and timing data of one message.

    Encoded as ``[version, sender, target, seq, correlation_id, is_reply,
    mono_ns, wall_ns, trace_id]``; fields are only ever appended.
    """

    version: int = PROTOCOL_VERSION
    #: Name of the sending actor (or ``"user:<thread>"`` for a user thread).
    sender: str
    #: Name of the receiving actor.
    target: str
    #: Per-sender sequence number, strictly increasing from 1.
    seq: Count
    #: Non-zero on an ask and on its reply; 0 on a plain tell.
    correlation_id: Count = 0
    #: True when this message answers the ask ``correlation_id``.
    is_reply: bool = False
    #: Sender's monotonic clock and wall clock at send time, in nanoseconds.
    mono_ns: int = 0
    wall_ns: int = 0
    #: Optional trace id that follows a chain of messages.
    trace_id: str | None = None
