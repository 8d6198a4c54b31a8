"""``actorwire bench worker``: the Worker API on the training thread's hot path.

``worker.report_timing``: microseconds per call (a Batch and an LrUpdate to a
coordinator in another process, plus the control check).  Target: under 10 us.
Reference: the same two messages sent with plain ``tell`` from the same thread.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from actorwire.actors.bench._harness import Result
from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.messages import Message
from actorwire.messages import kinds as m


class AcceptAll(Actor):
    """A coordinator that lets anyone join and ignores every report."""

    @handler
    def on_join(self, msg: m.JoinRequest, ctx: Context) -> None:
        ctx.reply(m.JoinAccepted(rank=msg.rank, world_size=msg.world_size))

    @handler
    def on_other(self, msg: Message, ctx: Context) -> None:
        pass


def run(n: int = 50_000, progress: Any = sys.stderr) -> list[Result]:
    from actorwire.actors.control._worker import Worker
    from actorwire.actors.runtime._system import ActorSystem

    with ActorSystem() as root:
        root.spawn_process({"coordinator": "actorwire.actors.bench._worker:AcceptAll"})
        member = ActorSystem(run_id=root.run_id, join=root.endpoint)
        worker = Worker(rank=0, world_size=1, system=member, model_signature="bench")
        try:
            for _ in range(1000):  # warm-up
                worker.report_timing(batch_ms=1.0, batch_loss=0.5, lr=0.1)
            t0 = time.perf_counter()
            for _ in range(n):
                worker.report_timing(batch_ms=1.0, batch_loss=0.5, lr=0.1)
            ours = (time.perf_counter() - t0) / n * 1e6
            tell = worker.inbox.tell
            t0 = time.perf_counter()
            for i in range(n):
                tell("coordinator", m.Batch(rank=0, batch_ms=1.0, step_count=i, batch_loss=0.5))
                tell("coordinator", m.LrUpdate(rank=0, lr=0.1))
            raw = (time.perf_counter() - t0) / n * 1e6
        finally:
            worker.finish()
    return [Result.against("worker.report_timing", ours, "us", raw, "< 10 us")]
