"""Weight transfer: the static plan and both state machines, on a virtual clock."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from actorwire import messages as m
from actorwire.actors.testing import ActorHarness
from actorwire.actors.weights._consumer import WeightConsumer
from actorwire.actors.weights._plan import (
    ModuleSource,
    ParamMeta,
    WeightPlan,
    WeightSyncError,
    bitmask,
    build_plan,
    layerwise_groups,
    names_digest,
    resolve_ownership,
)
from actorwire.actors.weights._producer import WeightProducer
from actorwire.transport.planes import _local
from actorwire.transport.planes._serve import ServeRing, TensorImporter

SENDER = "weights/sender/0"
P0, P1 = "weights/producer/0", "weights/producer/1"


def c(cid: int) -> str:
    return f"weights/consumer/{cid}"


# -- the static part --------------------------------------------------------------------------

def test_layerwise_groups_cut_pre_layers_post() -> None:
    names = ["embed.weight", "layers.0.w", "layers.0.b", "layers.1.w", "norm.weight", "head.weight"]
    assert layerwise_groups(names) == [["embed.weight"], ["layers.0.w", "layers.0.b"], ["layers.1.w"],
                                       ["norm.weight", "head.weight"]]


def test_layerwise_groups_refuse_an_interleaved_layer() -> None:
    with pytest.raises(ValueError, match="layer 0 is not contiguous"):
        layerwise_groups(["layers.0.w", "layers.1.w", "layers.0.b"])
    with pytest.raises(ValueError, match="unnumbered names"):
        layerwise_groups(["embed", "layers.0.w", "norm", "layers.1.w"])


def test_ownership_names_orphans_and_disagreeing_ranks() -> None:
    names = ["a", "b", "c"]
    d = names_digest(names)
    assert resolve_ownership(names, [d, d], [bitmask(names, {"a", "b"}), bitmask(names, {"b", "c"})]) == \
        [[0], [0, 1], [1]]
    with pytest.raises(WeightSyncError, match="held by no trainer rank: c"):
        resolve_ownership(names, [d, d], [bitmask(names, {"a"}), bitmask(names, {"b"})])
    with pytest.raises(WeightSyncError, match="rank 1 has"):
        resolve_ownership(names, [d, names_digest(["a", "b", "x"])], [bitmask(names, set(names))] * 2)


def test_metadata_digest_sees_dtype_and_shape() -> None:
    a = [ParamMeta(name="w", dtype="float32", shape=[2])]
    b = [ParamMeta(name="w", dtype="float16", shape=[2])]
    assert names_digest(["w"], a) != names_digest(["w"], b)


def _plan(holders: list[list[int]] | None = None, slots: int = 2) -> WeightPlan:
    meta = [ParamMeta(name=n, dtype="float32", shape=[4]) for n in
            ["embed", "layers.0.w", "layers.0.b", "layers.1.w", "head"]]
    holders = holders or [[0, 1], [0], [0], [1], [1]]
    return build_plan(meta, holders, [P0, P1], slots=slots)


def test_plan_chunks_spread_replicas_and_list_empty_groups() -> None:
    plan = _plan()
    assert plan.group_lens == [1, 2, 1, 1]
    chunks0, empty0 = plan.chunks(0)
    chunks1, _ = plan.chunks(1)
    assert [(ch.group, ch.rank, ch.names) for ch in chunks0] == [
        (0, 0, ["embed"]), (1, 0, ["layers.0.w", "layers.0.b"]), (2, 1, ["layers.1.w"]), (3, 1, ["head"])]
    assert chunks1[0].rank == 1  # the replicated embedding comes from the other holder
    assert empty0 == []
    _, empty = plan.chunks(0, wanted={"layers.1.w"})
    assert empty == [0, 1, 3]
    assert plan.owners(0) == [0, 1] and plan.owned_groups(1) == [0, 2, 3]
    assert plan.chunk_bytes(chunks0[1]) == 32


def test_module_source_refuses_unknown_held_names() -> None:
    with pytest.raises(ValueError, match="not in the model"):
        ModuleSource(torch.nn.Linear(2, 2), held=["nope"])


def test_begin_sync_has_no_default_live_set() -> None:
    with pytest.raises(TypeError):
        m.BeginSync(sync_id=1)  # type: ignore[call-arg]


# -- the producer -----------------------------------------------------------------------------

TENSORS = {n: torch.arange(4, dtype=torch.float32) + i for i, n in
           enumerate(["embed", "layers.0.w", "layers.0.b", "layers.1.w", "head"])}


def producer(rank: int = 0, stall: float = 300.0, **kw: object) -> ActorHarness:
    plan = _plan(**kw)  # type: ignore[arg-type]
    h = ActorHarness(WeightProducer(rank, plan, stall_timeout=stall), name=f"weights/producer/{rank}",
                     peers=[SENDER, c(0), c(1), c(2)])
    h.start()
    for cid in (0, 1, 2):
        h.deliver(m.ReserveServeBuffer(consumer_id=cid, nbytes=64, plan_digest=plan.digest), sender=c(cid))
    h.take()
    return h


@pytest.fixture(autouse=True)
def _close_rings():
    harnesses: list[ActorHarness] = []
    yield harnesses
    for h in harnesses:
        h.close()


def publish(h: ActorHarness, group: int, sync: int = 1) -> list:
    names = h.actor.plan.groups()[group]
    _, refs = _local.put({n: TENSORS[n] for n in names if n in h.actor.served})
    return h.deliver(m.PublishGroup(sync_id=sync, group_idx=group, tensors=refs), sender=SENDER)


def begin(h: ActorHarness, live: list[int], sync: int = 1) -> list:
    return h.deliver(m.BeginSync(sync_id=sync, live_consumer_ids=live), sender=SENDER)


def free(h: ActorHarness, group: int, cid: int, sync: int = 1) -> list:
    return h.deliver(m.FreeGroup(sync_id=sync, group_idx=group, consumer_id=cid), sender=c(cid))


def test_reserve_refuses_another_plan() -> None:
    h = producer()
    out = h.deliver(m.ReserveServeBuffer(consumer_id=3, nbytes=64, plan_digest="0" * 16), sender=c(3))
    assert isinstance(out[0].message, m.SyncFailed) and "rebuild the consumer" in out[0].message.reason
    h.close()


def test_pull_is_packed_into_slot_seq_mod_k_and_reads_back() -> None:
    h = producer()
    begin(h, [0, 1])
    publish(h, 1)
    out = h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=3, names=["layers.0.w", "layers.0.b"]),
                    sender=c(0))
    reply = out[0].message
    assert isinstance(reply, m.PullReply) and reply.seq == 3
    assert reply.tensors["layers.0.b"].offset == 16  # packed 16-byte aligned in one slot
    assert reply.tensors["layers.0.w"].handle.decode().endswith("-0-1")  # consumer 0, slot 3 % 2
    imp = TensorImporter()
    assert torch.equal(imp.open(reply.tensors["layers.0.b"]), TENSORS["layers.0.b"])
    imp.drop()
    h.close()


def test_release_needs_every_live_consumer_and_counts_each_once() -> None:
    h = producer()
    begin(h, [0, 1])
    publish(h, 1)
    assert free(h, 1, 0) == []
    assert free(h, 1, 0) == []  # a duplicate is not a second consumer
    out = free(h, 1, 1)
    assert [s.message for s in out] == [m.GroupsFreed(sync_id=1, groups=[1])]
    assert out[0].target == SENDER
    h.close()


def test_frees_before_the_publish_release_it_at_once() -> None:
    h = producer()
    begin(h, [0])
    free(h, 1, 0)
    out = publish(h, 1)
    assert [s.message for s in out] == [m.GroupsFreed(sync_id=1, groups=[1])]
    h.close()


def test_a_pull_waits_for_its_publish() -> None:
    h = producer()
    begin(h, [0])
    assert h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0)) == []
    out = publish(h, 0)
    assert isinstance(out[0].message, m.PullReply) and out[0].target == c(0)
    h.close()


def test_messages_before_begin_sync_are_kept_for_it() -> None:
    h = producer()
    h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0))
    h.deliver(m.FreeGroup(sync_id=1, group_idx=0, consumer_id=0), sender=c(0))
    begin(h, [0])
    out = publish(h, 0)
    kinds = [type(s.message) for s in out]
    assert kinds == [m.PullReply, m.GroupsFreed]
    h.close()


def test_a_misrouted_pull_fails_the_sync_naming_the_names() -> None:
    h = producer()
    begin(h, [0, 1])
    out = h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["head"]), sender=c(0))
    reasons = {s.target: s.message.reason for s in out}
    assert set(reasons) == {SENDER, c(0), c(1)}
    assert "['head']" in reasons[SENDER] and "misrouted" in reasons[SENDER]
    h.close()


def test_a_gather_error_wakes_every_waiter() -> None:
    h = producer()
    begin(h, [0, 1, 2])
    out = h.deliver(m.SyncFailed(sync_id=1, reason="rank 0 gather loop: OOM"), sender=SENDER)
    assert sorted(s.target for s in out) == sorted([SENDER, c(0), c(1), c(2)])
    # Later pulls fail at once instead of waiting.
    out = h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0))
    assert isinstance(out[0].message, m.SyncFailed)
    h.close()


def test_stale_frees_of_an_earlier_sync_are_ignored() -> None:
    h = producer()
    begin(h, [0])
    publish(h, 0)
    free(h, 0, 0)
    h.deliver(m.EndSync(sync_id=1), sender=SENDER)
    begin(h, [0], sync=2)
    publish(h, 0, sync=2)
    assert free(h, 0, 0, sync=1) == []
    assert h.actor.frees == {}
    h.close()


def test_stall_watchdog_fails_the_sync_after_no_progress() -> None:
    h = producer(stall=300.0)
    begin(h, [0, 1])
    publish(h, 0)
    assert h.advance(200) == []
    free(h, 0, 0)  # progress restarts the clock
    assert h.advance(250) == []
    out = h.advance(60)
    failure = next(s.message for s in out if s.target == SENDER)
    assert "stalled" in failure.reason and "300" in failure.reason and "1: [0" in failure.reason
    h.close()


def test_a_consumer_down_owing_frees_fails_the_sync_but_a_finished_one_does_not() -> None:
    h = producer()
    begin(h, [0, 1])
    for g in h.actor.owned:
        publish(h, g)
        free(h, g, 1)
    assert h.down(c(1)) == []
    out = h.down(c(0))
    assert "consumer 0" in next(s.message.reason for s in out if s.target == SENDER)
    h.close()


def test_end_sync_with_groups_in_flight_is_an_error() -> None:
    h = producer()
    begin(h, [0])
    publish(h, 0)
    out = h.deliver(m.EndSync(sync_id=1), sender=SENDER)
    assert "still in flight" in out[0].message.reason
    h.close()


# -- the consumer -----------------------------------------------------------------------------

def consumer(cid: int = 0, slots: int = 2, tensors: dict | None = None, **kw: object) -> ActorHarness:
    plan = _plan(slots=slots)
    h = ActorHarness(WeightConsumer(cid, plan, tensors=tensors, **kw), name=c(cid), peers=[SENDER, P0, P1])
    return h


def ready(h: ActorHarness) -> None:
    out = h.start()
    assert sorted(s.target for s in out) == [P0, P1]
    assert all(s.message.plan_digest.startswith(h.actor.plan.digest + ":") for s in out)
    h.deliver(m.ServeBufferReserved(consumer_id=h.actor.consumer_id, slots=2, slot_nbytes=64), sender=P0)
    h.deliver(m.ServeBufferReserved(consumer_id=h.actor.consumer_id, slots=2, slot_nbytes=64), sender=P1)


@contextlib.contextmanager
def _serving(**kw: Any) -> Iterator[tuple[ActorHarness, ServeRing]]:
    """A ready consumer and a producer's shm serve ring to answer its pulls from."""
    h = consumer(**kw)
    ready(h)
    ring = ServeRing("shm")
    ring.reserve(0, 2, 64)
    try:
        yield h, ring
    finally:
        ring.close()
        h.close()


