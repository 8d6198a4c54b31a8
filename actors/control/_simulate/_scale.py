"""The control plane at scale, in virtual time (``actorwire simulate --scale N``).

One real :class:`~actorwire.actors.control._coordinator.Coordinator` under the test kit's clock,
and ``N`` ranks, :data:`RANKS_PER_HOST` to a host, each host's ranks behind a host relay that
folds their reports with the real :class:`~actorwire.actors.control._relay.RelayBuffer`.  With
``racks`` (the two-level tree), ``hosts_per_rack`` host relays report to a rack relay that folds
their reports again (one entry per rank, every ``rack_interval``; acks and epoch reports at once
when its ranks' answer is complete), and the coordinator talks to the rack relays only; without,
it talks to every host relay (every 0.1 s).  The coordinator's ``Fanout`` goes down the same tree: a rack relay splits it by
host, a host relay tells each rank.

What a process costs is modelled, not measured as the simulation runs (so a run is the same
wherever it runs): every process is a queue that serves one message at a time, for
``message_us + entry_us x entries`` of its time (an entry: one rank's batch, beat, ack, report or
told message).  The defaults are :class:`Costs`, measured on the 2-core VM (see its doc).  A hop
between processes takes ``hop_us``.  The ranks are light (the real rank protocol at 100,000 ranks
would cost the simulation more than it shows): they train at 10 Hz while they have a plan and are
not throttled, beat every second, ack a ``SyncNow`` at once and report at the end of their slice,
as ``bench scale``'s simulated ranks do.

Reported, in virtual time: the messages a second the coordinator takes and sends and its busy
share (a share at 1 is a saturated process), from the first plan on (the joins before it are
asks straight to the coordinator); the same for the busiest relay of each level; the ranks'
batch rate (of 10 Hz, from the first plan to the last aggregate); the aggregation latency (the
last ``MetricsMsg`` of an epoch leaving its rank to the sink's ``EpochMetrics``); and per sync
cycle the time down the tree (the coordinator's ``SyncNow`` to the last rank told), and back up
(the last ack leaving its rank to the cycle's close), median and worst.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import itertools
import random
import statistics
from collections.abc import Callable
from typing import Any

from actorwire.actors import _names
from actorwire.actors.control._coordinator import Coordinator
from actorwire.actors.control._relay import RelayBuffer
from actorwire.actors.runtime._testkit import ActorHarness
from actorwire.messages import Message
from actorwire.messages import kinds as m

RANKS_PER_HOST = 8
RATE_HZ = 10.0
COORD = "coordinator"
SINK = "main"


@dataclasses.dataclass(frozen=True)
class Costs:
    """What a process spends: ``message_us`` a message, and per entry by kind (an entry: one rank's
    batch, beat, ack or epoch report in a ``RelayReport``; one rank of a ``Fanout``).

    The coordinator's figures were measured on the 2-core VM (2026-12-06, at 8234072) with
    ``actorwire simulate --scale 10000 --measure``, which runs the real coordinator through the tree
    on the test kit and times its handler for each kind of report entry (a report holding several
    kinds delivered as one report per kind, in the order the coordinator takes them), the timer's
    tick per rank, and the encoding of what it sends per rank of a ``Fanout``: the median of three
    runs.  ``message_us``: ``actorwire bench scale --workers 5000 --no-relay``, every rank straight to
    the coordinator, kept its process at 0.446 cores for about 72,000 messages a second in and out,
    6.2 us a message with its handler: 7.  A relay is charged ``relay_entry_us`` for any entry (it
    appends to columns).  ``metrics_us`` was measured again after a relay report's epoch reports
    looked at the sync gate and the epoch's end once, not once each: three runs each of the code
    before and after, alternated, medians 2.44 and 1.40 us; the default is 2.15 scaled by that ratio.
    Every kind was scaled the same way after ``RankState`` was slotted (93757b4), by the medians of
    three alternated ``--measure`` runs at 10,000 before / after on a slower VM (2026-12-07): batch
    4.22 / 2.80, beat 1.50 / 0.93, ack 10.66 / 6.82, epoch report 3.65 / 2.98, a rank of the plans
    0.20 / 0.15, join 81.1 / 60.0, the timer 0.62 / 0.26 a rank; a broadcast unchanged (0.02).
    """

    coordinator_message_us: float = 7.0
    batch_us: float = 1.17
    beat_us: float = 0.51
    ack_us: float = 2.30
    metrics_us: float = 1.00
    #: a rank of a ``Fanout`` of one message to every rank behind a relay (grouped once per roster)
    broadcast_us: float = 0.01
    #: a rank of a ``Fanout`` of one message each (an epoch's plans)
    each_us: float = 0.041
    join_us: float = 12.6
    #: the coordinator's timer per rank, at a tick that checks the ranks' silence: the pass itself
    #: (what a tick sends is charged per message).  Measured 2026-12-06: median of three runs, 0.42;
    #: it was 1.39, all ticks' time over the checks, which charged the heartbeats' sends twice and,
    #: at 100,000 ranks, the start-up's ticks (11.4 a rank there); 0.18 since RankState is slotted
    tick_us: float = 0.18
    relay_message_us: float = 7.0
    relay_entry_us: float = 1.0
    hop_us: float = 200.0

    def uniform(self, entry_us: float) -> Costs:
        """The same cost for every kind of the coordinator's entries (``--entry-us``)."""
        return dataclasses.replace(self, batch_us=entry_us, beat_us=entry_us, ack_us=entry_us,
                                   metrics_us=entry_us, broadcast_us=entry_us, each_us=entry_us, join_us=entry_us)

    def coordinator_us(self, message: Message) -> float:
        """What the coordinator spends on ``message``, taken or sent, in microseconds."""
        us = self.coordinator_message_us
        if isinstance(message, m.RelayReport):
            return (us + self.batch_us * len(message.ranks) + self.beat_us * len(message.beats)
                    + self.ack_us * len(message.acks) + self.metrics_us * len(message.metrics))
        if isinstance(message, m.Fanout):
            return us + (self.broadcast_us if len(message.messages) == 1 else self.each_us) * len(message.ranks)
        if isinstance(message, m.JoinRequest):
            return us + self.join_us
        return us

    def relay_us(self, message: Message) -> float:
        """What a relay spends on ``message``, in microseconds: ``relay_entry_us`` an entry of any kind."""
        if isinstance(message, m.RelayReport):
            entries = len(message.ranks) + len(message.beats) + len(message.acks) + len(message.metrics)
        elif isinstance(message, m.Fanout):
            entries = len(message.ranks)
        else:
            entries = 1
        return self.relay_message_us + self.relay_entry_us * entries


