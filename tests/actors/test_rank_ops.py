"""The work-weighted all-reduce every rank runs (``_rank_ops.weighted_average``), across real threads."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from actorwire import messages as m
from actorwire.actors.control import _rank, _rank_effects
from actorwire.actors.control._rank_ops import carry_out, weighted_average
from actorwire.transport.comm import CommError, GlooCommunicator


class _Sum:
    """A group of ``world`` members in one process: each member's ``all_reduce_sum`` blocks until
    every member has called it, then every buffer holds the sum (dtype and device as given)."""

    def __init__(self, world: int) -> None:
        self.barrier = threading.Barrier(world, timeout=30)
        self.bufs: dict[int, Any] = {}
        self.lock = threading.Lock()
        self.calls = 0  # collectives, counted once for the group (by member 0)

    def member(self, rank: int) -> Any:
        group = self

        class _Member:
            def all_reduce_sum(self, tensor: Any) -> None:
                with group.lock:
                    group.bufs[rank] = tensor.clone()
                    group.calls += rank == 0
                group.barrier.wait()
                total = sum(group.bufs.values())
                group.barrier.wait()
                tensor.copy_(total)

        return _Member()


def _run(members: list[tuple[torch.nn.Module, int, int]], optimizers: list[Any] | None = None,
         group: _Sum | None = None) -> list[Any]:
    group = group or _Sum(len(members))
    out: list[Any] = [None] * len(members)

    def one(i: int) -> None:
        model, weight, steps = members[i]
        try:
            out[i] = weighted_average(group.member(i), list(model.parameters()), weight, steps,
                                      optimizers[i] if optimizers else None)
        except CommError as exc:
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(members))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def _model(value: float, dtype: torch.dtype, device: str = "cpu") -> torch.nn.Module:
    m = torch.nn.Linear(4, 3).to(device=device, dtype=dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(value)
    return m


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_the_average_is_weighted_by_work_and_counts_every_step_in_any_dtype(dtype: torch.dtype) -> None:
    # 1001 and 999 steps: neither is a bfloat16 integer, so a buffer in the parameters' own dtype
    # reported 2000 covered steps only by luck and weighed the ranks wrongly.
    a, b = _model(1.0, dtype), _model(3.0, dtype)
    got = _run([(a, 1001, 1001), (b, 999, 999), (_model(50.0, dtype), 0, 7)])
    assert got == [2007, 2007, 2007]
    want = torch.tensor((1.0 * 1001 + 3.0 * 999) / 2000, dtype=torch.float64).to(dtype)
    for p in a.parameters():
        assert p.dtype == dtype and torch.equal(p, torch.full_like(p, float(want)))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_a_group_where_nobody_holds_the_model_is_a_failed_reduce_that_leaves_parameters_alone() -> None:
    a, b = _model(1.0, torch.float32), _model(2.0, torch.float32)
    got = _run([(a, 0, 3), (b, 0, 4)])
    assert all(isinstance(g, CommError) and "every weight was 0" in str(g) for g in got)
    assert all(torch.equal(p, torch.full_like(p, 1.0)) for p in a.parameters())
    assert all(torch.equal(p, torch.full_like(p, 2.0)) for p in b.parameters())


def _stepped(model: torch.nn.Module, kind: str, scale: float) -> Any:
    """An optimizer of ``kind`` after one step on ``model`` with gradients ``scale`` (state made)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9) if kind == "sgd" else \
        torch.optim.Adam(model.parameters(), lr=0.0)
    for p in model.parameters():
        p.grad = torch.full_like(p, scale)
    opt.step()
    return opt