def pulls(out: list) -> list[tuple[str, int, list[str]]]:
    return [(s.target, s.message.seq, s.message.names) for s in out if isinstance(s.message, m.PullRequest)]


def test_consumer_waits_for_its_reservations_before_a_sync() -> None:
    h = consumer()
    h.start()
    assert h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER) == []
    h.deliver(m.ServeBufferReserved(consumer_id=0, slots=2, slot_nbytes=64), sender=P0)
    out = h.deliver(m.ServeBufferReserved(consumer_id=0, slots=2, slot_nbytes=64), sender=P1)
    assert pulls(out) == [(P0, 0, ["embed"]), (P0, 1, ["layers.0.w", "layers.0.b"])]


def _serve(ring: ServeRing, h: ActorHarness, sent: tuple[str, int, list[str]], sync: int = 1) -> list:
    _, seq, names = sent
    refs = ring.pack(h.actor.consumer_id, seq, {n: TENSORS[n] for n in names})
    return h.deliver(m.PullReply(sync_id=sync, consumer_id=h.actor.consumer_id, seq=seq, tensors=refs),
                     sender=sent[0])


def test_consumer_pulls_k_at_a_time_frees_every_owner_and_finishes() -> None:
    dst = {n: torch.zeros(4) for n in TENSORS}
    with _serving(tensors=dst) as (h, ring):
        out = h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0, 1]), sender=SENDER)
        first = pulls(out)
        assert len(first) == 2  # K = 2 in flight
        out = _serve(ring, h, first[0])
        # group 0 (embed) is owned by both ranks: both get its free
        frees = [(s.target, s.message.group_idx) for s in out if isinstance(s.message, m.FreeGroup)]
        assert frees == [(P0, 0), (P1, 0)]
        assert pulls(out) == [(P1, 2, ["layers.1.w"])]
        out = _serve(ring, h, first[1]) + _serve(ring, h, (P1, 2, ["layers.1.w"]))
        last = pulls(out)
        out += _serve(ring, h, last[0])
        assert [s.message for s in out if s.target == SENDER] == [m.EndSync(sync_id=1)]
        assert all(torch.equal(dst[n], TENSORS[n]) for n in TENSORS)


