"""The NCCL bootstrap family: how ranks agree on a unique id over the bus.

``RequestNewNcclId`` / ``NewNcclIdGenerated`` / ``NewNcclSession`` (in the
control and timing families) drive an elastic re-rendezvous; the messages here
drive the first one.
"""

from __future__ import annotations

from typing import Union

from .._base import Count, Message
from ._enums import RendezvousRole


class RendezvousHello(Message, frozen=True, tag="rendezvous_hello"):
    """A rank announces itself for the NCCL bootstrap."""

    global_rank: Count
    host_name: str
    dataset_signature: str = ""


class RendezvousAssign(Message, frozen=True, tag="rendezvous_assign"):
    """The coordinator's answer: generate the id, or wait for it."""

    role: RendezvousRole
    world_size: Count


class RendezvousUid(Message, frozen=True, tag="rendezvous_uid"):
    """The unique id, from the generator to the coordinator and on to every waiter."""

    uid: bytes
    world_size: Count = 0


RendezvousMsg = Union[RendezvousHello, RendezvousAssign, RendezvousUid]