class _Queue:
    """One process: a message waits until it is free, then takes its cost."""

    __slots__ = ("name", "free_at", "busy", "messages")

    def __init__(self, name: str) -> None:
        self.name = name
        self.free_at = 0.0
        self.busy = 0.0
        self.messages = 0

    def serve(self, now: float, cost_s: float) -> float:
        start = max(now, self.free_at)
        self.free_at = start + cost_s
        self.busy += cost_s
        self.messages += 1
        return self.free_at


class _Relay:
    """A host relay (its ranks) or a rack relay (its host relays), with the real buffer."""

    def __init__(self, sim: ScaleSimulation, name: str, up: str, interval: float) -> None:
        self.sim = sim
        self.name = name
        self.up = up  # the rack relay, or the coordinator
        self.interval = interval
        self.queue = _Queue(name)
        self.buffer = RelayBuffer()
        self.host_of: dict[int, str] = {}  # rack relay: which host relay each rank is behind
        sim.after(sim.rng.uniform(0.0, 0.1), self.flush)

    def cost(self, message: Message) -> float:
        return self.sim.costs.relay_us(message) / 1e6

    def charge(self, messages: int) -> None:
        """Its ranks' own messages (a batch, a beat, an ack, a report each), taken as they come."""
        c = self.sim.costs
        self.queue.busy += messages * (c.relay_message_us + c.relay_entry_us) / 1e6
        self.queue.messages += messages

    def take(self, report: m.RelayReport) -> None:
        """A host relay's report (at a rack relay): folded into this one's."""
        b = self.buffer
        b.take_report(report)
        if b.due:
            self.report()

    def fan(self, fanout: m.Fanout) -> None:
        sim = self.sim
        one = len(fanout.messages) == 1
        if self.host_of:  # a rack relay: one Fanout per host relay
            split: dict[str, tuple[list[int], list[Message]]] = {}
            for i, rank in enumerate(fanout.ranks):
                message = fanout.messages[0 if one else i]
                self.buffer.told(rank, message)
                ranks, messages = split.setdefault(self.host_of[rank], ([], []))
                ranks.append(rank)
                messages.append(message)
            for host, (ranks, messages) in split.items():
                out = m.Fanout(ranks=ranks, messages=messages[:1] if one else messages)  # type: ignore[arg-type]
                sim.send(self.name, host, out)
            return
        for i, rank in enumerate(fanout.ranks):
            message = fanout.messages[0 if one else i]
            self.buffer.told(rank, message)
            sim.at(sim.now + sim.hop(), functools.partial(sim.rank_told, rank, message))

    def flush(self) -> None:
        if self.sim.done:
            return
        self.report()
        self.sim.after(self.interval, self.flush)

    def report(self) -> None:
        report = self.buffer.take()
        if report is not None:
            self.sim.send(self.name, self.up, report)


