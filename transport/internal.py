"""What the layer above (``actorwire.actors``) uses of the transport, declared in one place.

Not a user API: users import ``actorwire.actors``, ``actorwire.transport`` and its public
subpackages (``comm``, ``planes``, ``recording``).  ``actorwire.actors`` imports from the
transport only those and this module, never a private module (a test walks its imports), so what
the runtime and the built-in actors depend on can be read here, and a change to the transport's
inside that keeps these names keeps them working.
"""

from __future__ import annotations

from actorwire.transport._endpoints import ipc_endpoint, is_tcp, local_runs, new_node_id
from actorwire.transport._errors import (
    ActorDead,
    ChildFailed,
    ConfigError,
    DeliveryError,
    InvalidArgument,
    JoinRefused,
    NoSuchFile,
    NotAnAsk,
    NotFound,
    SystemClosed,
    UnknownActor,
    WaitTimeout,
    WrongType,
)
from actorwire.transport._log import get_logger
from actorwire.transport._node import Node
from actorwire.transport._security import Security, keygen
from actorwire.transport._settings import Settings, reload_settings, settings
from actorwire.transport.planes import _local as local_plane
from actorwire.transport.planes._choose import choose_plane, host_address, host_identity
from actorwire.transport.planes._cuda_ipc import CudaIpcExporter, CudaIpcImporter, cuda_python
from actorwire.transport.planes._frames import FramesExporter, FramesImporter
from actorwire.transport.planes._serve import ServeRing, TensorImporter
from actorwire.transport.planes._shm import ShmExporter, ShmImporter, sweep

__all__ = [
    # the node: one per process, the runtime's only way to send, receive and watch
    "Node",
    # addresses and the runs of this host
    "ipc_endpoint", "is_tcp", "local_runs", "new_node_id",
    # the errors the runtime raises or catches
    "ActorDead", "ChildFailed", "ConfigError", "DeliveryError", "InvalidArgument", "JoinRefused", "NoSuchFile",
    "NotAnAsk", "NotFound", "SystemClosed", "UnknownActor", "WaitTimeout", "WrongType",
    # settings, logging, security
    "Settings", "settings", "reload_settings", "get_logger", "Security", "keygen",
    # the tensor planes the weight actors drive
    "local_plane", "choose_plane", "host_address", "host_identity", "CudaIpcExporter", "CudaIpcImporter",
    "cuda_python", "FramesExporter", "FramesImporter", "ServeRing", "TensorImporter", "ShmExporter",
    "ShmImporter", "sweep",
]
