"""``actorwire bench scale``: one coordinator, many simulated workers.

The coordinator actor runs in this process, as in a real run.  The workers
are simulated by a few processes, each multiplexing its share of ranks: every
rank is a named inbox (``worker/R``) that joins, reports a ``Batch`` ten
times a second and a ``Heartbeat`` every second, answers ``SyncNow`` and
``ExecuteEval``, trains nothing between a ``Throttle`` and the next ``SyncNow`` (as a real rank), reports ``MetricsMsg`` at the end of its slice, and leaves
on ``Shutdown``, all driven by one loop per process.

By default each process is one host with a per-host relay (``actors/control/_relay.py``): its
ranks' batches and heartbeats reach the coordinator as one ``RelayReport`` per tick; with
``--no-relay`` every rank tells the coordinator itself.  Without ``--workers`` the suite steps
through 1k, 2k, 5k, 10k and 20k workers and stops at the first N that does not hold.

Reported:

* ``scale.workers``: the largest N sustained, by what a trainer feels: every epoch completed with
  no rank lost; the ranks kept at least 0.9 of their nominal batch rate from the first epoch's
  start to the last epoch's aggregation (``batch_rate``: the epochs' nominal length over that
  span; time they spend waiting for the control plane, for an epoch to start or a sync to close,
  is time they do not train); aggregation took at most 1 s, median and worst; and the
  coordinator's process stayed under one core.  Each figure is printed against its target, and
  the ``coordinator_cpu`` row says which process saturated first.  Target 10,000 on a 2-core
  machine.
* ``scale.N.coordinator_cpu``: CPU used by the coordinator's process (its actor and its I/O
  thread), in cores, over the run.
* ``scale.N.busiest_sim_cpu``: CPU of the most loaded simulator process, in cores: which side
  saturates first.
* ``scale.N.epoch_ms``: the slowest epoch as the coordinator measured it, against nominal.
* ``scale.N.batch_rate``: the share of their nominal 10 Hz the ranks got to train, over the run
  (target at least 0.9).
* ``scale.N.aggregation_ms`` and ``aggregation_worst_ms``: per epoch, from the last rank's
  ``MetricsMsg`` leaving its process to ``EpochMetrics`` arriving here (median and worst; target
  at most 1,000 ms).
* ``scale.N.lost``: ranks counted lost (none die in this run: any is a false verdict).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from actorwire.actors import _names
from actorwire.actors.bench._harness import Result
from actorwire.messages import Message
from actorwire.messages import kinds as m

RATE_HZ = 10.0


def _simulate(first: int, count: int, world: int, run_id: str, batches: int, relay: bool) -> None:
    """Child: ranks ``first .. first+count-1`` as inboxes driven by one loop; prints JSON events.

    With ``relay`` the process is one host with its relay: the ranks name ``relay/<first>`` in
    their join, their batches, heartbeats, sync acks and epoch reports reach the coordinator as one
    ``RelayReport`` per pass of the loop (the loop fills the relay's buffer, as a relay actor fills
    it from its ranks' tells), and the coordinator's ``Fanout`` to the relay's inbox is told to the
    ranks, in order.
    """
    from actorwire.actors.control._relay import RelayBuffer
    from actorwire.actors.runtime._launch import attach

    system = attach()
    boxes = {r: system.inbox(_names.worker(r)) for r in range(first, first + count)}
    relay_name = f"relay/{first}" if relay else ""
    relay_box = system.inbox(relay_name) if relay else None
    buffer = RelayBuffer()
    for r, box in boxes.items():
        reply = box.ask("coordinator", m.JoinRequest(rank=r, world_size=world, run_id=run_id, model_signature="s",
                                                     relay=relay_name), timeout=120)
        if not isinstance(reply, m.JoinAccepted):
            print(json.dumps({"error": f"rank {r} refused: {reply}"}), flush=True)
            return
    left = {r: 0 for r in boxes}       # batches still to do in the current slice
    slices = {r: 0 for r in boxes}     # ExtendPartition slices taken this epoch
    epoch = {r: 0 for r in boxes}
    steps = {r: 0 for r in boxes}
    throttled: set[int] = set()        # told Throttle: no batch until the next SyncNow
    began = {r: 0.0 for r in boxes}
    done: set[int] = set()
    # When each epoch's last rank of this process reported, written once at the end: a line per
    # rank filled the pipe the parent reads only then (64 KiB: 750 ranks x 3 epochs) and blocked
    # this loop in print(), which read as a coordinator that lost every rank at 3,000 workers.
    last_metrics: dict[int, float] = {}
    period, next_tick, next_beat = 1.0 / RATE_HZ, time.monotonic(), time.monotonic()
    sent = 0
    started = time.monotonic()

    def to_coordinator(r: int, msg: Message) -> None:
        """A SyncAck or MetricsMsg: through the relay (reported once this pass is done), or straight."""
        if relay_box is None:
            boxes[r].tell("coordinator", msg)
        elif isinstance(msg, m.SyncAck):
            buffer.ack(msg)
        elif isinstance(msg, m.MetricsMsg):
            buffer.report(msg)

    def told(r: int, msg: Message) -> None:
        """What the coordinator told rank ``r`` (straight, or through the relay), as a real rank takes it."""
        box = boxes[r]
        if isinstance(msg, m.StartEpoch):
            epoch[r], left[r], slices[r] = msg.epoch, msg.partition_size, 0  # one sample per batch
            began[r] = time.monotonic()
        elif isinstance(msg, m.ExtendPartition):
            left[r] += msg.partition_size
            slices[r] += 1
        elif isinstance(msg, m.SyncNow):
            throttled.discard(r)
            to_coordinator(r, m.SyncAck(rank=r, step_count=steps[r], cycle=msg.cycle))
        elif isinstance(msg, m.Throttle):
            throttled.add(r)
        elif isinstance(msg, m.ExecuteEval):
            box.tell("coordinator", m.EvalResult(rank=r, schedule_id=msg.schedule_id, epoch=msg.epoch,
                                                 metric=0.5, elapsed_ms=0.1))
        elif isinstance(msg, m.RequestNewNcclId):
            box.tell("coordinator", m.NewNcclIdGenerated(rank=r, uid=b"sim", attempt=msg.attempt))
        elif isinstance(msg, (m.Shutdown, m.ShutdownWithSave)):
            box.tell("coordinator", m.Exiting(rank=r))
            done.add(r)

    seq = {r: 0 for r in boxes}
    while len(done) < len(boxes):
        now = time.monotonic()
        if relay_box is not None:  # the coordinator tells this host's ranks through its relay
            for got in relay_box.drain():
                if isinstance(got.message, m.Fanout):
                    fan = got.message
                    one = len(fan.messages) == 1
                    for i, r in enumerate(fan.ranks):
                        if r in boxes:
                            told(r, fan.messages[0 if one else i])
        for r, box in boxes.items():
            for got in box.drain():
                told(r, got.message)
        if now >= next_tick:
            next_tick += period
            for r, box in boxes.items():
                if left[r] > 0 and r not in done and r not in throttled:
                    steps[r] += 1
                    left[r] -= 1
                    if relay_box is not None:
                        buffer.batch(r, period * 1000, steps[r], 1.0)
                    else:
                        box.tell("coordinator", m.Batch(rank=r, batch_ms=period * 1000, step_count=steps[r],
                                                        batch_loss=1.0))
                    sent += 1
                    if left[r] == 0:
                        seq[r] += 1
                        to_coordinator(r, m.MetricsMsg(rank=r, epoch=epoch[r], avg_loss=1.0,
                                                       batches_processed=steps[r],
                                                       epoch_ms=(time.monotonic() - began[r]) * 1000,
                                                       samples_processed=steps[r], extensions=slices[r],
                                                       step_count=steps[r], seq=seq[r]))
                        last_metrics[epoch[r]] = time.monotonic()
        if now >= next_beat:
            next_beat += 1.0
            for r, box in boxes.items():
                if r not in done:
                    if relay_box is not None:
                        buffer.beat(r)
                    else:
                        box.tell("coordinator", m.Heartbeat(rank=r, step_count=steps[r]))
        if relay_box is not None:
            report = buffer.take()
            if report is not None:
                relay_box.tell("coordinator", report)
        time.sleep(max(0.0, min(next_tick, next_beat) - time.monotonic()))
    print(json.dumps({"sent": sent, "seconds": time.monotonic() - started, "last_metrics": last_metrics,
                      "cpu": _cpu_seconds()}), flush=True)
    system.shutdown()


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


#: ``bench scale`` without ``--workers`` steps through these and stops at the first that does not hold.
STEPS = (1000, 2000, 5000, 10_000, 20_000)


def run(workers: int | None = None, *, relay: bool = True, processes: int = 4, epochs: int = 3,
        seconds_per_epoch: float = 3.0, progress: Any = sys.stderr) -> list[Result]:
    """One N (``workers``), or every N of :data:`STEPS` while it holds; ``scale.workers`` is the
    largest N sustained."""
    results: list[Result] = []
    best = 0
    for n in (workers,) if workers else STEPS:
        rows, sustained, note = run_one(n, relay=relay, processes=processes, epochs=epochs,
                                        seconds_per_epoch=seconds_per_epoch, progress=progress)
        results += rows
        if not sustained:
            print(f"  scale: {n} workers not sustained: {note}", file=progress)
            break
        best = n
    how = "through a relay per process" if relay else "each rank straight to the coordinator"
    results.insert(0, Result.against("scale.workers", best, "workers", None,
                                     f"largest N sustained ({how}); target 10,000 on 2 cores"))
    return results


def run_one(workers: int, *, relay: bool, processes: int, epochs: int, seconds_per_epoch: float,
            progress: Any) -> tuple[list[Result], bool, str]:
    from actorwire.actors.control._coordinator import Coordinator
    from actorwire.actors.runtime._launch import settle_heap
    from actorwire.actors.runtime._system import ActorSystem

    batches = int(seconds_per_epoch * RATE_HZ)
    per = -(-workers // processes)
    with ActorSystem() as system:
        inbox = system.inbox("main")
        coordinator = Coordinator(world_size=workers, run_id=system.run_id, num_epochs=epochs,
                                  dataset_size=workers * batches, batch_size=1, sync_every=20,
                                  eval_every=0, final_eval=False, staleness_timeout=30.0, join_timeout=300.0,
                                  metrics_sink="main", tick_interval=0.5,
                                  form_group=False)  # simulated ranks: no process group to form
        system.spawn(coordinator, "coordinator")
        inbox.watch("coordinator")
        children = []
        for i in range(processes):
            first = i * per
            count = min(per, workers - first)
            if count <= 0:
                break
            children.append(subprocess.Popen(
                [sys.executable, "-m", "actorwire.actors.bench._scale", str(first), str(count), str(workers),
                 system.run_id, str(batches), "1" if relay else "0"],
                env={**os.environ, "ACTORWIRE_JOIN": system.endpoint, "ACTORWIRE_RUN_ID": system.run_id},
                stdout=subprocess.PIPE, text=True))
        print(f"  scale: {workers} simulated workers in {len(children)} processes, {epochs} epochs"
              f"{', a relay per process' if relay else ''}", file=progress)
        cpu0, wall0 = _cpu_seconds(), time.monotonic()
        first_start: float | None = None
        arrived: dict[int, float] = {}
        epoch_ms: list[float] = []
        while True:
            got = inbox.get(timeout=120)
            if got is None:
                break
            if isinstance(got.message, m.StartEpoch) and first_start is None:
                first_start = time.monotonic()  # the coordinator shows the run's owner each epoch's start
                settle_heap()  # as actorwire coordinator does at the first epoch: this process stands for it
            elif isinstance(got.message, m.EpochMetrics):
                arrived[got.message.epoch] = time.monotonic()
                epoch_ms.append(got.message.epoch_ms)
                print(f"  scale: {workers}: epoch {got.message.epoch} aggregated", file=progress)
            elif isinstance(got.message, m.Down):
                break
        cpu, wall = _cpu_seconds() - cpu0, time.monotonic() - wall0
        last_metrics: dict[int, float] = {}
        sent = 0
        seconds = 0.0
        sim_cores: list[float] = []
        for child in children:
            try:
                out, _ = child.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                child.kill()
                out, _ = child.communicate()
            for line in out.splitlines():
                row = json.loads(line)
                if "sent" in row:
                    sent += row["sent"]
                    seconds = max(seconds, row["seconds"])
                    sim_cores.append(row["cpu"] / row["seconds"] if row["seconds"] else 0.0)
                    for e, t in row["last_metrics"].items():
                        last_metrics[int(e)] = max(last_metrics.get(int(e), 0.0), t)
                elif "error" in row:
                    print(f"  scale: {row['error']}", file=progress)
        lost = [r for r, st in coordinator.ranks.items() if not st.alive and not st.exited]
        complete = len(arrived) == epochs and not lost and coordinator.end.saved is None
    gc.unfreeze()  # the next step settles its own heap; this one's goes back to the collector
    cores = cpu / wall if wall else 0.0
    nominal_ms = seconds_per_epoch * 1000
    slowest = max(epoch_ms) if epoch_ms else float("inf")
    span = (max(arrived.values()) - first_start) if arrived and first_start is not None else float("inf")
    start = first_start - wall0 if first_start is not None else float("inf")
    rate = (epochs * seconds_per_epoch) / span if complete and span > 0 else 0.0
    latencies = [(arrived[e] - last_metrics[e]) * 1000 for e in arrived if e in last_metrics]
    median = statistics.median(latencies) if latencies else float("inf")
    worst = max(latencies, default=float("inf"))
    busiest = max(sim_cores, default=0.0)
    saturated = ("the coordinator" if cores >= max(0.9, busiest) else
                 "a simulator process" if busiest >= 0.9 else "neither (both under 0.9 core)")
    checks = {"epochs": complete, "batch rate": rate >= 0.9, "aggregation": worst <= 1000.0,
              "coordinator cpu": cores < 1.0}
    sustained = all(checks.values())
    note = "" if sustained else (
        f"{', '.join(k for k, ok in checks.items() if not ok)} off target: {len(arrived)}/{epochs} epochs, "
        f"{len(lost)} lost, batch rate {rate:.2f} of nominal, aggregation {median:.0f}/{worst:.0f} ms "
        f"(median/worst), coordinator {cores:.2f} cores; saturated first: {saturated}")
    k = f"scale.{workers}"
    rows = [
        Result.against(f"{k}.batch_rate", rate, "of 10 Hz", None, "target >= 0.9"),
        Result.against(f"{k}.aggregation_ms", median, "ms", None, "median; target <= 1000"),
        Result.against(f"{k}.aggregation_worst_ms", worst, "ms", None, "target <= 1000"),
        Result.against(f"{k}.lost", float(len(lost)), "ranks", None, "target 0 (none dies)"),
        Result.against(f"{k}.coordinator_cpu", cores, "cores", None, f"target < 1; saturated first: {saturated}"),
        Result.against(f"{k}.busiest_sim_cpu", busiest, "cores", None, "the most loaded simulator process"),
        Result.against(f"{k}.epoch_ms", slowest, "ms", nominal_ms, "slowest epoch against nominal (10 Hz)"),
        Result.against(f"{k}.start_s", start, "s", None, "from launching the simulators to the first epoch: "
                       "their start-up and every rank's join (straight to the coordinator, relay or not)"),
    ]
    return rows, sustained, note


if __name__ == "__main__":
    from actorwire.transport import configure_logging

    configure_logging()  # a program of ours: it may configure its process
    _simulate(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6] == "1")
