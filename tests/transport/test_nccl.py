"""The NCCL communicator: every health and rendezvous rule on the CPU (a fake library), then on a GPU."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from _fake_nccl import Fabric, FakeNccl

from actorwire.transport.comm import (
    CommError,
    CommTimeout,
    CommUnhealthy,
    NcclCommunicator,
    find_nccl,
)


def comms(n: int, fabric: Fabric | None = None, **kw: Any) -> tuple[Fabric, list[NcclCommunicator]]:
    fabric = fabric or Fabric()
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("init_timeout_s", 5.0)
    return fabric, [NcclCommunicator("cpu", backend=FakeNccl(fabric), **kw) for _ in range(n)]


def on_ranks(fns: list[Callable[[], Any]], timeout: float = 20.0) -> list[Any]:
    """Run one function per rank in threads; their results (exceptions are returned, not raised)."""
    results: list[Any] = [None] * len(fns)

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank hung"
    return results


def formed(n: int, **kw: Any) -> tuple[Fabric, list[NcclCommunicator]]:
    fabric, cs = comms(n, **kw)
    uid = cs[0].new_unique_id()
    assert on_ranks([lambda c=c, r=r: c.init(uid, r, n) for r, c in enumerate(cs)]) == [None] * n
    return fabric, cs


@pytest.fixture(autouse=True)
def _close() -> Any:
    made: list[NcclCommunicator] = []
    original = NcclCommunicator.__init__

    def track(self: NcclCommunicator, *a: Any, **k: Any) -> None:
        original(self, *a, **k)
        made.append(self)

    NcclCommunicator.__init__ = track  # type: ignore[method-assign]
    yield
    NcclCommunicator.__init__ = original  # type: ignore[method-assign]
    for c in made:
        c.close()


def test_every_collective_matches_torch() -> None:
    _, cs = formed(3)
    xs = [torch.arange(6, dtype=torch.float32) * (r + 1) for r in range(3)]
    for op, expect in [("sum", sum(xs)), ("max", torch.stack(xs).amax(0)), ("avg", sum(xs) / 3),
                       ("prod", xs[0] * xs[1] * xs[2]), ("min", torch.stack(xs).amin(0))]:
        ts = [x.clone() for x in xs]
        on_ranks([lambda c=c, t=t, op=op: c.all_reduce(t, op) for c, t in zip(cs, ts)])
        assert all(torch.equal(t, expect) for t in ts), op
    ts = [x.clone() for x in xs]
    on_ranks([lambda c=c, t=t: c.broadcast(t, root=2) for c, t in zip(cs, ts)])
    assert all(torch.equal(t, xs[2]) for t in ts)
    outs = [torch.empty(18) for _ in cs]
    on_ranks([lambda c=c, o=o, x=x: c.all_gather(o, x) for c, o, x in zip(cs, outs, xs)])
    assert all(torch.equal(o, torch.cat(xs)) for o in outs)
    outs = [torch.empty(2) for _ in cs]
    on_ranks([lambda c=c, o=o, x=x: c.reduce_scatter(o, x) for c, o, x in zip(cs, outs, xs)])
    assert torch.equal(torch.cat(outs), sum(xs))


def test_grouped_send_recv_passes_a_ring() -> None:
    _, cs = formed(3)
    got = [torch.empty(4) for _ in cs]

    def step(r: int) -> None:
        with cs[r].group():
            cs[r].send(torch.full((4,), float(r)), (r + 1) % 3)
            cs[r].recv(got[r], (r - 1) % 3)

    assert on_ranks([lambda r=r: step(r) for r in range(3)]) == [None] * 3
    assert [int(g[0]) for g in got] == [2, 0, 1]


def test_bad_input_is_refused_before_nccl() -> None:
    _, (c,) = formed(1)
    lib = c.backend
    lib.calls.clear()
    with pytest.raises(CommError, match="no complex64"):
        c.all_reduce(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(CommError, match="contiguous"):
        c.all_reduce(torch.zeros(4, 4).t())
    with pytest.raises(CommError, match="peer 3 is outside world 1"):
        c.send(torch.zeros(2), 3)
    with pytest.raises(CommError, match="output needs 2"):
        c.all_gather(torch.zeros(5), torch.zeros(2))
    with pytest.raises(CommError, match="unknown op"):
        c.all_reduce(torch.zeros(2), "mean")
    c.all_reduce(torch.zeros(0))  # zero elements: nothing launched, on every rank alike
    assert lib.calls == []
    with pytest.raises(CommError, match="not a valid NCCL rank"):
        c.init(c.new_unique_id(), 2, 2)
    with pytest.raises(CommError, match="128 bytes"):
        c.init(b"short", 0, 1)


def test_init_waits_for_every_rank_under_a_deadline() -> None:
    _, cs = comms(2, init_timeout_s=0.3)
    uid = cs[0].new_unique_id()
    t0 = time.monotonic()
    with pytest.raises(CommTimeout, match="a peer missing"):
        cs[0].init(uid, 0, 2)  # rank 1 never joins
    assert time.monotonic() - t0 < 5
    assert not cs[0].ready


def test_a_dead_generator_fails_init_so_the_coordinator_can_move_on() -> None:
    _, cs = comms(3, init_timeout_s=0.3)
    uid = cs[0].new_unique_id()  # rank 0 generated the id, then died before joining
    results = on_ranks([lambda c=c, r=r: c.init(uid, r, 3) for r, c in enumerate(cs) if r > 0])
    assert all(isinstance(r, CommTimeout) for r in results)


def test_a_missing_peer_times_out_poisons_and_later_calls_fail_at_once() -> None:
    fabric, cs = formed(2, timeout_s=0.3)
    with pytest.raises(CommTimeout, match="rank 0/2 did not complete"):
        cs[0].all_reduce(torch.ones(3))  # rank 1 never submits: a dead peer
    assert not cs[0].healthy and "abort" in cs[0].backend.calls
    t0 = time.monotonic()
    with pytest.raises(CommUnhealthy, match="rank 0/2 is unhealthy"):
        cs[0].broadcast(torch.ones(3))
    assert time.monotonic() - t0 < 0.1


def test_abort_from_another_thread_unblocks_a_pending_operation() -> None:
    _, cs = formed(2, timeout_s=30.0)
    threading.Timer(0.2, cs[0].abort).start()
    t0 = time.monotonic()
    with pytest.raises(CommUnhealthy, match="aborted"):
        cs[0].all_reduce(torch.ones(3))
    assert time.monotonic() - t0 < 5


def test_an_async_error_poisons_the_next_call_and_the_watchdog_reports_it() -> None:
    seen = threading.Event()
    fabric, cs = formed(2, watchdog_interval=0.05, on_unhealthy=lambda reason: seen.set())
    fabric.fail(1)
    assert seen.wait(5), "the watchdog did not report the async error"
    with pytest.raises(CommUnhealthy, match="async error"):
        cs[1].all_reduce(torch.ones(2))
    assert cs[0].healthy  # only rank 1 had the error


def test_survivors_re_form_with_new_ranks_and_world() -> None:
    _, cs = formed(3, timeout_s=0.3)
    # rank 1 is dead: the survivors' reduce stalls until the deadline aborts it
    stalled = on_ranks([lambda: cs[0].all_reduce(torch.ones(1)), lambda: cs[2].all_reduce(torch.ones(1))])
    assert all(isinstance(e, CommTimeout) for e in stalled)
    survivors = [cs[0], cs[2]]
    uid = survivors[1].new_unique_id()  # the coordinator picked old rank 2 as the generator
    assert on_ranks([lambda c=c, r=r: c.init(uid, r, 2) for r, c in enumerate(survivors)]) == [None, None]
    assert [c.world_size for c in survivors] == [2, 2] and [c.rank for c in survivors] == [0, 1]
    assert all(c.reconnect_count == 1 and c.healthy for c in survivors)
    ts = [torch.ones(2), torch.ones(2) * 2]
    on_ranks([lambda c=c, t=t: c.all_reduce(t) for c, t in zip(survivors, ts)])
    assert all(torch.equal(t, torch.full((2,), 3.0)) for t in ts)


class Recorder:
    """Stands in for a communicator's logger."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def _add(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))

    info = warning = error = exception = _add