def test_a_slot_is_reused_only_after_pull_seq_minus_k_drained() -> None:
    with _serving() as (h, ring):
        first = pulls(h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER))
        assert [p[1] for p in first] == [0, 1]
        # pull 1 drains first: pull 2 would reuse slot 0, still held by pull 0 -> not issued yet
        assert pulls(_serve(ring, h, first[1])) == []
        assert [p[1] for p in pulls(_serve(ring, h, first[0]))] == [2, 3]


def test_consumer_frees_groups_it_does_not_want_at_begin() -> None:
    h = consumer(wanted=["layers.1.w"])
    ready(h)
    out = h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER)
    frees = sorted((s.target, s.message.group_idx) for s in out if isinstance(s.message, m.FreeGroup))
    assert frees == [(P0, 0), (P0, 1), (P1, 0), (P1, 3)]
    assert pulls(out) == [(P1, 0, ["layers.1.w"])]


def test_a_consumer_outside_the_live_set_answers_at_once() -> None:
    h = consumer(cid=2)
    ready(h)
    out = h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0, 1]), sender=SENDER)
    assert [s.message for s in out] == [m.EndSync(sync_id=1)]


def test_a_producer_failure_reaches_every_producer_and_the_trainer() -> None:
    h = consumer()
    ready(h)
    h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER)
    out = h.deliver(m.SyncFailed(sync_id=1, reason="stalled"), sender=P0)
    assert sorted(s.target for s in out) == sorted([SENDER, P0, P1])
    assert all(s.message.reason == "stalled" for s in out)


