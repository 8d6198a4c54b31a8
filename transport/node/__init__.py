"""The node's protocol as machines with no I/O, no threads and no clock reads.

:class:`RootRole` is the root's half: the registry's keeper (admission, names, liveness verdicts,
refusals and expulsion).  :class:`MemberRole` is a member's: its join, and its root's liveness and
exit.  Both answer one interface, :class:`NodeRole`: the driver
(:class:`actorwire.transport._node.Node`) feeds the one it is what arrived, what its process asks
and the time, without asking which it is, and carries out the effects it returns.
"""

from actorwire.transport.node._effects import (
    Answer,
    Effect,
    Joined,
    OpenLink,
    Publish,
    Refuse,
    RootGone,
    Send,
    SendRaw,
    ToRoot,
    Warn,
)
from actorwire.transport.node._member import ROOT_LINK, MemberRole
from actorwire.transport.node._role import NodeRole
from actorwire.transport.node._root import RootRole

__all__ = ["ROOT_LINK", "Answer", "Effect", "Joined", "MemberRole", "NodeRole", "OpenLink", "Publish", "Refuse",
           "RootGone", "RootRole", "Send", "SendRaw", "ToRoot", "Warn"]