def test_the_optimizer_state_is_averaged_by_the_same_weights() -> None:
    """After a sync every rank held one model and its own momentum: the next steps moved the ranks'
    models apart at once (local SGD's momentum drift)."""
    a, b = _model(1.0, torch.float32), _model(3.0, torch.float32)
    oa, ob = _stepped(a, "sgd", 1.0), _stepped(b, "sgd", 4.0)
    assert _run([(a, 3, 3), (b, 1, 1)], [oa, ob]) == [4, 4]
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        ma, mb = oa.state[pa]["momentum_buffer"], ob.state[pb]["momentum_buffer"]
        assert torch.equal(ma, mb) and torch.allclose(ma, torch.full_like(ma, (1.0 * 3 + 4.0 * 1) / 4))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_a_sync_with_optimizer_state_is_two_collectives(kind: str) -> None:
    """The layout, then the model, the state, the weight and the steps in one buffer: the state's
    own collective cost every sync a gloo round more (``bench train``: 3 collectives a sync)."""
    a, b = _model(1.0, torch.float32), _model(3.0, torch.float32)
    oa, ob = _stepped(a, kind, 1.0), _stepped(b, kind, 4.0)
    group = _Sum(2)
    assert _run([(a, 3, 3), (b, 1, 1)], [oa, ob], group) == [4, 4]
    assert group.calls == 2
    assert all(torch.equal(p, torch.full_like(p, 1.5)) for p in a.parameters())
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        for key in oa.state[pa]:
            assert torch.equal(oa.state[pa][key], ob.state[pb][key])


@pytest.mark.parametrize("second", ["none", "fresh", "adam"])
def test_state_of_another_layout_or_none_is_left_alone_and_the_collectives_still_match(second: str) -> None:
    """A rank without an optimizer, one before its first step, or one of another kind: the
    parameters are averaged, the states are not (nothing to average them with), and no member
    waits in a collective the others never enter."""
    a, b = _model(1.0, torch.float32), _model(3.0, torch.float32)
    oa = _stepped(a, "sgd", 1.0)
    ob = None if second == "none" else torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9) \
        if second == "fresh" else _stepped(b, "adam", 2.0)
    before = [oa.state[p]["momentum_buffer"].clone() for p in a.parameters()]
    assert _run([(a, 1, 1), (b, 1, 1)], [oa, ob]) == [2, 2]
    assert all(torch.equal(p, torch.full_like(p, 2.0)) for p in a.parameters())
    assert all(torch.equal(oa.state[p]["momentum_buffer"], m) for p, m in zip(a.parameters(), before, strict=True))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_a_rank_that_takes_the_model_before_its_first_step_takes_the_optimizer_state_too(kind: str) -> None:
    """A rank that rejoined (weight 0, no step yet) got the model at its first sync but no state: it
    trained on from zero momentum (Adam: zero moments, step 0) beside ranks with theirs, and its
    state was averaged in only after its first step.  Now it leaves the sync with the holders'."""
    a, b, c = _model(1.0, torch.float32), _model(3.0, torch.float32), _model(9.0, torch.float32)
    oa, ob = _stepped(a, kind, 1.0), _stepped(b, kind, 4.0)
    oc = torch.optim.SGD(c.parameters(), lr=0.1, momentum=0.9) if kind == "sgd" else \
        torch.optim.Adam(c.parameters(), lr=0.1)
    grads = [torch.full_like(p, 7.0) for p in c.parameters()]
    for p, g in zip(c.parameters(), grads, strict=True):
        p.grad = g
    assert _run([(a, 3, 3), (b, 1, 1), (c, 0, 0)], [oa, ob, oc]) == [4, 4, 4]
    for pa, pc, g in zip(a.parameters(), c.parameters(), grads, strict=True):
        assert torch.equal(pa, pc) and pc.grad is g  # the model taken, its gradients untouched
        assert sorted(oa.state[pa], key=str) == sorted(oc.state[pc], key=str)
        for key, value in oa.state[pa].items():
            assert torch.equal(value, oc.state[pc][key]), key