def test_a_producer_going_down_aborts_the_sync() -> None:
    h = consumer()
    ready(h)
    h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER)
    out = h.down(P1)
    assert "weights/producer/1 went down" in next(s.message.reason for s in out if s.target == SENDER)


def test_a_producer_that_owes_nothing_more_may_leave_during_the_sync() -> None:
    h = consumer(wanted=["layers.1.w"])  # its one pull goes to producer 1; producer 0 is only freed
    ready(h)
    out = h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER)
    assert pulls(out) == [(P1, 0, ["layers.1.w"])]
    assert h.down(P0) == []  # its last trainer sync is over: nothing is lost by its exit
    out = h.down(P1)  # the pull it owes is lost
    assert "weights/producer/1 went down" in next(s.message.reason for s in out if s.target == SENDER)


def test_a_refused_reservation_fails_every_sync() -> None:
    h = consumer()
    h.start()
    h.deliver(m.SyncFailed(sync_id=0, reason="built from another plan"), sender=P0)
    out = h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER)
    assert out[0].message == m.SyncFailed(sync_id=1, reason="built from another plan")


def test_a_reply_with_the_wrong_shape_aborts_naming_the_tensor() -> None:
    dst = {n: torch.zeros(4) for n in TENSORS}
    dst["embed"] = torch.zeros(5)
    with _serving(tensors=dst) as (h, ring):
        first = pulls(h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER))
        out = _serve(ring, h, first[0])
        assert "embed" in next(s.message.reason for s in out if s.target == SENDER)


def test_consumer_reserves_on_producers_that_start_later() -> None:
    h = ActorHarness(WeightConsumer(0, _plan()), name=c(0), peers=[SENDER, P0])
    out = h.start()
    assert [s.target for s in out] == [P0]
    assert h.advance(1.0) == []  # retries quietly while producer 1 does not exist
    h.add_peers(P1)
    out = h.advance(0.2)
    assert [(s.target, type(s.message)) for s in out] == [(P1, m.ReserveServeBuffer)]
    assert "reserve" not in h.ctx.timers


def test_digests_in_served_refs_name_the_bytes_that_moved() -> None:
    import hashlib

    plan = _plan()
    h = ActorHarness(WeightProducer(0, plan, digests=True), name=P0, peers=[SENDER, c(0)])
    h.start()
    h.deliver(m.ReserveServeBuffer(consumer_id=0, nbytes=64, plan_digest=plan.digest), sender=c(0))
    begin(h, [0])
    publish(h, 0)
    out = h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0))
    ref = out[-1].message.tensors["embed"]
    assert ref.digest == hashlib.sha256(TENSORS["embed"].numpy().tobytes()).hexdigest()[:32]
    h.close()