@dataclasses.dataclass
class ScaleOutcome:
    """What ``simulate --scale`` measured (virtual time)."""

    ranks: int
    hosts: int
    racks: int
    seconds: float
    epochs: int
    coordinator_msgs_per_s: float
    coordinator_busy: float
    host_relay_busy: float
    rack_relay_busy: float
    batch_rate: float
    aggregation_ms: list[float]
    down_ms: list[float]
    up_ms: list[float]
    cycles: int
    lost: int

    def rows(self) -> list[tuple[str, str, str]]:
        def mw(values: list[float]) -> str:
            if not values:
                return "-"
            return f"{statistics.median(values):.0f} / {max(values):.0f} ms"
        tree = f"{self.hosts:,} host relays" + (f" under {self.racks:,} rack relays" if self.racks else "")
        return [
            ("ranks", f"{self.ranks:,}", f"{RANKS_PER_HOST} a host; {tree}"),
            ("epochs aggregated", f"{self.epochs}", f"in {self.seconds:.1f} s of virtual time; lost {self.lost}"),
            ("coordinator", f"{self.coordinator_msgs_per_s:,.0f} msg/s", f"busy {self.coordinator_busy:.2f} of its time"),
            ("busiest rack relay", f"{self.rack_relay_busy:.3f}" if self.racks else "-", "busy share"),
            ("busiest host relay", f"{self.host_relay_busy:.3f}", "busy share"),
            ("batch rate", f"{self.batch_rate:.3f}", "of 10 Hz (target >= 0.9)"),
            ("aggregation", mw(self.aggregation_ms), "median / worst (target <= 1000 ms)"),
            ("sync cycle, down", mw(self.down_ms), f"SyncNow to the last rank, {self.cycles} cycles"),
            ("sync cycle, up", mw(self.up_ms), "the last ack to the cycle's close"),
        ]


