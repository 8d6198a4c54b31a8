"""The CPU communicator: torch.distributed with the gloo backend.

For gloo the "unique id" is the address of a TCP store that the *generating*
rank hosts (as NCCL's unique id encodes the generator's bootstrap address), so
re-forming the group after a death works across hosts, not only on one.

The address other ranks reach this one at is, in order: ``host`` when given,
``$ACTORWIRE_HOST``, the local interface that routes towards ``towards`` (an
endpoint: the Worker passes its system's root endpoint), loopback.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

from actorwire.transport._endpoints import is_tcp, local_address_towards, tcp_host
from actorwire.transport._settings import settings
from actorwire.transport.comm._protocol import CommError

_HOSTED_AT_MOST = 8


class GlooCommunicator:
    """torch.distributed with the gloo backend; each (re-)formation gets a fresh TCP store."""

    def __init__(self, timeout_s: float = 30.0, host: str | None = None, towards: str | None = None) -> None:
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.host = host
        #: An endpoint (the coordinator's) whose route picks the address peers reach this rank at.
        self.towards = towards
        # The TCP stores this rank hosts, by the id it announced: each lives until a group is formed
        # from a later one (ranks still joining an announced attempt must find its store there).
        self._hosted: dict[bytes, Any] = {}
        self._rank = -1
        self._world = 0
        self._group = False

    @property
    def ready(self) -> bool:
        return self._group

    @property
    def formation_timeout_s(self) -> float:
        """How long ``init`` waits for the group's other members (the store's timeout)."""
        return self.timeout.total_seconds()

    @property
    def world_size(self) -> int:
        return self._world

    def new_unique_id(self) -> bytes:
        import torch.distributed as dist

        host = self.address()
        try:
            store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False, timeout=self.timeout)
        except Exception as exc:
            raise CommError(f"could not host a TCP store on {host}: {exc}") from exc
        uid = f"{host}:{store.port}".encode()
        self._hosted[uid] = store
        while len(self._hosted) > _HOSTED_AT_MOST:  # attempts that can no longer be joined
            del self._hosted[next(iter(self._hosted))]
        return uid

    def init(self, uid: bytes, rank: int, world_size: int) -> None:
        """Join the group ``uid`` as ``rank``; any failure (a store that cannot be reached, a bad
        id, a peer that never came) is a :class:`CommError` the worker reports, never a crash."""
        import torch.distributed as dist

        self.abort()
        _fresh_group_name()
        _pin_gloo_interface(self.address())
        try:
            host, port = uid.decode().rsplit(":", 1)
            store = dist.TCPStore(host, int(port), is_master=False, timeout=self.timeout)
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=self.timeout)
        except Exception as exc:
            raise CommError(f"could not form the gloo group {uid.decode(errors='replace')} as rank "
                            f"{rank}/{world_size}: {exc}") from exc
        self._store = store
        self._rank, self._world, self._group = rank, world_size, True
        # Formed: the stores of earlier attempts are done with (the current one may still serve it).
        self._hosted = {key: hosted for key, hosted in self._hosted.items() if key == uid}

    def all_reduce_sum(self, tensor: Any) -> None:
        import torch.distributed as dist

        if not self._group:
            raise CommError("no process group: waiting for a new session")
        if self._world == 1:
            return
        try:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        except Exception as exc:  # gloo raises RuntimeError subclasses on peer loss
            self._group = False
            raise CommError(f"all_reduce failed: {exc}") from exc

    def address(self) -> str:
        """The address the other ranks reach this one at (see the module doc)."""
        if self.host:
            return self.host
        if settings().host:
            return settings().host
        if self.towards and is_tcp(self.towards):
            return local_address_towards(tcp_host(self.towards))
        return "127.0.0.1"

    def abort(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a broken group may fail to tear down cleanly; it is gone either way
                pass
        self._group = False


def _fresh_group_name() -> None:
    """Name the next default group as a process that formed none before would.

    torch names it after a count of ``init_process_group`` calls (the keys its members meet at in
    the store: ``/<count>//cpu//...``), and only destroying a formed group resets the count.  A
    failed formation leaves it one higher: a rank that failed an attempt its peer never tried (the
    peer found the session stale, or served only the newest) waited at other keys than its peer's,
    and every later formation failed for both.  Each attempt has a store of its own, so the same
    name in every attempt cannot meet an older one's keys.  ``_world.group_count`` is torch's
    private counter; a torch without it (renamed) leaves the count alone."""
    from torch.distributed import distributed_c10d

    world = getattr(distributed_c10d, "_world", None)
    if world is not None and hasattr(world, "group_count") and not distributed_c10d.is_initialized():
        world.group_count = 0


def _interface_for(address: str) -> str | None:
    """The name of the network interface holding IPv4 ``address`` (Linux), or None."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def _pin_gloo_interface(address: str) -> None:
    """Make gloo use the interface that reaches the other hosts.

    Left alone, gloo binds the address its host name resolves to, often a
    loopback one, and ranks on other hosts are told to connect there.  An
    explicit ``GLOO_SOCKET_IFNAME`` is kept.
    """
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    if address.startswith("127.") or address in ("0.0.0.0", "::1"):
        return
    name = _interface_for(address)
    if name is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = name
