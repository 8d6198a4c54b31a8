"""The node's protocol as machines with no I/O, no threads and no clock reads.

:class:`RootRole` is the root's half: the registry's keeper (admission, names, liveness verdicts,
refusals and expulsion).  The driver (:class:`actorwire.transport._node.Node`) feeds it what
arrived and the time, and carries out the effects it returns.
"""

from actorwire.transport.node._effects import Answer, Effect, OpenLink, Publish, Send, SendRaw, Warn
from actorwire.transport.node._root import RootRole

__all__ = ["Answer", "Effect", "OpenLink", "Publish", "RootRole", "Send", "SendRaw", "Warn"]
