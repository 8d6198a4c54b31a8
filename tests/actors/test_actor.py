"""The actor base class and the virtual-clock harness."""

from __future__ import annotations

import pytest

from actorwire import messages as m
from actorwire.actors import Actor, Context, handler
from actorwire.actors.testing import ActorHarness
from actorwire.transport import UnknownActor


class Pinger(Actor):
    def __init__(self) -> None:
        self.beats = 0
        self.failures: list[m.AskFailed] = []
        self.downs: list[m.Down] = []
        self.replies: list[m.Message] = []

    def on_start(self, ctx: Context) -> None:
        ctx.start_timer("beat", 1.0, periodic=True)
        ctx.watch("peer")

    @handler
    def on_timer(self, msg: m.TimerFired, ctx: Context) -> None:
        self.beats += 1
        ctx.ask("peer", m.SyncNow(cycle=msg.count), timeout=0.5)
        if msg.count == 3:
            ctx.cancel_timer("beat")

    @handler
    def on_ack(self, msg: m.SyncAck, ctx: Context) -> None:
        assert ctx.is_reply
        self.replies.append(msg)

    @handler
    def on_failed(self, msg: m.AskFailed, ctx: Context) -> None:
        self.failures.append(msg)

    @handler
    def on_down(self, msg: m.Down, ctx: Context) -> None:
        self.downs.append(msg)
        ctx.stop()

    @handler
    def on_control(self, msg: m.StartEpoch | m.Shutdown, ctx: Context) -> None:
        ctx.broadcast("worker/*", msg)


def test_handlers_from_annotations_and_unions() -> None:
    assert Pinger.handler_for(m.TimerFired) == "on_timer"
    assert Pinger.handler_for(m.StartEpoch) == "on_control"
    assert Pinger.handler_for(m.Shutdown) == "on_control"
    assert Pinger.handler_for(m.Batch) is None


def test_handler_by_base_class_catches_all() -> None:
    class Any_(Actor):
        @handler
        def on_any(self, msg: m.Message, ctx: Context) -> None: ...

    assert Any_.handler_for(m.Batch) == "on_any"


def test_explicit_handler_types_and_bad_declarations() -> None:
    class Explicit(Actor):
        @handler(m.Batch, m.SyncAck)
        def both(self, msg, ctx):  # type: ignore[no-untyped-def]
            ...

    assert Explicit.handler_for(m.SyncAck) == "both"
    with pytest.raises(TypeError, match="@handler takes message classes, got 3"):
        handler(3)
    with pytest.raises(TypeError, match="annotate the message parameter"):
        class NoHint(Actor):  # noqa: F841
            @handler
            def on_x(self, msg, ctx):  # type: ignore[no-untyped-def]
                ...
    with pytest.raises(TypeError, match="is not a message class"):
        class BadHint(Actor):  # noqa: F841
            @handler
            def on_x(self, msg: int, ctx: Context) -> None: ...
    with pytest.raises(TypeError, match=r"both on_a\(\) and on_b\(\) handle Batch"):
        class Twice(Actor):  # noqa: F841
            @handler
            def on_a(self, msg: m.Batch, ctx: Context) -> None: ...

            @handler
            def on_b(self, msg: m.Batch, ctx: Context) -> None: ...


def test_handler_may_not_take_a_hook_name() -> None:
    with pytest.raises(TypeError, match=r"Bad.on_start: on_start\(\) is a lifecycle hook"):
        class Bad(Actor):  # noqa: F841
            @handler
            def on_start(self, msg: m.StartEpoch, ctx: Context) -> None: ...


def test_subclass_may_override_a_handler() -> None:
    class Base(Actor):
        @handler
        def on_b(self, msg: m.Batch, ctx: Context) -> None: ...

    class Child(Base):
        @handler
        def on_b2(self, msg: m.Batch, ctx: Context) -> None: ...

    assert Child.handler_for(m.Batch) == "on_b2"
    assert Base.handler_for(m.Batch) == "on_b"


def test_periodic_timer_asks_and_timeouts_on_virtual_clock() -> None:
    h = ActorHarness(Pinger(), name="pinger", peers=["peer"])
    h.start()
    assert h.advance(0.99) == []
    sent = h.advance(0.01)  # t=1.0: first beat, one ask
    assert [(s.target, s.message, s.kind) for s in sent] == [("peer", m.SyncNow(cycle=1), "ask")]
    h.reply_to(sent[0], m.SyncAck(rank=0, step_count=1))
    assert h.actor.replies == [m.SyncAck(rank=0, step_count=1)]
    h.advance(1.6)  # t=2.6: beat 2 at 2.0, its ask expires at 2.5
    assert h.actor.beats == 2
    (failed,) = h.actor.failures
    assert (failed.target, failed.request_kind, failed.code) == ("peer", "sync_now", m.ErrorCode.TIMEOUT)
    h.advance(10.0)
    assert h.actor.beats == 3  # cancelled at the third beat
    assert h.ctx.now() == pytest.approx(12.6)


def test_down_fails_pending_asks_and_notifies_watcher() -> None:
    h = ActorHarness(Pinger(), name="pinger", peers=["peer"])
    h.advance(1.0)
    h.down("peer", m.DownReason.DEAD, "killed")
    assert h.actor.failures[0].code == m.ErrorCode.TARGET_DEAD
    assert h.actor.downs == [m.Down(name="peer", reason=m.DownReason.DEAD, detail="killed")]
    assert h.ctx.stopped


def test_broadcast_to_a_glob() -> None:
    h = ActorHarness(Pinger(), name="pinger", peers=["peer", "worker/0", "worker/1", "coordinator"])
    sent = h.deliver(m.StartEpoch(epoch=0, partition_offset=0, partition_size=10))
    assert [s.target for s in sent] == ["worker/0", "worker/1"]


def test_harness_unknown_target() -> None:
    class Teller(Actor):
        @handler
        def on_b(self, msg: m.Batch, ctx: Context) -> None:
            ctx.tell("nobody", msg)

    h = ActorHarness(Teller(), peers=["somebody"])
    with pytest.raises(UnknownActor, match="no actor named 'nobody'"):
        h.deliver(m.Batch(rank=0, batch_ms=1.0, step_count=0, batch_loss=0.0))


def test_seeded_random_is_reproducible() -> None:
    class Dice(Actor):
        def __init__(self) -> None:
            self.rolls: list[int] = []

        @handler
        def on_b(self, msg: m.Batch, ctx: Context) -> None:
            self.rolls.append(ctx.random.randrange(1000))

    runs = []
    for _ in range(2):
        h = ActorHarness(Dice(), seed=42)
        for _ in range(5):
            h.deliver(m.Batch(rank=0, batch_ms=1.0, step_count=0, batch_loss=0.0))
        runs.append(h.actor.rolls)
    assert runs[0] == runs[1]


def test_reply_outside_an_ask_is_a_local_error() -> None:
    class Replier(Actor):
        @handler
        def on_b(self, msg: m.Batch, ctx: Context) -> None:
            ctx.reply(msg)

    h = ActorHarness(Replier(), name="r")
    with pytest.raises(RuntimeError, match="r: reply\\(\\) outside the handling of an ask"):
        h.deliver(m.Batch(rank=0, batch_ms=1.0, step_count=0, batch_loss=0.0))
    assert h.ask(m.Batch(rank=0, batch_ms=1.0, step_count=0, batch_loss=0.0)) is not None
