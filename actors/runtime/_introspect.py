"""The introspector: every node's answer to ``actorwire status`` and ``actorwire top``.

Each :class:`~actorwire.actors.runtime._system.ActorSystem` spawns one, named
``.introspect/<node id>`` (a name starting with ``.`` is the runtime's: hidden
from ``names()`` and from ``wait()``).  It answers
:class:`~actorwire.messages.kinds.StatusRequest` with the node's
:class:`~actorwire.messages.kinds.NodeStatus`, the same record ``system.statistics()``
returns, over the bus and so with its authentication: a status client joins
the system as a worker does.  It is read-only: it takes counters and copies
of state, and changes nothing.  It never blocks, so it answers from the I/O
thread even while every other actor of the node is busy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from actorwire.actors.runtime._actor import Actor, handler
from actorwire.actors.runtime._context import Context
from actorwire.messages.kinds import StatusRequest

if TYPE_CHECKING:
    from actorwire.actors.runtime._system import ActorSystem

#: The introspector of node ``node_id`` is named ``INTROSPECTOR + node_id``.
INTROSPECTOR = ".introspect/"


def introspector_name(node_id: str) -> str:
    return f"{INTROSPECTOR}{node_id}"


class Introspector(Actor):
    """Answers :class:`StatusRequest` with its node's status."""

    never_blocks = True  # it reads counters: handled on the I/O thread when idle
    recorded: ClassVar[bool] = False  # what it reads is the live system's, not a protocol to replay

    def __init__(self, system: ActorSystem) -> None:
        self._system = system

    def config(self) -> dict[str, object]:
        return {}

    @handler
    def on_request(self, msg: StatusRequest, ctx: Context) -> None:
        ctx.reply(self._system.statistics())
