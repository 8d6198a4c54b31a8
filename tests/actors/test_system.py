"""The runtime inside one process: tell/ask, errors, inboxes, timers, supervision, lifecycle."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable

import pytest
from _actors import Echo
from conftest import wait_until

from actorwire import messages as m
from actorwire.actors import (
    Actor,
    ActorDead,
    ActorSystem,
    AskTimeout,
    BackpressureTimeout,
    Context,
    JoinRefused,
    RemoteError,
    RuntimeConfig,
    SystemClosed,
    UnexpectedReply,
    UnknownActor,
    WouldBlock,
    handler,
)

SYNC = m.SyncNow(cycle=1)



class Gate(Actor):
    """Blocks in its handler until released: a stalled receiver."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    @handler
    def on_throttle(self, msg: m.Throttle, ctx: Context) -> None:
        self.release.wait(30)

    @handler
    def on_sync(self, msg: m.SyncNow, ctx: Context) -> None:
        if ctx.correlation_id:
            ctx.reply(m.SyncAck(rank=0, step_count=0))


class Failing(Actor):
    @handler
    def on_sync(self, msg: m.SyncNow, ctx: Context) -> None:
        raise ValueError("boom")

    @handler
    def on_batch(self, msg: m.Batch, ctx: Context) -> None:
        ctx.reply(msg)


class Silent(Actor):
    @handler
    def on_sync(self, msg: m.SyncNow, ctx: Context) -> None:
        pass


def test_tell_and_ask(system: ActorSystem) -> None:
    system.spawn(Echo(), "echo")
    assert system.ask("echo", SYNC, timeout=5) == SYNC
    assert system.ask("echo", SYNC, timeout=5, expect=m.SyncNow) == SYNC
    with pytest.raises(UnexpectedReply, match="'echo' answered `sync_now`, expected `sync_ack`"):
        system.ask("echo", SYNC, timeout=5, expect=m.SyncAck)


def test_ask_timeout_names_target_and_kind(system: ActorSystem) -> None:
    system.spawn(Silent(), "silent")
    with pytest.raises(AskTimeout, match=r"no reply from 'silent' to `sync_now` within 0.2 s") as info:
        system.ask("silent", SYNC, timeout=0.2)
    assert (info.value.target, info.value.kind) == ("silent", "sync_now")
    assert isinstance(info.value, TimeoutError)


def test_unknown_target_suggests_close_names(system: ActorSystem) -> None:
    system.spawn(Echo(), "echo")
    with pytest.raises(UnknownActor, match=r"no actor named 'ecoh' in this system \(did you mean 'echo'\?\)"):
        system.tell("ecoh", SYNC)
    with pytest.raises(UnknownActor):
        system.ask("nobody", SYNC, timeout=1)


def test_handler_error_reaches_the_asker_and_the_actor_lives_on(system: ActorSystem) -> None:
    system.spawn(Failing(), "failing")
    with pytest.raises(RemoteError, match=r"'failing' failed the request \(handler_failed\): ValueError: boom"):
        system.ask("failing", SYNC, timeout=5)
    batch = m.Batch(rank=0, batch_ms=1.0, step_count=0, batch_loss=0.0)
    assert system.ask("failing", batch, timeout=5) == batch


def test_missing_handler_is_an_error_reply(system: ActorSystem) -> None:
    system.spawn(Silent(), "silent")
    with pytest.raises(RemoteError, match="no_handler.*Silent has no handler for `shutdown`") as info:
        system.ask("silent", m.Shutdown(), timeout=5)
    assert info.value.code is m.ErrorCode.NO_HANDLER


def test_duplicate_name_in_one_process(system: ActorSystem) -> None:
    system.spawn(Echo(), "echo")
    with pytest.raises(ValueError, match="an actor named 'echo' already runs in this process"):
        system.spawn(Echo(), "echo")
    with pytest.raises(TypeError, match="spawn\\(\\) takes an Actor instance, got type"):
        system.spawn(Echo, "e2")  # type: ignore[arg-type]