class ScaleSimulation:
    """``ranks`` light ranks under one real coordinator, through host relays (and rack relays)."""

    def __init__(self, ranks: int, *, racks: bool = True, hosts_per_rack: int = 32, epochs: int = 3,
                 seconds_per_epoch: float = 3.0, costs: Costs | None = None, seed: int = 0,
                 rack_interval: float = 0.5) -> None:
        self.n = ranks
        self.costs = costs or Costs()
        self.rng = random.Random(seed)
        self.now = 0.0
        self.done = False
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        batches = int(seconds_per_epoch * RATE_HZ)
        self.epochs = epochs
        self.seconds_per_epoch = seconds_per_epoch
        self.hosts = -(-ranks // RANKS_PER_HOST)
        self.racks = -(-self.hosts // hosts_per_rack) if racks else 0
        self._per_rack = hosts_per_rack
        self.coordinator = Coordinator(world_size=ranks, run_id="scale", num_epochs=epochs,
                                       dataset_size=ranks * batches, batch_size=1, sync_every=20, eval_every=0,
                                       final_eval=False, staleness_timeout=30.0, join_timeout=600.0,
                                       tick_interval=0.5, metrics_sink=SINK, form_group=False)
        self.relays: dict[str, _Relay] = {}
        for rack in range(self.racks):
            self.relays[f"relay/rack{rack}"] = _Relay(self, f"relay/rack{rack}", COORD, rack_interval)
        for host in range(self.hosts):
            up = f"relay/rack{host // hosts_per_rack}" if racks else COORD
            self.relays[f"relay/host{host}"] = relay = _Relay(self, f"relay/host{host}", up, 0.1)
            if racks:
                for rank in range(host * RANKS_PER_HOST, min(ranks, (host + 1) * RANKS_PER_HOST)):
                    self.relays[up].host_of[rank] = relay.name
        peers = [SINK, *self.relays, *(_names.worker(r) for r in range(ranks))]
        self.harness = ActorHarness(self.coordinator, name=COORD, peers=peers)
        self.cq = _Queue(COORD)
        # The light ranks: their state in arrays.
        self.left = [0] * ranks
        self.epoch = [0] * ranks
        self.steps = [0] * ranks
        self.seq = [0] * ranks
        self.slice_batches = [0] * ranks
        #: What every rank reported, by epoch: the flat sums the coordinator's aggregate must equal.
        self.reported: dict[int, list[m.MetricsMsg]] = {}
        self.throttled = [False] * ranks
        self.trained = 0
        self.first_plan: float | None = None
        self.last_metrics: dict[int, float] = {}
        self.aggregated: dict[int, float] = {}
        #: Each epoch's aggregate as the metrics sink got it (with its per-rank lists).
        self.sunk: dict[int, m.EpochMetrics] = {}
        self.armed: dict[int, float] = {}      # cycle -> when the coordinator sent its SyncNow
        self.reached: dict[int, float] = {}    # cycle -> when its last rank was told
        self.acked: dict[int, float] = {}      # cycle -> when its last ack left its rank
        self.closed: dict[int, float] = {}     # cycle -> when the cycle closed
        self._told_sync: dict[int, int] = {}   # cycle -> ranks told so far
        self._cycle = 0
        self.silence_checks = 0  # the coordinator's passes over every rank's silence
        self._at_first_plan = (0, 0.0)  # the coordinator's messages and busy time when training began

    # -- events -------------------------------------------------------------------------------

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), action))

    def after(self, delay: float, action: Callable[[], None]) -> None:
        self.at(self.now + delay, action)

    def hop(self) -> float:
        return self.costs.hop_us / 1e6 * self.rng.uniform(0.75, 1.25)

    def relay_of(self, rank: int) -> str:
        """What the rank names in its join: the relay the coordinator talks to for it."""
        host = rank // RANKS_PER_HOST
        return f"relay/rack{host // self._per_rack}" if self.racks else f"relay/host{host}"

    # -- the processes ------------------------------------------------------------------------

    def send(self, sender: str, target: str, message: Message) -> None:
        """``message`` to ``target``, a hop away, served by its queue in order."""
        def arrive() -> None:
            if target == COORD:
                self.to_coordinator(message, sender)
                return
            relay = self.relays[target]
            done = relay.queue.serve(self.now, relay.cost(message))

            def handle() -> None:
                if isinstance(message, m.RelayReport):
                    relay.take(message)
                elif isinstance(message, m.Fanout):
                    relay.fan(message)
            self.at(done, handle)
        self.at(self.now + self.hop(), arrive)

    def to_coordinator(self, message: Message, sender: str, correlation: int = 0) -> None:
        done = self.cq.serve(self.now, self.costs.coordinator_us(message) / 1e6)

        def handle() -> None:
            self._advance()
            out = self.harness.deliver(message, sender=sender, correlation_id=correlation)
            self._emit(out)
        self.at(done, handle)

    def _tick(self) -> None:
        """The coordinator's timers run on time even when no message comes."""
        if not self.done:
            self._advance()
            self.after(0.5, self._tick)

    def _advance(self) -> None:
        """The coordinator's clock to now; a tick that checked its ranks' silence (a pass over every
        rank) takes ``tick_us`` a rank of its time."""
        if self.harness.ctx.clock < self.now:
            checked = self.coordinator._silence_checked
            out = self.harness.advance(self.now - self.harness.ctx.clock)
            if self.coordinator._silence_checked != checked:
                self.silence_checks += 1
                self.cq.serve(self.now, self.costs.tick_us * len(self.coordinator.ranks) / 1e6)
            self._emit(out)

    def _emit(self, out: list[Any]) -> None:
        """What the coordinator sent: each message costs its process too (encoded, sent)."""
        for sent in out:
            message = sent.message
            if sent.kind == "reply":
                continue
            when = self.cq.serve(self.now, self.costs.coordinator_us(message) / 1e6)
            if isinstance(message, m.Fanout) and isinstance(message.messages[0], m.SyncNow):
                self._cycle = message.messages[0].cycle
                self.armed.setdefault(self._cycle, when)
            elif isinstance(message, m.Fanout) and isinstance(message.messages[0], m.SetGlobalStep):
                self.closed.setdefault(self._cycle, when)
            if sent.target == SINK:
                if isinstance(message, m.EpochMetrics):
                    self.aggregated[message.epoch] = when
                    self.sunk[message.epoch] = message
                    if len(self.aggregated) == self.epochs:
                        self.done = True
                continue
            self.at(when, functools.partial(self.send, COORD, sent.target, message))

    # -- the ranks ----------------------------------------------------------------------------

    def rank_told(self, rank: int, message: Message) -> None:
        if isinstance(message, m.StartEpoch):
            self.epoch[rank], self.left[rank] = message.epoch, message.partition_size
            self.slice_batches[rank] = 0
            if self.first_plan is None:
                self.first_plan = self.now
                self._at_first_plan = (self.cq.messages, self.cq.busy)
        elif isinstance(message, m.ExtendPartition):
            self.left[rank] += message.partition_size
        elif isinstance(message, m.SyncNow):
            self.throttled[rank] = False
            cycle = message.cycle
            told = self._told_sync[cycle] = self._told_sync.get(cycle, 0) + 1
            if told == self.coordinator.roster.in_run:
                self.reached[cycle] = self.now
            self.acked[cycle] = max(self.acked.get(cycle, 0.0), self.now)
            host = self._host(rank)
            host.charge(1)
            host.buffer.ack(m.SyncAck(rank=rank, step_count=self.steps[rank], cycle=cycle, covered=0))
            self._due(rank)
        elif isinstance(message, m.Throttle):
            self.throttled[rank] = True

    def _host(self, rank: int) -> _Relay:
        return self.relays[f"relay/host{rank // RANKS_PER_HOST}"]

    def _due(self, rank: int) -> None:
        relay = self._host(rank)
        if relay.buffer.due:
            relay.report()

    def host_tick(self, host: int) -> None:
        """A tenth of a second on one host: each of its ranks with a plan trains a batch."""
        if self.done:
            return
        relay = self.relays[f"relay/host{host}"]
        told = len(relay.buffer)
        for rank in range(host * RANKS_PER_HOST, min(self.n, (host + 1) * RANKS_PER_HOST)):
            if self.left[rank] > 0 and not self.throttled[rank]:
                self.steps[rank] += 1
                self.left[rank] -= 1
                self.slice_batches[rank] += 1
                self.trained += 1
                loss = 1.0 / (1 + (rank * 7 + self.steps[rank]) % 5)
                relay.buffer.batch(rank, 100.0, self.steps[rank], loss)
                if self.left[rank] == 0:
                    self.seq[rank] += 1
                    done = self.slice_batches[rank]
                    report = m.MetricsMsg(rank=rank, epoch=self.epoch[rank], avg_loss=loss, batches_processed=done,
                                          epoch_ms=done * 100.0, samples_processed=done,
                                          step_count=self.steps[rank], seq=self.seq[rank])
                    self.slice_batches[rank] = 0
                    self.reported.setdefault(report.epoch, []).append(report)
                    relay.buffer.report(report)
                    self.last_metrics[self.epoch[rank]] = self.now
        relay.charge(len(relay.buffer) - told)
        if relay.buffer.due:
            relay.report()
        self.after(1.0 / RATE_HZ, lambda: self.host_tick(host))

    def host_beat(self, host: int) -> None:
        if self.done:
            return
        relay = self.relays[f"relay/host{host}"]
        ranks = range(host * RANKS_PER_HOST, min(self.n, (host + 1) * RANKS_PER_HOST))
        for rank in ranks:
            relay.buffer.beat(rank)
        relay.charge(len(ranks))
        self.after(1.0, lambda: self.host_beat(host))

    # -- the run ------------------------------------------------------------------------------

    def run(self, progress: Callable[[str], None] | None = None) -> ScaleOutcome:
        self.harness.start()
        self.after(0.5, self._tick)
        # The joins (asks, straight to the coordinator; not through the tree), spread over a second.
        for rank in range(self.n):
            join = m.JoinRequest(rank=rank, world_size=self.n, run_id="scale", model_signature="s",
                                 relay=self.relay_of(rank))
            self.at(self.rng.uniform(0.0, 1.0), functools.partial(
                self.to_coordinator, join, _names.worker(join.rank), correlation=10**9 + join.rank))
        for host in range(self.hosts):
            start = self.rng.uniform(0.0, 1.0 / RATE_HZ)
            self.at(1.0 + start, functools.partial(self.host_tick, host))
            self.at(1.0 + start, functools.partial(self.host_beat, host))
        deadline = 60.0 + 4 * self.epochs * self.seconds_per_epoch
        shown = 0
        while self._events and not self.done and self.now < deadline:
            when, _, action = heapq.heappop(self._events)
            self.now = when
            action()
            if progress is not None and int(self.now) > shown:
                shown = int(self.now)
                progress(f"  scale: {self.n:,} ranks: {self.now:.0f} s virtual, {len(self.aggregated)} of "
                         f"{self.epochs} epochs aggregated")
        self._advance()
        return self._outcome()

    def _outcome(self) -> ScaleOutcome:
        span = self.now - (self.first_plan or 0.0)
        aggregation = [(self.aggregated[e] - self.last_metrics[e]) * 1000 for e in self.aggregated
                       if e in self.last_metrics]
        down = [(self.reached[c] - self.armed[c]) * 1000 for c in self.reached if c in self.armed]
        up = [(self.closed[c] - self.acked[c]) * 1000 for c in self.closed if c in self.acked and c in self.reached]
        relays = [r for r in self.relays.values()]
        busiest = {kind: max((r.queue.busy for r in relays if r.name.startswith(kind)), default=0.0) / max(self.now, 1e-9)
                   for kind in ("relay/host", "relay/rack")}
        lost = sum(1 for r in self.coordinator.ranks.values() if not r.alive)
        nominal = self.epochs * self.seconds_per_epoch
        return ScaleOutcome(
            ranks=self.n, hosts=self.hosts, racks=self.racks, seconds=self.now, epochs=len(self.aggregated),
            coordinator_msgs_per_s=(self.cq.messages - self._at_first_plan[0]) / max(span, 1e-9),
            coordinator_busy=(self.cq.busy - self._at_first_plan[1]) / max(span, 1e-9),
            host_relay_busy=busiest["relay/host"], rack_relay_busy=busiest["relay/rack"],
            batch_rate=nominal / span if len(self.aggregated) == self.epochs and span > 0 else 0.0,
            aggregation_ms=aggregation, down_ms=down, up_ms=up, cycles=len(down), lost=lost)


