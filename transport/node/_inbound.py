"""The rules a record from a peer passes before it reaches an actor, as a machine with no I/O.

A record's sender must be a name the sending node holds (or one whose update may
still be on its way to this member, which then waits: parking), the peer must
have said hello, and a tell must be the next of its stream within the credit
window.  :meth:`Inbound.rule` says what to do with one record; the node carries
it out (hand over, park, refuse, resolve a reply, ack a duplicate again, skip
past a gap, expel the peer).  :meth:`Inbound.whole_run` is the fast path: a
batch that is one run of one open stream passes in a few C loops (profile of
``bench bus``: the per-record rules were a sixth of the receiver).

The rules are the view's (who speaks for whom), the parking's (who waits) and
the streams' (numbering and credit): this class composes them and holds no
state of its own, so the code the unit tests drive is the code on the hot path.
"""

from __future__ import annotations

import enum
import operator
from typing import Any

from actorwire.messages import Envelope
from actorwire.transport._delivery import InStreams, Verdict
from actorwire.transport._membership import Parking, View


class Step(enum.Enum):
    DELIVER = "deliver"  # hand it to its actor (in a run with the tells before it)
    RESOLVE = "resolve"  # a reply: settle the ask it answers
    PARK = "park"  # its sender is not proven yet, and the registry's word may be on its way
    ACK_AGAIN = "ack again"  # a duplicate: its ack was lost, and only a new one stops the re-sends
    SKIP = "skip"  # past a loss: the re-send of what it skipped comes first
    REFUSE = "refuse"  # dropped, logged once per peer and reason
    EXPEL = "expel"  # the peer broke the protocol: disconnect it, and stop reading its batch


# Preallocated: the common outcomes cost no allocation per record.
_DELIVER = (Step.DELIVER, "")
_RESOLVE = (Step.RESOLVE, "")
_PARK = (Step.PARK, "")
_ACK_AGAIN = (Step.ACK_AGAIN, "")
_SKIP = (Step.SKIP, "")
_NO_HELLO = (Step.REFUSE, "a message from a peer that did not say hello")
_ACCEPT, _DUPLICATE, _GAP, _OVERRUN = Verdict.ACCEPT, Verdict.DUPLICATE, Verdict.GAP, Verdict.OVERRUN

_ENVELOPE = operator.itemgetter(0)
_STREAM_FIELDS = operator.attrgetter("sender", "target", "is_reply")
_SEQ = operator.attrgetter("seq")


class Inbound:
    """What a node does with each record a peer sent (see the module's doc)."""

    __slots__ = ("view", "streams", "parking")

    def __init__(self, view: View, streams: InStreams, parking: Parking) -> None:
        self.view = view
        self.streams = streams
        self.parking = parking

    def rule(self, source: str, envelope: Envelope, known: bool, proven: set[str]) -> tuple[Step, str]:
        """What to do with one record (not a node message) from node ``source``; ``known``: the
        peer said hello (or the record came on a link this node opened); ``proven``: the senders
        already checked in this batch (a batch is mostly one sender's), added to.  The string is
        the reason of a refusal or an expulsion."""
        if not known:
            return _NO_HELLO
        sender = envelope.sender
        if sender not in proven:
            if self.view.speaks_for(source, sender, self.parking):
                proven.add(sender)
            elif self.view.unheard_of(source, sender, self.parking):
                return _PARK
            else:
                return Step.REFUSE, f"a message signed {sender!r}, a name that node does not hold"
        if envelope.is_reply:
            return _RESOLVE
        verdict = self.streams.accept((source, sender, envelope.target), envelope.seq)
        if verdict is _ACCEPT:
            return _DELIVER
        if verdict is _DUPLICATE:
            return _ACK_AGAIN
        if verdict is _GAP:
            return _SKIP
        if verdict is _OVERRUN:
            return Step.EXPEL, (f"it overran the credit window ({self.streams.window} unhandled messages from "
                                f"{sender!r} to {envelope.target!r})")
        return Step.EXPEL, f"it opened more than {self.streams.max_streams} streams"

    def whole_run(self, source: str, pairs: list[tuple[Envelope, Any]], known: bool) -> bool:
        """Whether the batch ``pairs`` (two records or more) is one run of one open stream, and if so
        take it: every record a tell from the same proven sender to the same target, numbered the
        next ones of that stream within its window.  False changes nothing: each record then goes
        through :meth:`rule`."""
        envelopes = list(map(_ENVELOPE, pairs))
        head = envelopes[0]
        if head.target == "" or head.is_reply or not known:  # "": a node message's target (NODE)
            return False
        fields = list(map(_STREAM_FIELDS, envelopes))
        if fields.count(fields[0]) != len(fields):
            return False
        first, n = head.seq, len(envelopes)
        return (list(map(_SEQ, envelopes)) == list(range(first, first + n))
                and self.view.speaks_for(source, head.sender, self.parking)
                and self.streams.accept_run((source, head.sender, head.target), first, n))