class Replier(Actor):
    """Replies to an ask with whatever ``answer`` holds, a message or not."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    @handler
    def on_sync(self, msg: m.SyncNow, ctx: Context) -> None:
        if msg.cycle == 1:
            ctx.reply(self.answer)  # type: ignore[arg-type]
        else:
            ctx.tell("echo", self.answer)  # type: ignore[arg-type]


def test_something_that_is_not_a_message_is_refused_on_every_path(system: ActorSystem) -> None:
    """A local target used to be handed the object itself: a str told to an actor in the same process
    killed that actor's thread (its logging called wire_tag() on it), and every later ask of it timed out."""
    system.spawn(Echo(), "echo")
    for send in (lambda: system.tell("echo", "hello"),  # type: ignore[arg-type]
                 lambda: system.ask("echo", {"type": "sync_now"}, timeout=5)):  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="expected an actorwire message, got (str|dict)"):
            send()
    assert system.ask("echo", SYNC, timeout=5) == SYNC  # alive
    # From a handler: a reply or a tell of a non-message fails that handler, as any error would.
    system.spawn(Replier("not a message"), "replier")
    with pytest.raises(RemoteError, match="handler_failed.*expected an actorwire message, got str"):
        system.ask("replier", SYNC, timeout=5)
    with pytest.raises(RemoteError, match="handler_failed.*expected an actorwire message, got str"):
        system.ask("replier", m.SyncNow(cycle=2), timeout=5)
    assert system.ask("echo", SYNC, timeout=5) == SYNC


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5"])
def test_an_ask_timeout_that_is_no_deadline_is_refused(system: ActorSystem, timeout: object) -> None:
    """A negative timeout used to leave the asker waiting forever; nan never expires either."""
    system.spawn(Echo(), "echo")
    with pytest.raises((ValueError, TypeError), match="an ask's timeout must be a"):
        system.ask("echo", SYNC, timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError), match="a send's timeout must be a"):
        system.tell("echo", SYNC, timeout=-1 if timeout == 0 else timeout)  # type: ignore[arg-type]
    system.tell("echo", SYNC, timeout=0)  # 0: do not wait for room, which is a timeout a tell can take


@pytest.mark.parametrize("name", ["", "x" * 257])
def test_an_actor_name_the_wire_cannot_carry_is_refused(system: ActorSystem, name: str) -> None:
    """"" is the target of node-level messages; a name over 256 characters no other node would take."""
    with pytest.raises(ValueError, match="an actor name is 1 to 256 characters"):
        system.spawn(Echo(), name)


def test_record_takes_a_directory_or_settings() -> None:
    with pytest.raises(TypeError, match="record= takes a directory"):
        ActorSystem(record=123)  # type: ignore[arg-type]


def test_inbox_poll_never_blocks_and_get_waits(system: ActorSystem) -> None:
    inbox = system.inbox("trainer")
    assert inbox.poll() is None
    assert inbox.get(timeout=0.01) is None
    system.spawn(Echo(), "echo")
    inbox.tell("echo", m.Shutdown())
    assert inbox.ask("echo", SYNC, timeout=5) == SYNC
    system.tell("trainer", m.Heartbeat(rank=1))
    got = inbox.get(timeout=5)
    assert got is not None and got.message == m.Heartbeat(rank=1)
    assert got.sender.startswith("~")
    assert list(inbox.drain()) == []


def test_an_inbox_item_says_when_it_came_in(system: ActorSystem) -> None:
    """``Received.received_at``: the moment the I/O thread put it in the inbox (``time.monotonic``),
    not when the user's thread took it: a Worker tells by it a group session that waited too long."""
    import time

    inbox = system.inbox("trainer")
    before = time.monotonic()
    system.tell("trainer", m.Heartbeat(rank=1))  # a local tell is delivered in the caller's thread
    envelope = m.Envelope(sender="coordinator", target="trainer", seq=1)
    inbox._deliver_many([(envelope, m.Heartbeat(rank=2), None)])  # the I/O thread's bulk path
    delivered = time.monotonic()
    first, second = inbox.get(timeout=5), inbox.get(timeout=5)
    assert first is not None and second is not None and second.message == m.Heartbeat(rank=2)
    assert before <= first.received_at <= second.received_at <= delivered


