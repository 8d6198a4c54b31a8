"""actorwire.transport.comm: collective communication between ranks.

One protocol (:class:`Communicator`) and two implementations: gloo through
torch.distributed for CPUs, and NCCL through ctypes for GPUs.  The unique id
of a group travels on the bus; this package never opens a side channel.
"""

from __future__ import annotations

from actorwire.messages._public import publish as _publish
from actorwire.transport.comm._gloo import GlooCommunicator
from actorwire.transport.comm._nccl import NcclCommunicator
from actorwire.transport.comm._nccl_lib import find_nccl
from actorwire.transport.comm._protocol import (
    CommError,
    CommTimeout,
    CommUnhealthy,
    Communicator,
)

__all__ = [
    "Communicator", "CommError", "CommTimeout", "CommUnhealthy", "GlooCommunicator", "NcclCommunicator",
    "find_nccl",
]
_publish(globals(), __all__)
