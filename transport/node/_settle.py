"""What this node's sends and asks come to, and the acks it owes for what it handled.

An ask ends once: its reply (matched on the node that may answer and the correlation id), an
error reply, its deadline, its target's going down, or the node closing.  A stream a sender opened
gets its credit back from the receiver's acks, is re-sent after a quiet spell, moves with a target
that was taken over, and is failed when its target goes down (a death reports what it left
unconfirmed).  What this node handled is acked back to each sender in one ``Ack`` per peer.

:class:`Settlement` does it for the driver (:class:`actorwire.transport._node.Node`).  ``resolve``
and ``fail_all`` may run on any thread (a local reply, the node closing); the rest is the I/O
thread's.  It reads no clock: ``now`` comes in.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import msgspec

from actorwire.messages import Codec, Envelope, Message
from actorwire.messages.kinds import DownReason, ErrorReply
from actorwire.messages.runtime import Ack, AckEntry
from actorwire.transport._asks import ROOT, Asks, Match, PendingAsk
from actorwire.transport._delivery import InStreams
from actorwire.transport._errors import ActorDead, AskTimeout, RemoteError
from actorwire.transport._membership import View
from actorwire.transport.node._outbound import Outbound
from actorwire.transport.node._outbox import Outbox


class Settlement:
    """The outcomes of one node's asks and streams.  ``refuse(peer, what)`` counts what a peer should
    not have sent; ``send_node(node, message)`` sends a node-level message; ``changed()`` wakes the
    threads waiting on the node (a stream re-homed, the last acks while it closes); ``closing()``
    tells whether it does."""

    def __init__(self, *, node_id: str, codec: Codec, view: View, asks: Asks, outbound: Outbound, outbox: Outbox,
                 streams: InStreams, log: Any, refuse: Callable[[str, str], None],
                 send_node: Callable[..., None], changed: Callable[[], None], closing: Callable[[], bool]) -> None:
        self._node_id = node_id
        self._codec = codec
        #: Reads back this node's own records to renumber them: whatever its actors sent, also a kind
        #: the node's codec does not take from peers (``messages._codec.RUNTIME_ONLY``).
        self._own = Codec(max_message_size=codec.max_message_size)
        self._view = view
        self._asks = asks
        self._outbound = outbound
        self._outbox = outbox
        self._streams = streams
        self._log = log
        self._refuse = refuse
        self._send_node = send_node
        self._changed = changed
        self._closing = closing

    # -- asks -----------------------------------------------------------------

    def answerer(self, pending: PendingAsk) -> str | None:
        """The node whose reply resolves ``pending``: the root for node requests, else the target's host."""
        return self._view.root_id if pending.target == ROOT else self._view.host_of(pending.target)

    def resolve(self, envelope: Envelope, message: Message, source: str | None = None) -> None:
        """A reply to one of our asks; ``source`` is the node it came from (None: this one)."""
        verdict, pending = self._asks.match(envelope.correlation_id, source, self.answerer)
        if verdict is Match.UNKNOWN:
            self._log.debug("late or unknown reply dropped", corr=envelope.correlation_id,
                            sender=envelope.sender, kind=type(message).wire_tag())
            return
        assert pending is not None
        if verdict is Match.WRONG_NODE:
            # Replies are matched on (node, correlation id): a correlation id alone is guessable.
            self._refuse(source or self._node_id,
                         f"a reply to an ask it was not sent (correlation id {envelope.correlation_id})")
            return
        if isinstance(message, ErrorReply) and pending.target != ROOT:
            self.finish(pending, RemoteError(pending.target, message.code, message.message))
            return
        if not self._asks.settle(pending):
            return
        try:
            pending.on_reply(envelope, message)
        except Exception:
            self._log.exception("reply callback failed", corr=envelope.correlation_id)

    def finish(self, pending: PendingAsk, error: Exception) -> None:
        """``pending`` failed with ``error`` (unless it already ended)."""
        if not self._asks.settle(pending):
            return
        try:
            pending.on_failure(pending.correlation_id, error)
        except Exception:
            self._log.exception("failure callback failed", corr=pending.correlation_id)

    def expire(self, now: float) -> None:
        for pending in self._asks.expired(now):
            self.finish(pending, AskTimeout(pending.target, pending.kind, pending.timeout))

    def fail_all(self, error: Exception) -> None:
        for pending in self._asks.all():
            self.finish(pending, error)

    # -- streams ----------------------------------------------------------------

    def target_down(self, name: str, reason: DownReason, detail: str) -> None:
        """Actor ``name`` went down: its streams close (their senders wake) and its asks fail."""
        error = ActorDead(name, reason, detail)
        for sender, pair in self._outbound.down(name):
            if pair.unacked:
                # A clean stop reports its own unhandled messages on the receiving
                # side (the acks of the last ones may simply still be in flight);
                # after a death nobody else can tell, so the sender says it.
                kinds = dict(collections.Counter(self._codec.kind_of_record(record) for record in pair.unacked))
                report = self._log.debug if reason is DownReason.EXITED else self._log.error
                report("messages not confirmed as handled before the target went down", sender=sender,
                       target=name, reason=reason.value, count=len(pair.unacked), kinds=kinds)
            with pair.cond:
                pair.cond.notify_all()
        for pending in self._asks.of_target(name):
            self.finish(pending, error)

    def acked(self, ack: Ack, source: str, now: float) -> None:
        """``source`` acked what it received and handled: credit back to the senders waiting for it."""
        refused, freed = self._outbound.acked(ack.entries, source, now)
        for target in refused:
            self._refuse(source, f"an ack for {target!r}, which that node does not host")
        for pair in freed:
            with pair.cond:
                pair.cond.notify_all()
        if self._closing():
            self._changed()  # close() waits for the last acks

    def flush_acks(self) -> None:
        """One ``Ack`` to each peer for what was handled of its streams since the last."""
        handled = self._outbox.take_acks()
        if not handled:
            return
        for source, entries in self._streams.acks(handled).items():
            self._send_node(source, Ack(entries=[AckEntry(sender=sender, target=target, received=received,
                                                          handled=done)
                                                 for sender, target, received, done in entries]))

    def rehome(self, sender: str, target: str, node_id: str) -> None:
        """``target`` moved to ``node_id`` (a takeover): re-send all it has not handled."""
        again = self._outbound.rehome(sender, target, node_id, self._renumber)
        if again is None:
            return
        self._outbox.add_many(node_id, again)
        self._changed()
        self._log.info("actor moved; re-sending unhandled messages", target=target, node=node_id, count=len(again))

    def _renumber(self, record: bytes, seq: int) -> bytes:
        (envelope, message), = self._own.decode_batch(self._own.join_records([record]))[0]
        return self._codec.encode_record(msgspec.structs.replace(envelope, seq=seq), message)

    def retransmit(self, now: float, after: float) -> None:
        """Re-send every record of each stream that made no progress for ``after`` seconds."""
        for pair, again in self._outbound.due(now, after):
            self._outbox.add_many(pair.node_id, again)
            self._log.info("re-sending messages not acknowledged", target=pair.target, count=len(again))
