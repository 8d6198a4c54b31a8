"""Choosing a tensor plane by locality and device (or by force)."""

from __future__ import annotations

from actorwire.messages.kinds import Plane
from actorwire.transport._errors import InvalidArgument
from actorwire.transport._settings import settings


def choose_plane(device: str, *, same_host: bool, force: Plane | str | None = None,
                 environment: bool = True) -> Plane:
    """``cuda_ipc`` for GPU tensors on one host, ``shm`` for CPU tensors on one host, else ``frames``.

    ``force`` (or ``$ACTORWIRE_PLANE``, unless ``environment`` is False: an actor decides from what
    it was given) overrides the choice; a forced plane that cannot carry the tensor is an error
    naming both.
    """
    forced = force or (settings().plane if environment else None)
    if forced:
        plane = Plane(forced)
        if plane is Plane.CUDA_IPC and not device.startswith("cuda"):
            raise InvalidArgument(f"plane cuda_ipc cannot carry a tensor on {device}")
        if plane is Plane.SHM and device.startswith("cuda"):
            raise InvalidArgument(f"plane shm carries CPU tensors, not one on {device}")
        if plane in (Plane.SHM, Plane.CUDA_IPC) and not same_host:
            raise InvalidArgument(f"plane {plane.value} works within one host only")
        return plane
    if same_host:
        return Plane.CUDA_IPC if device.startswith("cuda") else Plane.SHM
    return Plane.FRAMES


def host_identity() -> str:
    """What this process calls its host when a producer decides whether it shares memory with it:
    ``$ACTORWIRE_HOST`` if set (hosts simulated on one machine set it apart), else the host name."""
    import socket

    return settings().host or socket.gethostname()


def host_address() -> str:
    """Where this host is reached from others: ``$ACTORWIRE_HOST``, else the host name's address."""
    import socket

    if settings().host:
        return str(settings().host)
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
