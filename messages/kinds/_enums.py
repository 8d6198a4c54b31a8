"""Enumerations carried inside messages.

Every enum is encoded by its *value*, a short lowercase string, so that logs
stay readable and a client in another language needs no table of numbers.
Values are part of the wire protocol: never change one, only add.
"""

from __future__ import annotations

import enum


class IntentKind(str, enum.Enum):
    """What a worker's cooperative ``Intent`` asks the coordinator for."""

    EVAL_NOW = "eval_now"
    CHECKPOINT_NOW = "checkpoint_now"


class SaveReason(str, enum.Enum):
    """Why the coordinator ended the run with ``ShutdownWithSave``."""

    GRACEFUL_SHUTDOWN = "graceful_shutdown"
    MAX_FAILURE_EXCEEDED = "max_failure_exceeded"
    SINGLE_SURVIVOR = "single_survivor"
    ALL_RANKS_LOST = "all_ranks_lost"
    REDUCE_STALL = "reduce_stall"
    CHECKPOINT = "checkpoint"
    #: Fewer ranks than ``min_world_size`` joined or are left to join.
    TOO_FEW_RANKS = "too_few_ranks"


class DownReason(str, enum.Enum):
    """Why a watched actor is gone.

    ``exited``: it announced a clean exit.  ``dead``: its process died (exit
    detection or heartbeat staleness).  ``unreachable``: its process may be
    alive but no traffic has reached us within the staleness timeout.
    """

    EXITED = "exited"
    DEAD = "dead"
    UNREACHABLE = "unreachable"


class Plane(str, enum.Enum):
    """The bulk-tensor transport a :class:`TensorRef` points into."""

    SHM = "shm"
    CUDA_IPC = "cuda_ipc"
    FRAMES = "frames"
    NCCL = "nccl"
    #: Same process: ``handle`` is a key into this process's table of live tensors.
    LOCAL = "local"


class RendezvousRole(str, enum.Enum):
    """The role an NCCL bootstrap hands a rank: make the unique id, or wait for it."""

    GENERATE = "generate"
    WAIT = "wait"


class ErrorCode(str, enum.Enum):
    """Machine-readable cause carried by an ``ErrorReply``."""

    UNKNOWN_TARGET = "unknown_target"
    TARGET_DEAD = "target_dead"
    HANDLER_FAILED = "handler_failed"
    NO_HANDLER = "no_handler"
    BAD_MESSAGE = "bad_message"
    REFUSED = "refused"
    SHUTTING_DOWN = "shutting_down"
    TIMEOUT = "timeout"
    BACKPRESSURE = "backpressure"