class Setter(Actor):
    """Starts timer ``k<cycle>`` with the delay ``DELAYS[cycle]``; tells ``main`` each firing."""

    DELAYS = {1: float("inf"), 2: float("nan"), 3: -1.0, 4: 1e12, 5: 0.05}

    @handler
    def on_sync(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.start_timer(f"k{msg.cycle}", self.DELAYS[msg.cycle])
        ctx.reply(m.SyncAck(rank=0, step_count=msg.cycle))

    @handler
    def on_timer(self, msg: m.TimerFired, ctx: Context) -> None:
        ctx.tell("main", m.Heartbeat(rank=0, step_count=int(msg.key[1:])))


def test_a_timer_delay_no_clock_can_keep_is_refused_and_timers_go_on(system: ActorSystem) -> None:
    """start_timer(key, inf) used to kill the process's timers thread (an OverflowError in its wait):
    every timer of every actor stopped firing. nan fired at once. Both are refused now, and a timer
    set a very long way ahead (past threading.TIMEOUT_MAX) leaves the thread waiting in steps."""
    inbox = system.inbox("main")
    system.spawn(Setter(), "setter")
    for cycle in (1, 2, 3):
        with pytest.raises(RemoteError, match=f"timer 'k{cycle}': the delay must be a finite number of seconds"):
            system.ask("setter", m.SyncNow(cycle=cycle), timeout=5)
    assert system.ask("setter", m.SyncNow(cycle=4), timeout=5).step_count == 4  # 1e12 s: taken
    assert system.ask("setter", m.SyncNow(cycle=5), timeout=5).step_count == 5
    got = inbox.get(timeout=5)
    assert got is not None and got.message == m.Heartbeat(rank=0, step_count=5)  # the timers still fire
    from actorwire.actors.testing import ActorHarness

    harness = ActorHarness(Setter(), name="setter")
    with pytest.raises(ValueError, match="timer 'k1': the delay must be a finite number"):
        harness.deliver(m.SyncNow(cycle=1))


def test_inbox_answers_an_actor_ask(system: ActorSystem) -> None:
    class Asker(Actor):
        def __init__(self) -> None:
            self.answer: m.Message | None = None

        @handler
        def on_start_epoch(self, msg: m.StartEpoch, ctx: Context) -> None:
            ctx.ask("trainer", m.SyncNow(cycle=7), timeout=5)

        @handler
        def on_ack(self, msg: m.SyncAck, ctx: Context) -> None:
            ctx.tell("trainer", m.Heartbeat(rank=msg.rank, step_count=msg.step_count))

    inbox = system.inbox("trainer")
    system.spawn(Asker(), "asker")
    system.tell("asker", m.StartEpoch(epoch=0, partition_offset=0, partition_size=1))
    request = inbox.get(timeout=5)
    assert request is not None and request.message == m.SyncNow(cycle=7)
    inbox.reply(request, m.SyncAck(rank=3, step_count=9))
    done = inbox.get(timeout=5)
    assert done is not None and done.message == m.Heartbeat(rank=3, step_count=9)
    with pytest.raises(RuntimeError, match="is not an ask"):
        inbox.reply(done, m.Shutdown())


def test_actor_ask_failure_arrives_as_a_message(system: ActorSystem) -> None:
    class Asker(Actor):
        @handler
        def on_start_epoch(self, msg: m.StartEpoch, ctx: Context) -> None:
            ctx.ask("silent", SYNC, timeout=0.1)

        @handler
        def on_failed(self, msg: m.AskFailed, ctx: Context) -> None:
            ctx.tell("trainer", m.JoinRejected(reason=f"{msg.code.value}: {msg.reason}"))

    inbox = system.inbox("trainer")
    system.spawn(Silent(), "silent")
    system.spawn(Asker(), "asker")
    system.tell("asker", m.StartEpoch(epoch=0, partition_offset=0, partition_size=1))
    got = inbox.get(timeout=5)
    assert got is not None
    assert got.message == m.JoinRejected(reason="timeout: no reply from 'silent' to `sync_now` within 0.1 s")


def test_timers_fire_in_the_live_runtime(system: ActorSystem) -> None:
    class Ticker(Actor):
        def on_start(self, ctx: Context) -> None:
            ctx.start_timer("tick", 0.01, periodic=True)
            ctx.start_timer("once", 0.0)

        @handler
        def on_timer(self, msg: m.TimerFired, ctx: Context) -> None:
            ctx.tell("trainer", m.Heartbeat(rank=0, step_count=msg.count) if msg.key == "tick" else m.Shutdown())
            if msg.key == "tick" and msg.count == 3:
                ctx.cancel_timer("tick")

    inbox = system.inbox("trainer")
    system.spawn(Ticker(), "ticker")
    got = [inbox.get(timeout=5) for _ in range(4)]
    kinds = sorted(type(g.message).__name__ for g in got if g is not None)
    assert kinds == ["Heartbeat", "Heartbeat", "Heartbeat", "Shutdown"]
    assert inbox.get(timeout=0.1) is None  # cancelled after the third tick


def test_watch_reports_a_clean_stop_and_later_sends_fail(system: ActorSystem) -> None:
    inbox = system.inbox("trainer")
    system.spawn(Echo(), "echo")
    inbox.watch("echo")
    system.stop("echo")
    got = inbox.get(timeout=5)
    assert got is not None and got.message == m.Down(name="echo", reason=m.DownReason.EXITED)
    with pytest.raises(ActorDead, match="actor 'echo' is exited"):
        system.tell("echo", SYNC)
    inbox.watch("echo")  # already gone: Down at once
    again = inbox.get(timeout=5)
    assert again is not None and again.message.reason is m.DownReason.EXITED  # type: ignore[attr-defined]


def test_a_down_that_lands_while_watch_runs_still_reaches_the_watcher(system: ActorSystem,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The I/O thread reports ``echo`` down between watch()'s lookup and its registration: the
    watcher must still hear of it (it used to wait for a Down that had already gone by)."""
    inbox = system.inbox("trainer")
    system.spawn(Echo(), "echo")
    node = system._node
    real_lookup = node.lookup

    def lookup_then_down(name: str) -> str:
        found = real_lookup(name)
        io = threading.Thread(target=system._on_down, args=(name, m.DownReason.EXITED, "stopped"))
        io.start()
        io.join(0.5)  # the I/O thread's report: done at once, or held off by the watch in progress
        return found

    monkeypatch.setattr(node, "lookup", lookup_then_down)
    inbox.watch("echo")
    got = inbox.get(timeout=5)
    assert got is not None and got.message == m.Down(name="echo", reason=m.DownReason.EXITED, detail="stopped")


def test_broadcast_to_a_group(system: ActorSystem) -> None:
    class Caster(Actor):
        @handler
        def on_start_epoch(self, msg: m.StartEpoch, ctx: Context) -> None:
            ctx.broadcast("worker/*", msg)

    inboxes = [system.inbox(f"worker/{i}") for i in range(3)]
    system.spawn(Caster(), "caster")
    plan = m.StartEpoch(epoch=1, partition_offset=0, partition_size=8)
    system.tell("caster", plan)
    for inbox in inboxes:
        got = inbox.get(timeout=5)
        assert got is not None and got.message == plan and got.sender == "caster"


def test_asyncio_ask(system: ActorSystem) -> None:
    system.spawn(Echo(), "echo")
    system.spawn(Silent(), "silent")

    async def main() -> None:
        assert await system.ask_async("echo", SYNC, timeout=5) == SYNC
        with pytest.raises(AskTimeout):
            await system.ask_async("silent", SYNC, timeout=0.1)

    asyncio.run(main())


def test_backpressure_against_a_stalled_local_actor() -> None:
    release = threading.Event()
    with ActorSystem(config=RuntimeConfig(mailbox_capacity=2)) as system:
        system.spawn(Gate(release), "gate")
        system.tell("gate", m.Throttle())  # taken by the handler, which then blocks
        system.wait_for("gate")
        sent = 0
        with pytest.raises(BackpressureTimeout, match="'gate'.*`sync_now` was not sent"):
            for _ in range(10):
                system.tell("gate", SYNC, timeout=0.1)
                sent += 1
        assert sent >= 2
        with pytest.raises(WouldBlock, match="the mailbox of 'gate' is full"):
            system.tell_nowait("gate", SYNC)
        release.set()
        assert system.ask("gate", SYNC, timeout=10) == m.SyncAck(rank=0, step_count=0)


def test_shutdown_fails_waiting_asks_and_later_calls() -> None:
    system = ActorSystem()
    system.spawn(Silent(), "silent")
    errors: list[BaseException] = []

    def asker() -> None:
        try:
            system.ask("silent", SYNC, timeout=60)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)

    t = threading.Thread(target=asker)
    t.start()
    while not system._node._asks:  # wait until the ask is registered (bounded by pytest-timeout)
        threading.Event().wait(0.001)
    system.shutdown()
    t.join(10)
    # The target stopped first (ActorDead) or the node closed first (SystemClosed): never a hang.
    assert len(errors) == 1 and isinstance(errors[0], (SystemClosed, ActorDead))
    with pytest.raises(SystemClosed):
        system.tell("silent", SYNC)
    with pytest.raises(SystemClosed):
        system.spawn(Echo(), "late")
    system.shutdown()  # idempotent


def test_join_with_the_wrong_run_id_is_refused(system: ActorSystem) -> None:
    with pytest.raises(JoinRefused, match="wrong run id") as refused:
        ActorSystem(run_id="other", join=system.endpoint)
    assert system.run_id not in str(refused.value)  # probing with refusals reveals nothing


def test_join_name_clash_across_processes(system: ActorSystem) -> None:
    system.spawn(Echo(), "echo")
    member = ActorSystem(run_id=system.run_id, join=system.endpoint)
    try:
        with pytest.raises(JoinRefused, match="actor name 'echo' is already taken"):
            member.spawn(Echo(), "echo")
        member.spawn(Echo(), "echo/2")
        assert system.ask("echo/2", SYNC, timeout=5) == SYNC
        assert member.ask("echo", SYNC, timeout=5) == SYNC
    finally:
        member.shutdown()


def test_bad_join_endpoint() -> None:
    from actorwire.transport._endpoints import run_dir

    with pytest.raises(ValueError, match="cannot connect to the root at 'nonsense://x'"):
        ActorSystem(run_id="r", join="nonsense://x")
    assert not list(run_dir("r", create=False).glob(f"*-{os.getpid()}-*.sock"))  # its socket went with it
    with pytest.raises(ValueError, match="joining a system needs its run_id"):
        ActorSystem(join="ipc:///tmp/x")


def test_silent_root_times_out(tmp_path) -> None:
    config = RuntimeConfig(timeout_scale=0.05)
    with pytest.raises(TimeoutError, match="no answer from the root at ipc://"):
        ActorSystem(run_id="r", join=f"ipc://{tmp_path}/nobody.sock", config=config)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"heartbeat_interval": 0}, "heartbeat_interval must be positive, got 0"),
        ({"staleness_timeout": 0.5}, r"staleness_timeout \(0.5 s\) must exceed heartbeat_interval \(1.0 s\)"),
        ({"window": 1}, "window must be >= 2"),
        ({"timeout_scale": -1.0}, "timeout_scale must be positive"),
    ],
)
def test_config_is_validated(kwargs: dict, text: str) -> None:
    with pytest.raises(ValueError, match=text):
        RuntimeConfig(**kwargs)


def test_timeout_scale_from_environment(setenv: Callable[[str, str | None], None]) -> None:
    setenv("ACTORWIRE_TIMEOUT_SCALE", "2.5")
    assert RuntimeConfig().scaled(3.0) == 7.5
    with pytest.raises(ValueError, match="^ACTORWIRE_TIMEOUT_SCALE must be a number, got 'fast'$"):
        setenv("ACTORWIRE_TIMEOUT_SCALE", "fast")


def test_a_root_request_answered_before_its_caller_resumes_is_not_lost() -> None:
    # The demo once died with KeyError in inbox(): the I/O thread answered the
    # Register and forgot the ask before the calling thread read it back.
    # Here the command hook waits until the answer is in, forcing that order.
    root = ActorSystem(config=RuntimeConfig(heartbeat_interval=0.1, staleness_timeout=1.0))
    member = ActorSystem(run_id=root.run_id, join=root.endpoint,
                         config=RuntimeConfig(heartbeat_interval=0.1, staleness_timeout=1.0))
    try:
        node = member._node
        queue_command = node._command

        def command_then_wait_for_the_answer(cmd: object) -> None:
            queue_command(cmd)  # type: ignore[arg-type]
            corr = getattr(cmd, "correlation_id", None)  # a root request
            if corr is not None:
                done = threading.Event()
                for _ in range(1000):
                    if corr not in node._asks:
                        break
                    done.wait(0.01)

        node._command = command_then_wait_for_the_answer  # type: ignore[method-assign]
        box = member.inbox("late/inbox")
        assert "late/inbox" in root.names()
        box.close()
    finally:
        member.shutdown()
        root.shutdown()


def test_registering_from_a_member_under_a_tiny_switch_interval(system: ActorSystem) -> None:
    """Thread interleavings the GIL rarely allows: switch after every few bytecodes."""
    import sys

    member = ActorSystem(join=system.endpoint, run_id=system.run_id)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for i in range(200):
            member.inbox(f"tiny/{i}")
    finally:
        sys.setswitchinterval(old)
    try:
        # Every name was registered with the root, none lost or doubled by an interleaving.
        for i in range(200):
            system.wait_for(f"tiny/{i}", timeout=10)  # raises if the root never learns the name
        names = set(system.names())
        assert {f"tiny/{i}" for i in range(200)} <= names
    finally:
        member.shutdown()


def test_the_process_title_names_what_the_process_is_for() -> None:
    """ps showed a Worker's process as `actorwire weights/r0/producer/0`: the rank comes first now."""
    import subprocess
    import sys

    code = """
import setproctitle
from actorwire.actors import Actor, ActorSystem, EffectsAdapter

class Io(EffectsAdapter):
    pass

class WithIo(Actor):
    def effects(self, name):
        return Io(name)

with ActorSystem(proctitle=True) as system:
    system.spawn(WithIo(), "weights/r3/producer/0")
    print(setproctitle.getproctitle())
    system._retitle("worker/3")
    print(setproctitle.getproctitle())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["actorwire weights/r3/producer/0",
                                       "actorwire worker/3 (weights/r3/producer/0)"]


class _StopsOnThrottle(Actor):
    """Waits in its Throttle handler until released, then stops: what came meanwhile is left over."""

    def __init__(self, release: threading.Event, entered: threading.Event) -> None:
        self.release, self.entered = release, entered

    @handler
    def on_throttle(self, msg: m.Throttle, ctx: Context) -> None:
        ctx.watch("watched")
        self.entered.set()
        self.release.wait(30)
        ctx.stop()

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        pass


@pytest.mark.parametrize("tell_too", [False, True], ids=["down-only", "down-and-a-tell"])
def test_an_actor_that_stops_before_reading_a_down_does_not_log_it_as_lost_work(system: ActorSystem,
                                                                                tell_too: bool) -> None:
    """A coordinator that ended its run and stopped while its ranks' processes were leaving logged
    "actor stopped with unhandled messages" at error level for the ``Down`` notifications it had
    not read (bench scale, 3 of 4 runs at 20,000 ranks). A ``Down`` is the runtime's notice, not a
    sender's work: only tells count, and the error names their kinds."""
    from structlog.testing import capture_logs

    release, entered = threading.Event(), threading.Event()
    watched = system.inbox("watched")
    watcher = system.inbox("observer")
    system.spawn(_StopsOnThrottle(release, entered), "stopper")
    watcher.watch("stopper")
    with capture_logs() as logs:
        system.tell("stopper", m.Throttle())
        assert entered.wait(10)
        watched.close()  # its Down lands in the stopper's mailbox behind the Throttle
        if tell_too:
            system.tell("stopper", m.Heartbeat(rank=0, step_count=1))
        mailbox = system._cells["stopper"].mailbox
        wait_until(lambda: len(mailbox) == (2 if tell_too else 1), timeout=10)
        release.set()
        got = watcher.get(timeout=10)
        assert got is not None and isinstance(got.message, m.Down)
        wait_until(lambda: "stopper" not in system._cells, timeout=10)  # its leftovers are logged by then
    errors = [e for e in logs if e["event"] == "actor stopped with unhandled messages"]
    if tell_too:
        assert [(e["count"], e["kinds"]) for e in errors] == [(1, {"heartbeat": 1})]
    else:
        assert errors == []
    assert [e["count"] for e in logs if e["event"] == "actor stopped before it read watch notifications"] == [1]
