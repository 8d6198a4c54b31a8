"""actorwire.transport.planes: bulk tensors, outside the message bus.

A plane moves the bytes; the bus carries only a ``TensorRef`` that locates
them.  ``local`` (one process, by key), ``shm`` (one host, CPU), ``cuda_ipc``
(one host, GPU) and ``frames`` (anywhere, over ZeroMQ).  ``ServeRing`` and
``TensorImporter`` are the weight-transfer's serving buffers and their reader.
Every layout and ``TensorRef`` is built by ``_layout``.
"""

from __future__ import annotations

from actorwire.messages._public import publish as _publish
from actorwire.transport.planes._choose import choose_plane
from actorwire.transport.planes._cuda_ipc import CudaIpcExporter, CudaIpcImporter
from actorwire.transport.planes._frames import FramesExporter, FramesImporter
from actorwire.transport.planes._serve import ServeRing, TensorImporter
from actorwire.transport.planes._shm import ShmExporter, ShmImporter

__all__ = [
    "choose_plane", "ShmExporter", "ShmImporter", "CudaIpcExporter", "CudaIpcImporter", "FramesExporter",
    "FramesImporter", "ServeRing", "TensorImporter",
]
_publish(globals(), __all__)
