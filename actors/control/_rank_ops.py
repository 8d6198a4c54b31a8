"""What every data-parallel rank does the same way, embedded (``Worker``) or as an actor (``GpuWorker``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from actorwire.actors.control import _rank, _rank_effects
from actorwire.messages.kinds import Checkpoint, CheckpointResult, EvalResult, ExecuteEval, NewNcclSession
from actorwire.transport.comm import CommError, Communicator


def optimizer_state(optimizer: Any, params: list[Any]) -> list[Any]:
    """The floating-point tensors of ``optimizer``'s state for ``params``, in parameter order and key
    order (SGD's momentum buffers, Adam's moments and step); empty before its first step."""
    import torch

    if optimizer is None:
        return []
    tensors = []
    for p in params:
        state = optimizer.state.get(p, {})
        for key in sorted(state, key=str):
            value = state[key]
            if torch.is_tensor(value) and value.is_floating_point() and value.numel():
                tensors.append(value)
    return tensors


def _layout(comm: Communicator, state: list[Any], device: Any) -> tuple[float, float, bool]:
    """One collective of four float64 numbers, the same on every member: [members, members with
    state, sum of sizes, sum of squared sizes] (all sizes are equal exactly when sum == k*n and sum
    of squares == k*n*n).  Returns the members, those with state, and whether every one holds state
    of this member's size."""
    import torch

    n = float(sum(t.numel() for t in state))
    layout = torch.tensor([1.0, 1.0 if state else 0.0, n, n * n], dtype=torch.float64, device=device)
    comm.all_reduce_sum(layout)
    members, holding, sizes, squares = (float(x) for x in layout)
    return members, holding, bool(state) and holding == members and sizes == members * n and squares == members * n * n


def _materialize(optimizer: Any, params: list[Any]) -> None:
    """Give ``optimizer`` its state (zeros of the layout its first step makes) without moving the
    parameters or their gradients: one step on zero gradients, the parameters put back after."""
    import torch

    saved = [p.detach().clone() for p in params]
    grads = [p.grad for p in params]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    with torch.no_grad():
        for p, s in zip(params, saved, strict=True):
            p.copy_(s)
    for p, g in zip(params, grads, strict=True):
        p.grad = g


def _shared_state(comm: Communicator, optimizer: Any, params: list[Any], weight: int,
                  device: Any) -> tuple[list[Any], bool]:
    """This member's optimizer state and whether every member holds state of its layout.

    A member that takes the others' model (weight 0: it joined late or rejoined) before its own
    first step has no state: it would train on from zero momentum (or Adam's moments and step at
    0) beside ranks with theirs.  When some members hold state and others do not, those without
    that take the model make theirs (zeros, by one step on zero gradients) and a second layout
    collective decides; the average then gives them the holders' state, as it gives them the
    model."""
    state = optimizer_state(optimizer, params)
    members, holding, shared = _layout(comm, state, device)
    if 0 < holding < members:  # every member sees the same numbers, so every one takes this branch
        if not state and optimizer is not None and weight == 0:
            _materialize(optimizer, params)
            state = optimizer_state(optimizer, params)
        _, _, shared = _layout(comm, state, device)
    return state, shared


