"""The local plane: tensors handed between actors of one process by key.

A producer and the trainer thread that feeds it live in one process; the
trainer publishes its gathered groups without copying them anywhere: the
``TensorRef`` carries a key into this process's table, and the table holds the
tensors (keeping them alive) until the owner drops the key.  A local ref is
meaningless in another process, and opening one there is an error.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

from actorwire.messages.kinds import Plane, TensorRef
from actorwire.transport._errors import BadHandle
from actorwire.transport.planes._layout import view_ref

_lock = threading.Lock()
_table: dict[bytes, dict[str, Any]] = {}
_ids = itertools.count(1)


def put(tensors: dict[str, Any]) -> tuple[bytes, dict[str, TensorRef]]:
    """Hold ``tensors`` under a new key; returns the key and their refs."""
    with _lock:
        key = f"{os.getpid()}:{next(_ids)}".encode()
        _table[key] = dict(tensors)
    return key, {name: view_ref(t, Plane.LOCAL, key) for name, t in tensors.items()}


def get(ref: TensorRef, name: str) -> Any:
    """The live tensor behind a local ref (the one put under ``name``)."""
    if ref.plane is not Plane.LOCAL:
        raise BadHandle(f"not a local tensor: plane {ref.plane.value}")
    pid = ref.handle.split(b":", 1)[0]
    if pid != str(os.getpid()).encode():
        raise BadHandle(f"{name}: a local tensor of process {pid.decode()} cannot be opened in process {os.getpid()}")
    with _lock:
        group = _table.get(ref.handle)
    if group is None or name not in group:
        raise BadHandle(f"{name}: local tensor {ref.handle.decode()} was dropped (its group was released)")
    return group[name]


def drop(key: bytes) -> None:
    """Forget the tensors under ``key`` (a no-op if already dropped)."""
    with _lock:
        _table.pop(key, None)


