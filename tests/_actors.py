"""Actors used by the runtime tests, importable by child processes as ``_actors:Name``."""

from __future__ import annotations

import os
import signal
import time

from actorwire import messages as m
from actorwire.actors import Actor, Context, handler
from actorwire.actors.control import GpuWorker
from actorwire.actors.weights._consumer import ModelConsumer
from actorwire.messages.reserved import StageAdvisory


class Echo(Actor):
    """Answers every ask with the message it got; counts tells."""

    def __init__(self) -> None:
        self.count = 0

    @handler
    def on_any(self, msg: m.Message, ctx: Context) -> None:
        self.count += 1
        if ctx.correlation_id and not ctx.is_reply:
            ctx.reply(msg)


class Counter(Actor):
    """Checks FIFO per sender: ``Heartbeat.step_count`` must count up by one from each sender."""

    def __init__(self) -> None:
        self.expected: dict[str, int] = {}
        self.errors = 0
        self.total = 0

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        self.total += 1
        want = self.expected.get(ctx.sender or "", 0)
        if msg.step_count != want:
            self.errors += 1
        self.expected[ctx.sender or ""] = msg.step_count + 1

    @handler
    def on_sync_now(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.reply(m.SyncAck(rank=self.errors, step_count=self.total))


class InlineCounter(Counter):
    """A :class:`Counter` that declares it never blocks: remote messages may be handled on the I/O
    thread.  Counts the messages each thread handled (``threads``) and names them on ``Throttle``
    (told to ``notify`` as ``JoinRejected.reason``)."""

    never_blocks = True

    def __init__(self, notify: str = "") -> None:
        super().__init__()
        self.notify = notify
        self.threads: dict[str, int] = {}

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        import threading

        name = threading.current_thread().name.split("-")[1] if "-" in threading.current_thread().name else "actor"
        self.threads[name] = self.threads.get(name, 0) + 1
        super().on_heartbeat(msg, ctx)

    @handler
    def on_throttle(self, msg: m.Throttle, ctx: Context) -> None:
        ctx.reply(m.JoinRejected(reason=",".join(f"{k}={v}" for k, v in sorted(self.threads.items()))))


class Sleeper(Actor):
    """Blocks its handler for ``Throttle``; answers ``SyncNow`` with its pid."""

    @handler
    def on_throttle(self, msg: m.Throttle, ctx: Context) -> None:
        time.sleep(float(os.environ.get("SLEEPER_SECONDS", "5")))

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        pass

    @handler
    def on_sync_now(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.reply(m.SyncAck(rank=os.getpid(), step_count=0))


class Hog(Actor):
    """On ``Throttle``, saturates its process's Python: ``HOG_THREADS`` threads spin for
    ``HOG_SECONDS`` while the handler makes one C call that holds the GIL as long (libc's
    sleep through ``ctypes.PyDLL``, which never releases it).  Nothing in the process runs
    Python meanwhile, the runtime's I/O thread included.  Answers ``SyncNow`` with its pid."""

    @handler
    def on_throttle(self, msg: m.Throttle, ctx: Context) -> None:
        import ctypes
        import threading

        seconds = float(os.environ.get("HOG_SECONDS", "10"))
        until = time.monotonic() + seconds

        def spin() -> None:
            while time.monotonic() < until:
                pass

        for _ in range(int(os.environ.get("HOG_THREADS", "4"))):
            threading.Thread(target=spin, daemon=True).start()
        ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))  # the GIL held in C for `seconds`

    @handler
    def on_sync_now(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.reply(m.SyncAck(rank=os.getpid(), step_count=0))


class Quitter(Actor):
    """Stops itself on ``Shutdown``."""

    @handler
    def on_shutdown(self, msg: m.Shutdown, ctx: Context) -> None:
        ctx.stop()

    @handler
    def on_evicted(self, msg: m.Evicted, ctx: Context) -> None:
        ctx.stop(failure=f"evicted: {msg.detail}")

    @handler
    def on_sync_now(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.reply(m.SyncAck(rank=os.getpid(), step_count=0))



class InlineQuitter(Quitter):
    """A :class:`Quitter` that never blocks: its ``Shutdown`` (and ``ctx.stop()``) runs on the I/O thread."""

    never_blocks = True

class Flooder(Actor):
    """On ``StartEpoch(partition_size=N)`` tells ``target`` N numbered heartbeats, then answers."""

    def __init__(self, target: str = "counter") -> None:
        self.target = target

    @handler
    def on_start_epoch(self, msg: m.StartEpoch, ctx: Context) -> None:
        for i in range(msg.partition_offset, msg.partition_offset + msg.partition_size):
            ctx.tell(self.target, m.Heartbeat(rank=0, step_count=i))
        ctx.reply(m.SyncAck(rank=0, step_count=msg.partition_size))


class Sink(Actor):
    """Records every heartbeat's step count; ``SyncNow`` answers with them (as a StageAdvisory, a reserved kind with a list of counts)."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        self.seen.append(msg.step_count)

    @handler
    def on_sync_now(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.reply(StageAdvisory(counts=self.seen, epochs=[]))


class Roller(Actor):
    """Uses every non-deterministic input: timers, the clock, randomness, asks, broadcast."""

    def __init__(self, rounds: int = 5, partner: str = "echo") -> None:
        self.rounds = rounds
        self.partner = partner
        self.total = 0.0

    def on_start(self, ctx: Context) -> None:
        ctx.start_timer("roll", 0.01, periodic=True)

    @handler
    def on_timer(self, msg: m.TimerFired, ctx: Context) -> None:
        roll = ctx.random.randrange(1000) + ctx.random.random()
        self.total += roll
        ctx.ask(self.partner, m.LrUpdate(rank=msg.count, lr=roll), timeout=5)
        if ctx.now() < 0:  # never true; the read itself is what matters
            ctx.stop()
        if msg.count >= self.rounds:
            ctx.cancel_timer("roll")
            ctx.broadcast("echo*", m.EvalBroadcast(epoch=msg.count, metric=self.total))

    @handler
    def on_reply(self, msg: m.LrUpdate, ctx: Context) -> None:
        ctx.tell("main", m.Heartbeat(rank=msg.rank, step_count=int(msg.lr)))


class ScriptedWorker(Actor):
    """A worker without a model: joins, trains its slice as Batch reports, syncs, evaluates, leaves."""

    def __init__(self, rank: int, world_size: int, run_id: str, batch_ms: float = 5.0) -> None:
        self.rank = rank
        self.world_size = world_size
        self.run_id = run_id
        self.batch_ms = batch_ms
        self.steps = 0

    def on_start(self, ctx: Context) -> None:
        ctx.ask("coordinator", m.JoinRequest(rank=self.rank, world_size=self.world_size, run_id=self.run_id,
                                             model_signature="sig"), timeout=10)

    @handler
    def on_join(self, msg: m.JoinAccepted | m.JoinRejected, ctx: Context) -> None:
        if isinstance(msg, m.JoinRejected):
            ctx.stop()

    @handler
    def on_epoch(self, msg: m.StartEpoch | m.ExtendPartition, ctx: Context) -> None:
        n = msg.partition_size
        for _ in range(n):
            self.steps += 1
            ctx.tell("coordinator", m.Batch(rank=self.rank, batch_ms=self.batch_ms, step_count=self.steps,
                                            batch_loss=1.0 / self.steps))
        ctx.tell("coordinator", m.MetricsMsg(rank=self.rank, epoch=msg.epoch, avg_loss=0.5, batches_processed=n,
                                             epoch_ms=n * self.batch_ms, samples_processed=n,
                                             share_complete_ms=n * self.batch_ms))

    @handler
    def on_sync(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.tell("coordinator", m.SyncAck(rank=self.rank, step_count=self.steps))

    @handler
    def on_eval(self, msg: m.ExecuteEval, ctx: Context) -> None:
        ctx.tell("coordinator", m.EvalResult(rank=self.rank, schedule_id=msg.schedule_id, epoch=msg.epoch,
                                             metric=0.75, elapsed_ms=1.0))

    @handler
    def on_new_id(self, msg: m.RequestNewNcclId, ctx: Context) -> None:
        ctx.tell("coordinator", m.NewNcclIdGenerated(rank=self.rank, uid=b"uid", attempt=msg.attempt))

    @handler
    def on_shutdown(self, msg: m.Shutdown | m.ShutdownWithSave, ctx: Context) -> None:
        ctx.tell("coordinator", m.Exiting(rank=self.rank))
        ctx.stop()

    @handler
    def on_other(self, msg: m.Message, ctx: Context) -> None:
        pass  # heartbeats, roles, aggregates, global steps


class LinearWorker(GpuWorker):
    """A GpuWorker training a linear regression on CPU (gloo), for the control-plane tests."""

    def setup(self) -> None:
        import torch

        torch.manual_seed(0)
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(512, 4, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True)
        self.model = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def train_batch(self, indices: range) -> float:
        import torch

        loss = torch.nn.functional.mse_loss(self.model(self.x[indices.start:indices.stop]),
                                            self.y[indices.start:indices.stop])
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def parameters(self) -> list:
        return list(self.model.parameters())

    def evaluate(self, epoch: int) -> float:
        import torch

        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(self.model(self.x), self.y))


class FaultyConsumer(ModelConsumer):
    """A model consumer that kills (or stops) its own process on pull ``at_seq``: a death mid-sync.

    ``how="kill_when_synced"``: it takes every group and frees it, then dies instead of telling the
    trainer ``EndSync`` (a second for its last free to reach the producer first).
    """

    def __init__(self, consumer_id: int, plan: object, *, factory: str, at_seq: int = -1, how: str = "kill") -> None:
        super().__init__(consumer_id, plan, factory=factory)  # type: ignore[arg-type]
        self.at_seq, self.how = at_seq, how

    @handler
    def on_reply(self, msg: m.PullReply, ctx: Context) -> None:
        if msg.seq == self.at_seq:
            os.kill(os.getpid(), signal.SIGKILL if self.how == "kill" else signal.SIGSTOP)
        super().on_reply(msg, ctx)

    def _done(self, sync_id: int, digest: str | None, ctx: Context) -> None:
        if self.how == "kill_when_synced":
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGKILL)
        super()._done(sync_id, digest, ctx)


class Tally(Actor):
    """Counts heartbeats by sender; ``Throttle`` blocks its handler for $TALLY_SECONDS (default 2)."""

    def __init__(self) -> None:
        self.count = 0
        self.senders: list[str] = []

    @handler
    def on_throttle(self, msg: m.Throttle, ctx: Context) -> None:
        time.sleep(float(os.environ.get("TALLY_SECONDS", "2")))

    @handler
    def on_heartbeat(self, msg: m.Heartbeat, ctx: Context) -> None:
        self.count += 1
        self.senders.append(ctx.sender or "")

    @handler
    def on_sync_now(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.reply(m.SyncAck(rank=len(set(self.senders)), step_count=self.count))


class Notifier(Actor):
    """On ``SyncNow`` tells ``target``; a target that is gone is counted and reported to the asker."""

    def __init__(self, target: str = "gone") -> None:
        self.target = target
        self.missed = 0

    @handler
    def on_sync_now(self, msg: m.SyncNow, ctx: Context) -> None:
        from actorwire.actors import ActorDead

        try:
            ctx.tell(self.target, m.Heartbeat(rank=0, step_count=msg.cycle))
        except ActorDead:
            self.missed += 1
        ctx.reply(m.SyncAck(rank=0, step_count=self.missed))


class Prober(Actor):
    """Watches ``anchor`` and tells it a heartbeat every 0.1 s, as a training rank reports to its
    coordinator; stops when ``anchor`` goes down (its process then leaves)."""

    def on_start(self, ctx: Context) -> None:
        ctx.watch("anchor")
        ctx.start_timer("probe", 0.1, periodic=True)

    @handler
    def on_timer(self, msg: m.TimerFired, ctx: Context) -> None:
        try:
            ctx.tell("anchor", m.Heartbeat(rank=0, step_count=0), timeout=0.5)
        except Exception:  # noqa: BLE001 - the anchor's Down ends this actor
            pass

    @handler
    def on_down(self, msg: m.Down, ctx: Context) -> None:
        ctx.stop()
