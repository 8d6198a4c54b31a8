"""What a worker needs from a process group: the communicator protocol.

Two implementations: :class:`~actorwire.transport.comm.GlooCommunicator`
(torch.distributed with gloo, for CPU runs and tests) and
:class:`~actorwire.transport.comm.NcclCommunicator` (libnccl through ctypes).
The coordinator drives both through the same messages:
``RequestNewNcclId`` -> ``NewNcclIdGenerated`` -> ``NewNcclSession``.
"""

from __future__ import annotations

from typing import Any, Protocol

from actorwire.messages import ActorwireError


class CommError(ActorwireError, RuntimeError):
    """A collective failed (a peer died, the group was torn down); the group must be re-formed."""


class CommTimeout(CommError):
    """An operation (or init) passed its deadline; the communicator is unhealthy."""


class CommUnhealthy(CommError):
    """The communicator was poisoned by an earlier error, timeout or abort; re-initialise it."""


class Communicator(Protocol):
    """What a worker needs from a process group."""

    @property
    def ready(self) -> bool: ...

    @property
    def world_size(self) -> int: ...

    # Optional: ``formation_timeout_s`` (float), how long ``init`` waits for the other members.  A
    # rank that finds a session waited past half of it in its inbox says at once that it could not
    # join rather than arrive as its peers give up (``actors.control._rank_effects.late_for_group``).
    #
    # Optional: ``abort_from_any_thread`` (bool, default False), whether ``abort()`` may be called
    # from another thread while one waits inside a collective, and frees it.  The workers then abort
    # on the coordinator's ``DeclareDead`` from the thread that receives it: a collective waiting on a
    # dead peer returns at once, not at its own timeout.  NCCL's does; gloo's collectives fail by
    # themselves when a peer's connection drops, and its teardown is not safe from another thread.

    def new_unique_id(self) -> bytes:
        """Create the rendezvous point of the next group (this rank hosts it)."""

    def init(self, uid: bytes, rank: int, world_size: int) -> None:
        """Join the group ``uid`` as ``rank`` of ``world_size`` (tearing down any current one)."""

    def all_reduce_sum(self, tensor: Any) -> None:
        """Sum ``tensor`` in place over the group; raises :class:`CommError` on failure."""

    def abort(self) -> None:
        """Tear the current group down (unblocks nothing on gloo; NCCL aborts in-flight work)."""