def _shared_producer() -> ActorHarness:
    plan = build_plan([ParamMeta(name=n, dtype="float32", shape=[4]) for n in
                       ["embed", "layers.0.w", "layers.0.b", "layers.1.w", "head"]],
                      [[0, 1], [0], [0], [1], [1]], [P0, P1], workers_per_replica=2)
    h = ActorHarness(WeightProducer(0, plan), name=P0, peers=[SENDER, c(0), c(1), c(2)])
    h.start()
    for cid in (0, 1, 2):
        h.deliver(m.ReserveServeBuffer(consumer_id=cid, nbytes=64, plan_digest=plan.pull_digest(cid, 0)),
                  sender=c(cid))
    return h


def test_consumers_of_one_sharing_group_get_one_pack() -> None:
    h = _shared_producer()
    assert h.actor.plan.pull_digest(0, 0) == h.actor.plan.pull_digest(2, 0)  # same plan: they share ring 0
    assert sorted(h.adapter.ring.consumers) == [0, 1]
    begin(h, [0, 1, 2])
    publish(h, 0)
    assert h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0)) == []
    out = h.deliver(m.PullRequest(sync_id=1, consumer_id=2, seq=0, names=["embed"]), sender=c(2))
    replies = {s.target: s.message for s in out if isinstance(s.message, m.PullReply)}
    assert set(replies) == {c(0), c(2)}  # the last sharer to arrive packed once, for both
    assert replies[c(0)].tensors == replies[c(2)].tensors
    assert h.actor.served_pulls == 1
    h.close()


def test_sharers_with_different_plans_are_refused_naming_both() -> None:
    h = _shared_producer()
    out = h.deliver(m.ReserveServeBuffer(consumer_id=2, nbytes=64, plan_digest=h.actor.plan.digest + ":other"),
                    sender=c(2))
    assert "consumers 0 and 2 share serve ring 0" in out[0].message.reason
    h.close()


# -- effects live in the adapter: handlers only ask it ---------------------------------------


def _bare_producer(**kw: object) -> ActorHarness:
    """A producer whose adapter the test plays by hand (``effects=False``)."""
    plan = _plan()
    h = ActorHarness(WeightProducer(0, plan, **kw), name=P0, peers=[SENDER, c(0), c(1), c(2)],  # type: ignore[arg-type]
                     effects=False)
    h.start()
    return h


def test_the_producer_hands_reservation_and_packing_to_its_adapter() -> None:
    h = _bare_producer()
    io = P0 + "/io"
    out = h.deliver(m.ReserveServeBuffer(consumer_id=0, nbytes=64, plan_digest=h.actor.plan.digest), sender=c(0))
    assert [(s.target, type(s.message)) for s in out] == [(io, m.ReserveRing)]
    out = h.deliver(m.RingReserved(ring=0, slot_nbytes=80), sender=io)
    assert [(s.target, s.message) for s in out] == [(c(0), m.ServeBufferReserved(consumer_id=0, slots=2,
                                                                                 slot_nbytes=80, plane=m.Plane.SHM))]
    begin(h, [0])
    publish(h, 0)
    out = h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0))
    (pack,) = out
    assert pack.target == io and isinstance(pack.message, m.PackPull)
    assert pack.message.tensors["embed"].plane is m.Plane.LOCAL  # the trainer's tensor, not a copy
    packed = {"embed": msgspec_replace(pack.message.tensors["embed"], plane=m.Plane.SHM, handle=b"aws-x-0-0")}
    out = h.deliver(m.PullPacked(ring=0, seq=0, tensors=packed), sender=io)
    assert [(s.target, type(s.message)) for s in out] == [(c(0), m.PullReply)]
    assert out[0].message.tensors == packed


def test_the_producer_serves_each_consumer_on_the_plane_its_host_allows() -> None:
    """Consumers on the producer's host get shm; one elsewhere gets frames, served towards its host."""
    h = _bare_producer(host="node-a")
    io = P0 + "/io"
    reservations = {}
    for cid, host in ((0, "node-a"), (1, "node-b"), (2, "")):  # "": an older consumer, taken as local
        (ring,) = h.deliver(m.ReserveServeBuffer(consumer_id=cid, nbytes=64, plan_digest=h.actor.plan.digest,
                                                 host=host, address=f"10.0.0.{cid}"), sender=c(cid))
        assert ring.target == io
        reservations[cid] = (ring.message.plane, ring.message.toward)
    assert reservations == {0: (m.Plane.SHM, ""), 1: (m.Plane.FRAMES, "10.0.0.1"), 2: (m.Plane.SHM, "")}
    out = h.deliver(m.RingReserved(ring=1, slot_nbytes=80), sender=io)
    assert out[0].message.plane is m.Plane.FRAMES


