"""What arrives from peers, message by message: decoded, each record through the inbound rules,
then handed to the actors it is for, parked while the registry has not named its sender, acked
again, or refused.

:class:`Incoming` is the I/O thread's.  The driver (:class:`actorwire.transport._node.Node`) gives
it every ZeroMQ message its routers and links read; what stays with the driver comes in as
callbacks: a node-level message, a reply to one of this node's asks, a refusal, an expulsion and an
actor's reply (the answer to an ask for an actor that does not run here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actorwire.messages import Codec, DecodeError, Envelope, Message
from actorwire.messages.kinds import ErrorCode, ErrorReply
from actorwire.transport._delivery import InStreams
from actorwire.transport._errors import SystemClosed
from actorwire.transport._membership import Parking, View
from actorwire.transport.node._inbound import Inbound, Step
from actorwire.transport.node._member import ROOT_LINK
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._send import Deliver

NODE = ""  # envelope target of node-level messages
#: deliver_many([(envelope, message, source), ...]): the I/O thread's bulk path.
DeliverMany = Callable[[list], None]
Run = list[tuple[Envelope, Message, str]]  # one target's records from one batch, in order, with their source

# The inbound rules' steps, as module names: an enum lookup per message showed in profiles.
_DELIVER, _RESOLVE, _PARK, _ACK_AGAIN, _REFUSE, _EXPEL = (
    Step.DELIVER, Step.RESOLVE, Step.PARK, Step.ACK_AGAIN, Step.REFUSE, Step.EXPEL)
#: At most this many (source, reason) pairs are remembered for the undecodable warning; then the
#: memory starts again (a peer sending ever-new garbage is warned of again, never held in memory).
UNDECODABLE_KEYS = 1024


class Incoming:
    """The receiving side of one node: ``local``/``bulk`` are its actors' deliver callables (shared
    with the node, which adds and removes them); ``clock`` is when a record is parked."""

    def __init__(self, *, codec: Codec, view: View, streams: InStreams, parking: Parking, outbox: Outbox,
                 local: dict[str, Deliver], bulk: dict[str, DeliverMany], log: Any, clock: Callable[[], float],
                 node_message: Callable[[str, Envelope, Message, bool], None],
                 resolve: Callable[[Envelope, Message, str | None], None],
                 refuse: Callable[[str, str], None], expel: Callable[[str, str], None],
                 reply: Callable[[str, Envelope, str | None, Message], None]) -> None:
        self._codec = codec
        self._view = view
        self._known_peers = view.peers  # identities that said a valid Hello
        self._streams = streams
        self.parking = parking
        self._inbound = Inbound(view, streams, parking)  # the rules a record passes
        self._outbox = outbox
        self._local = local
        self._bulk = bulk
        self._log = log
        self._clock = clock
        self._node_message = node_message
        self._resolve = resolve
        self._refuse = refuse
        self._expel = expel
        self._reply = reply
        self._park_since: float | None = None  # set while parked messages are tried again
        #: Undecodable messages by (source, reason).  A record that never decodes comes again at each
        #: re-send of its peer's stream: the first is a warning, the rest are counted at debug level.
        self.undecodable: dict[tuple[str, str], int] = {}

    def frames(self, source: str, frames: list[bytes], *, from_router: bool) -> None:
        """One ZeroMQ message from ``source`` (``[envelope, body]`` or one batch frame); what fails
        in it is logged with its source and dropped: one message never takes the node down."""
        try:
            self._frames(source, frames, from_router=from_router)
        except Exception:
            self._log.exception("failed to process a message; dropped it", source=source,
                                size=sum(len(f) for f in frames))

    def _frames(self, source: str, frames: list[bytes], *, from_router: bool) -> None:
        codec = self._codec
        if from_router and len(frames) != 2 and source not in self._known_peers:
            # A connection opens with a two-frame hello; nothing else is decoded before it.
            self._refuse(source, "a batch from a peer that did not say hello")
            return
        if len(frames) == 1:
            pairs, errors = codec.decode_batch(frames[0])
        elif len(frames) == 2:
            try:
                pairs, errors = [codec.decode(frames)], []
            except DecodeError as exc:
                pairs, errors = [], [exc]
        else:
            pairs, errors = [], [DecodeError(f"expected 1 or 2 frames, got {len(frames)}")]
        for error in errors:
            self._undecodable(source, str(error), sum(len(f) for f in frames))
        self.records(source, pairs, from_router=from_router)

    def _undecodable(self, source: str, reason: str, size: int) -> None:
        key = (source, reason)
        seen = self.undecodable.get(key, 0)
        if not seen and len(self.undecodable) >= UNDECODABLE_KEYS:
            self.undecodable.clear()
        self.undecodable[key] = seen + 1
        if seen:
            self._log.debug("dropped an undecodable message again", source=source, size=size, reason=reason,
                            times=seen + 1)
        else:
            self._log.warning("dropped an undecodable message", source=source, size=size, reason=reason,
                              note="the same again from this source is counted at debug level")

    def records(self, source: str, pairs: list[tuple[Envelope, Message]], *, from_router: bool) -> None:
        """The decoded records of one batch from ``source``, in order: each through the inbound rules
        (:class:`~.node._inbound.Inbound`), the step it gets carried out here."""
        known = not from_router or source in self._known_peers
        if len(pairs) > 1 and self._inbound.whole_run(source, pairs, known):
            self._hand_over({pairs[0][0].target: [(envelope, message, source) for envelope, message in pairs]})
            return
        # Tells are gathered per target and handed over in one call per run
        # (profile: per-message hand-off was a third of the I/O thread's time).
        runs: dict[str, Run] = {}
        rule = self._inbound.rule
        proven: set[str] = set()  # senders checked in this batch (a batch is mostly one sender's)
        for envelope, message in pairs:
            target = envelope.target
            if target == NODE:
                self._node_message(source, envelope, message, from_router)
                known = not from_router or source in self._known_peers  # a Hello precedes the rest
                if source == ROOT_LINK and self._view.root_id is not None:
                    source = self._view.root_id  # the welcome came first: the rest is the root's
                continue
            step, why = rule(source, envelope, known, proven)
            if step is _DELIVER:
                run = runs.get(target)
                if run is None:
                    runs[target] = run = []
                run.append((envelope, message, source))
            elif step is _RESOLVE or step is _PARK:
                if runs:  # what came before it goes first
                    self._hand_over(runs)
                    runs = {}
                if step is _RESOLVE:
                    self._resolve(envelope, message, source)
                else:
                    self.park(source, envelope, message)
            elif step is _ACK_AGAIN:
                key = (source, envelope.sender, target)
                self._outbox.owed.setdefault(key, self._streams.handled_of(key))
            elif step is _REFUSE:
                self._refuse(source, why)
            elif step is _EXPEL:
                self._expel(source, why)
                break
            # _SKIP: past a loss, the re-send of what it skipped comes first
        if runs:
            self._hand_over(runs)

    def _hand_over(self, runs: dict[str, Run]) -> None:
        for target, run in runs.items():
            bulk = self._bulk.get(target)
            if bulk is not None:
                try:
                    bulk(run)
                except SystemClosed:
                    pass
                continue
            for envelope, message, source in run:
                self._deliver_one(source, envelope, message)

    def _deliver_one(self, source: str, envelope: Envelope, message: Message) -> None:
        deliver = self._local.get(envelope.target)
        if deliver is None:
            gone = self._view.gone.get(envelope.target)
            reason = f"actor {envelope.target!r} " + (f"is {gone[0].value}" if gone else "does not run here")
            self._refuse(source, f"a message for {envelope.target!r}, which does not run here")
            # Acknowledge it so the sender's credit is not held forever, and
            # answer an ask so the asker fails at once instead of timing out.
            self._outbox.owed[(source, envelope.sender, envelope.target)] = envelope.seq
            if envelope.correlation_id:
                self._reply(envelope.target, envelope, source, ErrorReply(
                    code=ErrorCode.TARGET_DEAD if gone else ErrorCode.UNKNOWN_TARGET, message=reason,
                    request_kind=type(message).wire_tag()))
            return
        try:
            deliver(envelope, message, source, None)
        except SystemClosed:
            pass

    def park(self, source: str, envelope: Envelope, message: Message) -> None:
        since = self._park_since if self._park_since is not None else self._clock()
        if not self.parking.park(source, envelope.sender, (since, envelope, message)):
            self._refuse(source, "messages signed with names the registry has not confirmed, over the window")

    def unpark(self, now: float | None = None, staleness: float = 0.0) -> None:
        """Try again what waits for the registry; with ``now``, refuse what waited longer than
        ``staleness`` (the sender re-sends it, so nothing proven is lost)."""
        for source, entries in self.parking.release().items():
            for since, envelope, message in entries:
                if now is not None and now - since > staleness \
                        and not self._view.speaks_for(source, envelope.sender):
                    self._refuse(source, f"a message signed {envelope.sender!r}, a name never given by "
                                         f"the registry to that node")
                    continue
                self._park_since = since  # parked again, it keeps its first time
                try:
                    self.records(source, [(envelope, message)], from_router=False)
                finally:
                    self._park_since = None