def test_a_taker_without_an_optimizer_leaves_every_state_alone_and_the_collectives_match() -> None:
    a, b, c = _model(1.0, torch.float32), _model(3.0, torch.float32), _model(9.0, torch.float32)
    oa, ob = _stepped(a, "sgd", 1.0), _stepped(b, "sgd", 4.0)
    before = [oa.state[p]["momentum_buffer"].clone() for p in a.parameters()]
    assert _run([(a, 1, 1), (b, 1, 1), (c, 0, 0)], [oa, ob, None]) == [2, 2, 2]
    assert all(torch.equal(oa.state[p]["momentum_buffer"], m) for p, m in zip(a.parameters(), before, strict=True))
    assert all(torch.equal(p, torch.full_like(p, 2.0)) for p in c.parameters())


@pytest.mark.gpu
def test_the_weighted_average_over_real_nccl_on_the_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from actorwire.transport.comm import NcclCommunicator

    c = NcclCommunicator(0, timeout_s=10.0)
    try:
        c.init(c.new_unique_id(), 0, 1)
        m = _model(1.5, torch.bfloat16, "cuda")
        assert weighted_average(c, list(m.parameters()), 1001, 1001) == 1001
        for p in m.parameters():
            assert p.device.type == "cuda" and p.dtype == torch.bfloat16
            assert torch.equal(p, torch.full_like(p, 1.5))
        with pytest.raises(CommError, match="every weight was 0"):
            weighted_average(c, list(m.parameters()), 0, 5)
    finally:
        c.close()


# -- a group session that waited too long in the inbox -----------------------------------------


def test_a_session_that_waited_past_half_the_formation_timeout_is_refused_without_trying() -> None:
    """A rank whose training thread was away (frozen 15 s after its join, in the fault matrix) found
    a session its peers began 7 s before, with an 8 s timeout: it joined, its peers gave up as it
    connected (gloo: connection refused), and the run re-formed twice (67 s against 25 s)."""
    assert _rank_effects.late_for_group(3.9, 8.0) is None
    assert _rank_effects.late_for_group(4.1, 8.0) is not None and "8 s" in _rank_effects.late_for_group(4.1, 8.0)  # type: ignore[operator]
    assert _rank_effects.late_for_group(1000.0, None) is None  # a communicator that does not say its timeout

    class Comm:
        formation_timeout_s = 8.0
        inits: list[int] = []

        def init(self, uid: bytes, rank: int, world_size: int) -> None:
            self.inits.append(rank)

    session = m.NewNcclSession(uid=b"g2", new_rank=1, new_world_size=3, attempt=2)
    protocol = _rank.RankProtocol(1, 3)
    clock = [100.0]

    def run(received_at: float | None) -> list[Any]:
        out = carry_out(_rank.FormGroup(session), protocol, Comm(), parameters=list, evaluate=None,  # type: ignore[arg-type]
                        checkpoint=None, now=lambda: clock[0], received_at=received_at)
        assert out is not None
        return out

    late = run(received_at=93.0)
    assert Comm.inits == [] and [type(e.message) for e in late if isinstance(e, _rank.Send)] == [m.SessionFailed]
    assert "waited 7.0 s" in next(e.message.reason for e in late if isinstance(e, _rank.Send))
    assert run(received_at=97.0) == [] and Comm.inits == [1]  # fresh: joined
    assert run(received_at=None) == [] and Comm.inits == [1, 1]  # no stamp: joined
    assert GlooCommunicator(timeout_s=8).formation_timeout_s == 8.0


def test_serving_a_session_forgets_every_older_one_a_driver_noted() -> None:
    """The GpuWorker and the simulator note when each session came; one a newer session overtook is
    never served, and its entry stayed for the driver's life (one per formation attempt)."""
    came = {(b"g1", 1): 1.0, (b"g2", 2): 2.0, (b"g3", 3): 3.0, (b"g4", 4): 4.0}
    assert _rank_effects.session_served(came, (b"g3", 3), 9.0) == 3.0
    assert came == {(b"g4", 4): 4.0}  # a newer one, still to be served
    assert _rank_effects.session_served(came, (b"g5", 5), 9.0) == 9.0  # never noted: it came now
    assert came == {}