def test_a_forced_plane_serves_everyone_or_refuses_whom_it_cannot() -> None:
    h = _bare_producer(host="node-a", plane="frames")
    (ring,) = h.deliver(m.ReserveServeBuffer(consumer_id=0, nbytes=64, plan_digest=h.actor.plan.digest,
                                             host="node-a"), sender=c(0))
    assert ring.message.plane is m.Plane.FRAMES  # forced, even on this host
    h = _bare_producer(host="node-a", plane="shm")
    (refusal,) = h.deliver(m.ReserveServeBuffer(consumer_id=1, nbytes=64, plan_digest=h.actor.plan.digest,
                                                host="node-b"), sender=c(1))
    assert isinstance(refusal.message, m.SyncFailed)
    assert refusal.message.reason == "consumer 1 (host node-b): plane shm works within one host only"


def test_a_consumer_reports_its_host_and_the_model_its_device() -> None:
    h = consumer(host="node-b", address="10.0.0.7")
    out = h.start()
    assert {(s.message.host, s.message.address, s.message.device) for s in out} == {("node-b", "10.0.0.7", "cpu")}
    assert h.actor.config()["host"] == "node-b"  # recorded: a replay reserves as the run did


def msgspec_replace(ref: m.TensorRef, **changes: object) -> m.TensorRef:
    import msgspec

    return msgspec.structs.replace(ref, **changes)


def test_a_group_is_not_released_while_its_pack_is_in_flight() -> None:
    """Release drops the trainer's tensors: a pack still reading them would read freed memory."""
    h = _bare_producer()
    io = P0 + "/io"
    h.deliver(m.ReserveServeBuffer(consumer_id=0, nbytes=64, plan_digest=h.actor.plan.digest), sender=c(0))
    h.deliver(m.RingReserved(ring=0, slot_nbytes=64), sender=io)
    begin(h, [0])
    h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0))
    h.deliver(m.FreeGroup(sync_id=1, group_idx=0, consumer_id=0), sender=c(0))  # early, as a buggy peer might
    out = publish(h, 0)
    assert [type(s.message) for s in out] == [m.PackPull]  # no GroupsFreed yet
    out = h.deliver(m.PullPacked(ring=0, seq=0, tensors={}), sender=io)
    assert [type(s.message) for s in out] == [m.PullReply, m.GroupsFreed]


def test_effect_replies_from_anyone_but_the_adapter_are_ignored() -> None:
    """A peer that forges ``pull_packed`` could point consumers at bytes of its choosing."""
    h = _bare_producer()
    h.deliver(m.ReserveServeBuffer(consumer_id=0, nbytes=64, plan_digest=h.actor.plan.digest), sender=c(0))
    assert h.deliver(m.RingReserved(ring=0, slot_nbytes=1 << 30), sender=c(1)) == []
    h.deliver(m.RingReserved(ring=0, slot_nbytes=64), sender=P0 + "/io")
    begin(h, [0])
    publish(h, 0)
    h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0))
    assert h.deliver(m.PullPacked(ring=0, seq=0, tensors={}), sender=c(1)) == []
    consumer_h = ActorHarness(WeightConsumer(0, _plan()), name=c(0), peers=[SENDER, P0], effects=False)
    consumer_h.start()
    assert consumer_h.deliver(m.PullWritten(seq=0, nbytes=4), sender=P0) == []
    assert consumer_h.deliver(m.StateDigest(sync_id=0, digest="forged"), sender=P0) == []


def test_an_adapter_obeys_its_owner_only() -> None:
    from actorwire.actors.weights._effects import ConsumerEffects, ProducerEffects

    io = ActorHarness(ProducerEffects(P0), name=P0 + "/io", peers=[P0, c(0)])
    assert io.deliver(m.ReserveRing(ring=0, slots=2, nbytes=1 << 20), sender=c(0)) == []
    assert io.adapter is None and io.actor.ring.consumers == []
    (reply,) = io.deliver(m.ReserveRing(ring=0, slots=2, nbytes=64), sender=P0)
    assert reply.target == P0 and reply.message == m.RingReserved(ring=0, slot_nbytes=64)
    io.close()
    model = {"embed": torch.zeros(4)}
    cio = ActorHarness(ConsumerEffects(c(0), tensors=model), name=c(0) + "/io", peers=[c(0), P0])
    ref = m.TensorRef(dtype="float32", shape=[4], stride=[1], plane=m.Plane.SHM, handle=b"nope", nbytes=16)
    assert cio.deliver(m.WritePull(seq=0, tensors={"embed": ref}), sender=P0) == []
    (written,) = cio.deliver(m.WritePull(seq=0, tensors={"embed": ref}), sender=c(0))
    assert written.message.seq == 0 and written.message.error  # the bad handle is an error reply, not a crash
    cio.close()


