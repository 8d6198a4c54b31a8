"""Drive one actor with a virtual clock: no threads, no sockets, no sleeps.

The harness implements :class:`Context` by *recording* effects instead of
performing them, and by keeping time itself.  Protocol tests feed messages
in, move the clock, and assert on what came out::

    h = ActorHarness(Coordinator(...), name="coordinator")
    h.deliver(JoinRequest(rank=0, ...), sender="worker/0")
    h.advance(3.5)                       # due timers fire, in order
    assert h.sent_to("worker/0") == [StartEpoch(...)]

The replay harness builds on the same context (both live in :mod:`._context`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Any

from actorwire.actors.runtime._actor import Actor, dispatch, effects_name
from actorwire.actors.runtime._context import FakeContext, Sent
from actorwire.messages import Envelope, Message
from actorwire.messages.kinds import AskFailed, Down, DownReason, ErrorCode, TimerFired
from actorwire.transport.internal import InvalidArgument


class ActorHarness:
    """One actor, a :class:`FakeContext` and a virtual clock."""

    def __init__(self, actor: Actor, *, name: str = "actor", now: float = 0.0, seed: int = 0,
                 peers: Iterable[str] = (), effects: bool = True) -> None:
        """``effects=True`` (the default) runs the actor's effects adapter (:meth:`Actor.effects`)
        inline, as the live system would beside it: what the actor tells ``<name>/io`` is handled
        at once and the adapter's replies are delivered back; that traffic is kept in
        :attr:`effects_log` and left out of what the inputs return.  ``effects=False`` leaves the
        actor's requests in the outbox, for a test to answer by hand."""
        self.actor = actor
        self.ctx = FakeContext(name, now=now, seed=seed, names=peers)
        self._seq = itertools.count(1)
        self.started = False
        io_name = effects_name(name)
        declared = actor.effects(name)  # built, not started: an adapter's work begins in on_start
        if declared is not None:
            self.ctx.known.add(io_name)
        self.adapter: Actor | None = declared if effects else None
        self._io: ActorHarness | None = None
        if self.adapter is not None:
            self._io = ActorHarness(self.adapter, name=io_name, now=now, seed=seed, peers=[name], effects=False)
        #: ``(request, reply)`` pairs exchanged with the adapter, in order.
        self.effects_log: list[tuple[Sent, Sent]] = []

    # -- inputs -------------------------------------------------------------

    def add_peers(self, *names: str) -> None:
        self.ctx.known.update(names)

    def start(self) -> list[Sent]:
        if self._io is not None and not self._io.started:
            self._io.start()
        mark = len(self.ctx.outbox)
        self.actor.on_start(self.ctx)
        self.started = True
        return self._settle(mark)

    def close(self) -> None:
        """Run ``on_stop`` of the actor and of its adapter (which frees what the effects made)."""
        if self.started:
            self.actor.on_stop(self.ctx)
        if self._io is not None and self._io.started:
            self._io.actor.on_stop(self._io.ctx)

    def deliver(self, message: Message, *, sender: str = "peer", correlation_id: int = 0,
                is_reply: bool = False) -> list[Sent]:
        """Run the handler for ``message``; returns what it sent."""
        if not self.started:
            self.start()
        if not sender.startswith("~"):  # a user thread's name ("~<node>/<thread>") is never registered
            self.ctx.known.add(sender)
        envelope = Envelope(sender=sender, target=self.ctx.name, seq=next(self._seq),
                            correlation_id=correlation_id, is_reply=is_reply,
                            mono_ns=int(self.ctx.clock * 1e9), wall_ns=int(self.ctx.wall() * 1e9))
        if is_reply:
            self.ctx.pending_asks.pop(correlation_id, None)
        return self._run(envelope, message)

    def ask(self, message: Message, *, sender: str = "peer") -> Message | None:
        """Deliver ``message`` as an ask; the actor's reply, or None if it did not reply."""
        corr = 10**9 + next(self._seq)
        sent = self.deliver(message, sender=sender, correlation_id=corr)
        replies = [s.message for s in sent if s.kind == "reply" and s.correlation_id == corr]
        return replies[0] if replies else None

    def reply_to(self, sent: Sent, message: Message) -> list[Sent]:
        """Answer one of the actor's asks."""
        return self.deliver(message, sender=sent.target, correlation_id=sent.correlation_id, is_reply=True)

    def down(self, name: str, reason: DownReason = DownReason.DEAD, detail: str = "") -> list[Sent]:
        """``name`` went down: the actor gets ``Down`` if it watched it; asks to it fail."""
        out: list[Sent] = []
        self.ctx.known.discard(name)
        for corr, (target, _kind, _) in sorted(self.ctx.pending_asks.items()):
            if target == name:
                out += self._fail_ask(corr, f"actor {name!r} is {reason.value}", ErrorCode.TARGET_DEAD)
        if name in self.ctx.watched:
            self.ctx.watched.discard(name)
            out += self.deliver(Down(name=name, reason=reason, detail=detail), sender=name)
        return out

    def advance(self, seconds: float) -> list[Sent]:
        """Move the clock; fire due timers and expire asks in time order."""
        if seconds < 0:
            raise InvalidArgument("time only moves forward")
        if not self.started:
            self.start()
        end = self.ctx.clock + seconds
        out: list[Sent] = []
        while True:
            events: list[tuple[float, int, str, Any]] = []
            for key, (due, _, _) in self.ctx.timers.items():
                if due <= end:
                    heapq.heappush(events, (due, 0, "timer", key))
            for corr, (_, _, deadline) in self.ctx.pending_asks.items():
                if deadline <= end:
                    heapq.heappush(events, (deadline, 1, "ask", corr))
            if not events:
                break
            due, _, what, key = events[0]
            self.ctx.clock = max(self.ctx.clock, due)
            if what == "timer":
                _, period, count = self.ctx.timers[key]
                if period:
                    self.ctx.timers[key] = (due + period, period, count + 1)
                else:
                    del self.ctx.timers[key]
                out += self.deliver(TimerFired(key=key, count=count), sender=self.ctx.name)
            else:
                target, kind, _ = self.ctx.pending_asks[key]
                out += self._fail_ask(key, f"no reply from {target!r} to `{kind}`", ErrorCode.TIMEOUT)
            if self.ctx.stopped:
                break
        self.ctx.clock = max(self.ctx.clock, end)
        return out

    # -- outputs ------------------------------------------------------------

    @property
    def outbox(self) -> list[Sent]:
        return self.ctx.outbox

    def sent_to(self, target: str) -> list[Message]:
        return [s.message for s in self.ctx.outbox if s.target == target]

    def take(self) -> list[Sent]:
        """Everything sent so far, clearing the outbox."""
        out, self.ctx.outbox = self.ctx.outbox, []
        return out

    # -- internals ----------------------------------------------------------

    def _fail_ask(self, corr: int, reason: str, code: ErrorCode) -> list[Sent]:
        target, kind, _ = self.ctx.pending_asks.pop(corr)
        failed = AskFailed(correlation_id=corr, target=target, request_kind=kind, reason=reason, code=code)
        return self.deliver(failed, sender=target, correlation_id=corr, is_reply=True)

    def _run(self, envelope: Envelope, message: Message) -> list[Sent]:
        mark = len(self.ctx.outbox)
        self.ctx.envelope = envelope
        try:
            dispatch(self.actor, message, self.ctx)
        finally:
            self.ctx.envelope = None
        return self._settle(mark)

    def _settle(self, mark: int) -> list[Sent]:
        """Hand what the actor told its adapter over and deliver the replies, until none is left."""
        io = self._io
        if io is not None:
            i = mark
            while i < len(self.ctx.outbox):
                sent = self.ctx.outbox[i]
                if sent.target != io.ctx.name:
                    i += 1
                    continue
                del self.ctx.outbox[i]
                for reply in io.deliver(sent.message, sender=self.ctx.name):
                    self.effects_log.append((sent, reply))
                    if reply.target == self.ctx.name:
                        self.deliver(reply.message, sender=io.ctx.name)  # settles what it sends itself
                io.take()
        return self.ctx.outbox[mark:]