def test_diagnostics_log_every_submission_with_a_sequence_number() -> None:
    _, (c,) = formed(1, diagnostics=True)
    c.log = rec = Recorder()  # type: ignore[assignment]
    c.all_reduce(torch.ones(4))
    c.broadcast(torch.ones(2))
    subs = [kw for event, kw in rec.events if event == "nccl.submit"]
    assert [(d["seq"], d["op"], d["bytes"], d["rank"], d["world"]) for d in subs] == [
        (1, "all_reduce", 16, 0, 1), (2, "broadcast", 8, 0, 1)]


def test_init_logs_the_nccl_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    _, (c,) = comms(1)
    c.log = rec = Recorder()  # type: ignore[assignment]
    c.init(c.new_unique_id(), 0, 1)
    env = [kw for event, kw in rec.events if event == "nccl.env"]
    assert env == [{**env[0], "nccl_debug": "WARN"}]


def test_a_bad_diagnostics_switch_is_refused(setenv: Callable[[str, str | None], None]) -> None:
    with pytest.raises(ValueError, match="^ACTORWIRE_NCCL_DIAGNOSTICS must be 0 or 1, got 'yes'$"):
        setenv("ACTORWIRE_NCCL_DIAGNOSTICS", "yes")


def test_the_library_path_from_the_environment(setenv: Callable[[str, str | None], None], tmp_path: Any) -> None:
    setenv("ACTORWIRE_NCCL_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(CommError, match="does not exist"):
        find_nccl()
    lib = tmp_path / "libnccl.so.2"
    lib.write_bytes(b"")
    setenv("ACTORWIRE_NCCL_LIBRARY", str(lib))
    assert find_nccl() == (str(lib), "ACTORWIRE_NCCL_LIBRARY")


# -- on a GPU, with the real library ---------------------------------------------------------

@pytest.mark.gpu
def test_single_rank_on_the_gpu() -> None:
    c = NcclCommunicator(0, timeout_s=3.0)
    try:
        c.init(c.new_unique_id(), 0, 1)
        assert c.healthy and "libnccl" in c.backend.origin
        x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        y = x.clone()
        c.all_reduce(y)
        assert torch.equal(y, x)
        c.all_reduce(y, "max")
        b = torch.randn(1000, device="cuda", dtype=torch.bfloat16)
        b2 = b.clone()
        c.broadcast(b2, root=0)
        assert torch.equal(b2, b)
        out = torch.empty(1000, device="cuda", dtype=torch.bfloat16)
        c.all_gather(out, b)
        assert torch.equal(out, b)
        rs = torch.empty(1000, device="cuda", dtype=torch.bfloat16)
        c.reduce_scatter(rs, b)
        assert torch.equal(rs, b)
        got = torch.empty(64, device="cuda")
        with c.group():
            c.send(torch.full((64,), 7.0, device="cuda"), 0)
            c.recv(got, 0)
        assert float(got.sum()) == 7.0 * 64
        # A receive nobody sends to: pending forever, until the deadline aborts it.
        t0 = time.monotonic()
        with pytest.raises(CommError):
            c.recv(torch.empty(16, device="cuda"), 0)
        assert time.monotonic() - t0 < 30
        assert not c.healthy
        with pytest.raises(CommUnhealthy):
            c.all_reduce(y)
        c.init(c.new_unique_id(), 0, 1)  # re-init after the abort
        assert c.healthy and c.reconnect_count == 1
        c.all_reduce(y)
        torch.cuda.synchronize()
    finally:
        c.close()