def test_a_reservation_the_adapter_cannot_make_fails_the_consumer_with_the_reason() -> None:
    h = _bare_producer()
    h.deliver(m.ReserveServeBuffer(consumer_id=0, nbytes=64, plan_digest=h.actor.plan.digest), sender=c(0))
    (out,) = h.deliver(m.RingReserved(ring=0, slot_nbytes=0, error="OSError: no space left on device"),
                       sender=P0 + "/io")
    assert out.target == c(0) and isinstance(out.message, m.SyncFailed) and out.message.sync_id == 0
    assert "could not reserve serve ring 0: OSError: no space left on device" in out.message.reason


# -- who may say what (decision 0024) -----------------------------------------------------------

LIAR = "liar/1"


def test_a_consumer_frees_only_for_itself() -> None:
    """A free counted for a consumer that still reads the group released it under that reader
    (its memory handed back to the trainer): any peer could send ``FreeGroup{consumer_id: 1}``."""
    h = producer()
    begin(h, [0, 1])
    publish(h, 1)
    assert free(h, 1, 0) == []
    forged = m.FreeGroup(sync_id=1, group_idx=1, consumer_id=1)
    assert h.deliver(forged, sender=LIAR) == []
    assert h.deliver(forged, sender=c(0)) == []  # a real consumer, speaking for another
    assert h.actor.ignored == {LIAR: 1, c(0): 1}
    assert [s.message for s in free(h, 1, 1)] == [m.GroupsFreed(sync_id=1, groups=[1])]
    h.close()


def test_a_pull_in_another_consumers_name_is_ignored() -> None:
    """The reply went to whoever asked, in the name of a live consumer: the weights to a stranger,
    and the real consumer's shared-ring rendezvous taken."""
    h = producer()
    begin(h, [0])
    publish(h, 0)
    assert h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=LIAR) == []
    assert h.deliver(m.ReserveServeBuffer(consumer_id=0, nbytes=64, plan_digest=h.actor.plan.digest),
                     sender=LIAR) == []
    out = h.deliver(m.PullRequest(sync_id=1, consumer_id=0, seq=0, names=["embed"]), sender=c(0))
    assert [(type(s.message), s.target) for s in out] == [(m.PullReply, c(0))]
    assert h.actor.ignored == {LIAR: 2}
    h.close()


def test_only_the_ranks_trainer_begins_publishes_ends_or_fails_a_sync() -> None:
    h = producer()
    begin(h, [0])
    for forged in (m.BeginSync(sync_id=2, live_consumer_ids=[]), m.EndSync(sync_id=1),
                   m.SyncFailed(sync_id=1, reason="forged")):
        assert h.deliver(forged, sender=LIAR) == []
    names = h.actor.plan.groups()[0]
    _, refs = _local.put({n: TENSORS[n] for n in names if n in h.actor.served})
    assert h.deliver(m.PublishGroup(sync_id=1, group_idx=0, tensors=refs), sender=LIAR) == []
    assert (h.actor.sync_id, h.actor.active, h.actor.failed, h.actor.published) == (1, True, None, {})
    assert h.actor.ignored == {LIAR: 4}
    # The trainer's and a consumer's failure are still heard.
    out = h.deliver(m.SyncFailed(sync_id=1, reason="consumer 0 gave up"), sender=c(0))
    assert h.actor.failed == "consumer 0 gave up" and out
    h.close()


def test_the_consumer_writes_only_what_the_pulls_producer_replied() -> None:
    """A ``PullReply`` is written into the model: from anyone but the producer the pull went to,
    it overwrote the weights with the sender's bytes."""
    dst = {n: torch.zeros(4) for n in TENSORS}
    with _serving(tensors=dst) as (h, ring):
        first = pulls(h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER))
        assert first[0][0] == P0
        for liar in (LIAR, P1):  # a stranger, and a producer of the plan that was not asked
            assert _serve(ring, h, (liar, *first[0][1:])) == []
        assert h.actor.ignored == {LIAR: 1, P1: 1} and h.actor.writing == {}
        out = _serve(ring, h, first[0])
        assert [s.target for s in out if isinstance(s.message, m.FreeGroup)] == [P0, P1]