def measure_costs(ranks: int = 10000) -> dict[str, float]:
    """The coordinator's cost per entry of each kind on this machine, in microseconds, for
    :class:`Costs` (``actorwire simulate --scale N --measure`` prints them): a run of ``ranks`` ranks
    through the tree (2 epochs, 3 s each), the real coordinator on the test kit, with its handler timed
    per report entry of each kind (a report of several kinds delivered as one report per kind, in the
    order the coordinator takes them: batches, beats, acks, epoch reports), its timer per rank, and
    the encoding of each ``Fanout`` it sends per rank (one message to all, or one each).  Joins are
    timed per join; the timer per rank: its pass over every rank's silence, when it runs (what a
    tick sends is charged per message like every message, and the ticks between do no pass).  The
    heap is settled at the first plan, as ``actorwire coordinator`` does.  A wall time, so it is
    printed, never checked."""
    import gc
    import time

    from actorwire.actors.runtime._launch import settle_heap
    from actorwire.messages._codec import Codec

    codec = Codec(max_message_size=1 << 30)
    spent: dict[str, list[float]] = {kind: [0.0, 0.0] for kind in (
        "batch_us", "beat_us", "ack_us", "metrics_us", "broadcast_us", "each_us", "join_us", "tick_us")}
    sim = ScaleSimulation(ranks, epochs=2)
    deliver, advance = sim.harness.deliver, sim.harness.advance

    def encoded(out: list[Any]) -> list[Any]:
        for sent in out:
            if isinstance(sent.message, m.Fanout):
                t0 = time.perf_counter()
                codec.encode_message(sent.message)
                kind = "broadcast_us" if len(sent.message.messages) == 1 else "each_us"
                spent[kind][0] += time.perf_counter() - t0
                spent[kind][1] += len(sent.message.ranks)
        return out

    settled = False

    def timed(kind: str, entries: int, call: Callable[[], list[Any]]) -> list[Any]:
        nonlocal settled
        t0 = time.perf_counter()
        out = call()
        spent[kind][0] += time.perf_counter() - t0
        spent[kind][1] += entries
        if not settled and sim.first_plan is not None:
            settled = True
            settle_heap()  # as actorwire coordinator does at its first epoch
        return encoded(out)

    def measured_deliver(message: Message, **options: Any) -> list[Any]:
        if isinstance(message, m.JoinRequest):
            return timed("join_us", 1, lambda: deliver(message, **options))
        if not isinstance(message, m.RelayReport):
            return encoded(deliver(message, **options))
        r = message
        parts = [("batch_us", len(r.ranks), m.RelayReport(ranks=r.ranks, batch_ms=r.batch_ms, data_ms=r.data_ms,
                                                         step_counts=r.step_counts, losses=r.losses)),
                 ("beat_us", len(r.beats), m.RelayReport(beats=r.beats)),
                 ("ack_us", len(r.acks), m.RelayReport(acks=r.acks)),
                 ("metrics_us", len(r.metrics), m.RelayReport(metrics=r.metrics))]
        out: list[Any] = []
        for kind, entries, part in parts:
            if entries:
                out += timed(kind, entries, functools.partial(deliver, part, **options))
        return out

    coordinator = sim.coordinator
    check_silence = coordinator._check_silence

    def measured_check(ctx: Any, now: float, ranks: Callable[[], list[Any]]) -> None:
        # The pass over every rank, when it runs; the rest of a tick is what it sends (charged per
        # message, as every message the coordinator sends) and the checks that it is not yet time.
        checked = coordinator._silence_checked
        t0 = time.perf_counter()
        check_silence(ctx, now, ranks)
        if coordinator._silence_checked != checked:
            spent["tick_us"][0] += time.perf_counter() - t0
            spent["tick_us"][1] += len(coordinator.ranks)

    sim.harness.deliver = measured_deliver  # type: ignore[method-assign]
    sim.harness.advance = lambda seconds: encoded(advance(seconds))  # type: ignore[method-assign]
    coordinator._check_silence = measured_check  # type: ignore[method-assign]
    try:
        sim.run()
    finally:
        if settled:
            gc.unfreeze()  # the heap this run froze goes back to the collector
    return {kind: total / entries * 1e6 for kind, (total, entries) in spent.items() if entries}