def weighted_average(comm: Communicator, params: list[Any], weight: int, steps: int = 0,
                     optimizer: Any = None) -> int:
    """Work-weighted all-reduce: parameters weighed by ``weight`` (``_rank.reduce_weight``: the steps
    since the last sync, or 0 for a rank that takes the others' model), summed, divided once.

    ``steps`` (this rank's since its last sync) are summed in the same collective: the total, the
    steps the average covers, is returned.  With ``optimizer``, its state (momentum, moments) is
    averaged by the same weights, so every rank leaves the sync with one training state, not one
    model and as many momenta; that is done only when every member has state of one layout (a rank
    without an optimizer has none): a first collective of four float64 numbers says so, the same on
    every member.  A rank that takes the model (weight 0) before its first step makes its state and
    takes the holders' with the model (``_shared_state``).  Raises ``CommError`` when the group is broken.
    """
    import torch
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    with torch.no_grad():
        flat = parameters_to_vector(params)
        state, shared = _shared_state(comm, optimizer, params, weight, flat.device)
        # Summed in at least float32: in a half-precision buffer the weights and the step count
        # round (bfloat16 holds integers exactly only up to 256), so the average and the steps it
        # reports would be off.  float32 holds both exactly up to 2**24.
        dtype = torch.promote_types(flat.dtype, torch.float32)
        w = float(weight)
        # One collective for the model, the optimizer's state (when every member holds one layout:
        # the layout collective said so to all alike) and the weight and steps: a second one for the
        # state cost a sync a gloo round more (bench train: three collectives a sync, now two).
        parts = [flat.to(dtype) * w]
        if shared:
            parts += [t.reshape(-1).to(dtype) * w for t in state]
        parts.append(torch.tensor([w, float(steps)], dtype=dtype, device=flat.device))
        buf = torch.cat(parts)
        comm.all_reduce_sum(buf)
        total = float(buf[-2])
        if total <= 0:
            # Nobody in the group holds the run's model: averaging would keep every rank's own.
            raise CommError("no member of the group holds the run's model (every weight was 0)")
        n = flat.numel()
        averaged = buf[:-2] / total
        vector_to_parameters(averaged[:n].to(flat.dtype), params)
        if shared:
            offset = n
            for t in state:
                t.copy_(averaged[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
        return int(round(float(buf[-1])))


def all_reduce(comm: Communicator | None, params: list[Any], weight: int,
               steps: int = 0, optimizer: Any = None) -> tuple[str | None, int | None]:
    """The work-weighted all-reduce, or nothing without parameters or a group: the error, if any, and
    the steps the average covered (None when no collective ran)."""
    if not params or comm is None:
        return None, None
    try:
        return None, weighted_average(comm, params, weight, steps, optimizer)
    except CommError as exc:
        return str(exc), None


#: The group id a rank without a communicator hands out when asked for one.
NO_GROUP = b"no-communicator"


def form_group(comm: Communicator | None, session: NewNcclSession) -> str | None:
    """Join the group ``session`` describes; any error forming it is a formation failure, said."""
    if comm is None:
        return None
    try:
        comm.init(session.uid, session.new_rank, session.new_world_size)
    except CommError as exc:
        return str(exc)
    return None


def new_group_id(comm: Communicator) -> tuple[bytes | None, str | None]:
    """A new group's id, or the error making it."""
    try:
        return comm.new_unique_id(), None
    except CommError as exc:
        return None, str(exc)


def run_eval(rank: int, msg: ExecuteEval, fn: Callable[[int], float] | None) -> EvalResult:
    """Run an eval; a failure (or no eval function) becomes ``error`` with a NaN metric."""
    t0 = time.monotonic()
    metric = float("nan")
    error: str | None = "no eval function given"
    if fn is not None:
        try:
            metric, error = float(fn(msg.epoch)), None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return EvalResult(rank=rank, schedule_id=msg.schedule_id, epoch=msg.epoch, metric=metric,
                      elapsed_ms=(time.monotonic() - t0) * 1000, error=error)


def run_checkpoint(rank: int, msg: Checkpoint, fn: Callable[[int], str | None] | None) -> CheckpointResult:
    """Run a checkpoint; a failure (or no checkpoint function) becomes ``error``."""
    t0 = time.monotonic()
    path: str | None = None
    error: str | None = "no checkpoint function given"
    if fn is not None:
        try:
            path, error = fn(msg.version), None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return CheckpointResult(rank=rank, version=msg.version, elapsed_ms=(time.monotonic() - t0) * 1000,
                            error=error, path=path)


def carry_out(effect: _rank.Effect, protocol: _rank.RankProtocol, comm: Communicator | None, *,
              parameters: Callable[[], list[Any]], evaluate: Callable[[int], float] | None,
              checkpoint: Callable[[int], str | None] | None, now: Callable[[], float],
              optimizer: Any = None, received_at: float | None = None) -> list[_rank.Effect] | None:
    """Carry out one of the effects every real rank runs the same way (the all-reduce, forming a group,
    making its id, an abort, an eval, a checkpoint), in the calling thread; the protocol's answer
    to its result comes back.  None for the effects the driver carries out itself (``Send``,
    ``Log``, ``Ended``, ``RunEpochFn``): how it talks and leaves is its own.  ``received_at``: when
    the message being served came into the inbox (``time.monotonic``), for a session that waited
    too long to be joined (:func:`~._rank_effects.late_for_group`)."""
    if isinstance(effect, _rank.AllReduce):
        error, covered = all_reduce(comm, parameters(), effect.weight, effect.steps, optimizer)
        return protocol.sync_done(effect.cycle, error, now(), covered)
    if isinstance(effect, _rank.FormGroup):
        late = None
        if received_at is not None:
            late = _rank_effects.late_for_group(now() - received_at, getattr(comm, "formation_timeout_s", None))
        return protocol.group_formed(effect.session.attempt, late or form_group(comm, effect.session), now())
    if isinstance(effect, _rank.MakeGroupId):
        if comm is None:
            # No communicator, nothing to form (joining the group is a no-op here): a nominal id
            # lets the others go on at once instead of after the coordinator's rendezvous timeout.
            return protocol.group_id_made(effect.attempt, NO_GROUP, None)
        return protocol.group_id_made(effect.attempt, *new_group_id(comm))
    if isinstance(effect, _rank.AbortGroup):
        if comm is not None:
            comm.abort()
        return []
    if isinstance(effect, _rank.Evaluate):
        return protocol.evaluated(run_eval(protocol.rank, effect.request, evaluate))
    if isinstance(effect, _rank.SaveCheckpoint):
        return protocol.checkpointed(run_checkpoint(protocol.rank, effect.request, checkpoint))
    return None