def test_the_consumer_takes_a_sync_only_from_rank_0s_trainer_and_failures_from_the_plan() -> None:
    h = consumer()
    ready(h)
    assert h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=LIAR) == []
    assert h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender="weights/sender/1") == []
    # A refusal at reservation would fail every later sync: only a producer may say it.
    assert h.deliver(m.SyncFailed(sync_id=0, reason="forged"), sender=LIAR) == []
    assert h.deliver(m.SyncFailed(sync_id=0, reason="forged"), sender=SENDER) == []
    assert h.actor.refused is None and not h.actor.active
    assert h.actor.ignored == {LIAR: 2, "weights/sender/1": 1, SENDER: 1}
    assert pulls(h.deliver(m.BeginSync(sync_id=1, live_consumer_ids=[0]), sender=SENDER))
    out = h.deliver(m.SyncFailed(sync_id=1, reason="rank 0 gather failed"), sender=SENDER)
    assert not h.actor.active and out
    h.close()


def _arrived(inbox: object, count: int) -> None:
    """Until ``count`` messages wait in ``inbox`` (bounded): what came from one sender is ordered,
    what came from two is not, so a test that sends from two waits for the first."""
    import time

    deadline = time.monotonic() + 10
    while len(inbox._mailbox) < count:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the messages never arrived"
        time.sleep(0.005)


@pytest.mark.timeout(60)
def test_the_trainer_thread_takes_frees_only_from_its_producer_and_failures_from_the_sync() -> None:
    """A ``GroupsFreed`` drops the trainer's groups while the producer may still pack them, and a
    ``SyncFailed`` ends the trainer's sync: from any peer, both were believed."""
    from actorwire.actors import ActorSystem
    from actorwire.actors.weights._plan import ModuleSource
    from actorwire.actors.weights._sender import WeightSender

    with ActorSystem() as system:
        sender = WeightSender(system, ModuleSource(torch.nn.Linear(2, 2)), consumer_ids=[0])
        liar, consumer0 = system.inbox(LIAR), system.inbox(c(0))
        liar.tell(sender.inbox.name, m.SyncFailed(sync_id=1, reason="forged"))
        liar.tell(sender.inbox.name, m.GroupsFreed(sync_id=1, groups=[0]))
        _arrived(sender.inbox, 2)
        consumer0.tell(sender.inbox.name, m.GroupsFreed(sync_id=1, groups=[0]))  # a consumer is not the producer
        consumer0.tell(sender.inbox.name, m.EndSync(sync_id=1))
        state: dict = {"done": [], "max": 0, "bytes": 0, "digests": {}}
        assert sender._wait_freed(1, {0}, state) == []  # the consumer's EndSync, nothing before it
        assert state["done"] == [0] and sender.ignored == {LIAR: 2, c(0): 1}
        sender.close()


@pytest.mark.timeout(60)
def test_a_rank_says_only_its_own_held_names() -> None:
    """Ownership is resolved from every rank's held names: one rank could say another's."""
    import threading

    import msgspec

    from actorwire.actors import ActorSystem
    from actorwire.actors.weights._plan import ModuleSource
    from actorwire.actors.weights._sender import WeightSender, WeightSyncError

    with ActorSystem() as system:
        peer1 = system.inbox("weights/sender/1")
        system.inbox("weights/sender/2")

        def rank_1_lies() -> None:
            mine = peer1.get(timeout=10)  # rank 0's held names, told to each peer
            assert mine is not None
            peer1.tell("weights/sender/0", msgspec.structs.replace(mine.message, rank=2))  # rank 2's, said by rank 1
            peer1.tell("weights/sender/0", msgspec.structs.replace(mine.message, rank=1))

        liar = threading.Thread(target=rank_1_lies)
        liar.start()
        try:
            with pytest.raises(WeightSyncError, match=r"no held names from rank\(s\) \[2\]"):
                WeightSender(system, ModuleSource(torch.nn.Linear(2, 2)), consumer_ids=[0], world_size=3,
                             init_timeout=1.0)
        finally:
            liar.join(10)


@pytest.mark.parametrize("name", ["weights/consumers/0", "weights/consumer/1", "consumer0"])
def test_a_consumer_under_a_name_no_trainer_knows_stops_at_once(name: str) -> None:
    """Producers and the trainer know consumer N only as ``<prefix>/consumer/N``: under another name
    it reserved, then waited for a sync that no one could start (its BeginSync came from a sender it
    could not name)."""
    h = ActorHarness(WeightConsumer(0, _plan()), name=name, peers=[SENDER, P0, P1])
    assert h.start() == []
    assert h.ctx.stopped and "must be named '<prefix>/consumer/0'" in h.ctx.failure
    h.close()
