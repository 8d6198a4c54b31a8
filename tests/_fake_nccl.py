"""An in-process NCCL for CPU tests: ranks are threads, a Fabric matches their operations.

It implements the backend surface of actorwire.transport.comm._nccl with the same
non-blocking contract as libnccl: init is "in progress" until every rank of
the world joined; an operation completes when every rank submitted its
counterpart (a peer that never does leaves it pending forever, like a dead
peer); async errors can be injected; abort cancels.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import torch

from actorwire.transport.comm._nccl import IN_PROGRESS, SUCCESS

REDUCE = {0: lambda ts: torch.stack(ts).sum(0), 1: lambda ts: torch.stack(ts).prod(0),
          2: lambda ts: torch.stack(ts).amax(0), 3: lambda ts: torch.stack(ts).amin(0),
          4: lambda ts: torch.stack(ts).sum(0) / len(ts)}


class _Op:
    def __init__(self, rank: int, op: str, args: dict[str, Any]) -> None:
        self.rank, self.op, self.args = rank, op, args
        self.input = args["send"].clone() if "send" in args else None
        self.done = False


class _Session:
    def __init__(self) -> None:
        self.world = 0
        self.joined: set[int] = set()
        self.collectives: dict[int, dict[int, _Op]] = {}  # collective index -> rank -> op
        self.p2p: list[_Op] = []


class Fabric:
    """Shared by every rank of a test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[bytes, _Session] = {}
        self.errors: dict[int, int] = {}  # rank -> injected async error code

    def fail(self, rank: int, code: int = 6) -> None:
        self.errors[rank] = code


class FakeComm:
    def __init__(self, session: _Session, rank: int, world: int) -> None:
        self.session, self.rank, self.world = session, rank, world
        self.collective_index = 0
        self.ops: list[_Op] = []
        self.aborted = False


class _Marker:
    def __init__(self, ops: list[_Op]) -> None:
        self.ops = ops

    def query(self) -> bool:
        return all(op.done for op in self.ops)


class FakeNccl:
    origin = "fake (tests)"

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.calls: list[str] = []

    def version(self) -> str:
        return "0.0.0"

    def unique_id(self) -> bytes:
        uid = os.urandom(128)
        with self.fabric.lock:
            self.fabric.sessions[uid] = _Session()
        return uid

    def init_rank(self, world: int, uid: bytes, rank: int, device: Any) -> tuple[int, Any]:
        with self.fabric.lock:
            session = self.fabric.sessions.get(uid)
            if session is None:
                return 4, None  # ncclInvalidArgument: an id nobody generated
            session.world = world
            session.joined.add(rank)
        return IN_PROGRESS, FakeComm(session, rank, world)

    def status(self, comm: Any) -> int:
        if comm.aborted:
            return 3
        code = self.fabric.errors.get(comm.rank)
        if code is not None:
            return code
        with self.fabric.lock:
            return IN_PROGRESS if len(comm.session.joined) < comm.world else SUCCESS

    def describe(self, code: int, comm: Any) -> str:
        return f"fake error {code}"

    def abort(self, comm: Any) -> int:
        comm.aborted = True
        self.calls.append("abort")
        return SUCCESS

    def destroy(self, comm: Any) -> int:
        return SUCCESS

    def call(self, name: str, comm: FakeComm, stream: Any, **args: Any) -> int:
        op = name
        self.calls.append(op)
        entry = _Op(comm.rank, op, args)
        comm.ops.append(entry)
        with self.fabric.lock:
            session = comm.session
            if op in ("send", "recv"):
                session.p2p.append(entry)
                self._match_p2p(session)
            else:
                slot = session.collectives.setdefault(comm.collective_index, {})
                comm.collective_index += 1
                slot[comm.rank] = entry
                if len(slot) == comm.world:
                    self._complete(slot)
        return SUCCESS

    @staticmethod
    def _complete(slot: dict[int, _Op]) -> None:
        ops = [slot[r] for r in sorted(slot)]
        kind = ops[0].op
        inputs = [o.input for o in ops]
        if kind == "all_reduce":
            out = REDUCE[ops[0].args["op"]](inputs)
            for o in ops:
                o.args["recv"].copy_(out)
        elif kind == "broadcast":
            root = ops[0].args["root"]
            for o in ops:
                o.args["recv"].copy_(inputs[root])
        elif kind == "all_gather":
            out = torch.cat([t.reshape(-1) for t in inputs])
            for o in ops:
                o.args["recv"].copy_(out.reshape(o.args["recv"].shape))
        elif kind == "reduce_scatter":
            out = REDUCE[ops[0].args["op"]]([t.reshape(-1) for t in inputs])
            n = ops[0].args["count"]
            for r, o in enumerate(ops):
                o.args["recv"].copy_(out[r * n:(r + 1) * n].reshape(o.args["recv"].shape))
        for o in ops:
            o.done = True

    @staticmethod
    def _match_p2p(session: _Session) -> None:
        for recv in [o for o in session.p2p if o.op == "recv" and not o.done]:
            for send in session.p2p:
                if (send.op == "send" and not send.done and send.rank == recv.args["peer"]
                        and send.args["peer"] == recv.rank):
                    recv.args["recv"].copy_(send.input)
                    send.done = recv.done = True
                    break

    def group_start(self) -> int:
        return SUCCESS

    def group_end(self) -> int:
        return SUCCESS

    def stream(self, device: Any) -> Any:
        return None

    def order_before(self, stream: Any, tensors: list[Any]) -> None:
        pass

    def done_marker(self, comm: FakeComm, stream: Any) -> Any:
        return _Marker(list(comm.ops))

    def order_after(self, marker: Any, tensors: list[Any]) -> None:
        pass
