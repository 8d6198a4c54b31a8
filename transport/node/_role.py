"""What the driver asks of a node's role, root or member alike: one interface, no branches.

:class:`~._root.RootRole` keeps the registry; :class:`~._member.MemberRole` joins a root.  The
driver holds one of them as ``NodeRole`` and hands it what arrived, what this process asks and the
time; it carries out the effects returned.  Where a question is the root's alone (a launched
process exited, a removed node heard from again, an expulsion, a verdict pending), a member's answer
is "nothing to do"; what is the member's alone (the root's liveness, judged by the root link's
monitor) stays typed on the driver.
"""

from __future__ import annotations

from typing import Protocol

from actorwire.messages import Message
from actorwire.messages.runtime import Hello
from actorwire.transport.node._effects import Effect


class NodeRole(Protocol):
    node_id: str

    # -- what arrives
    def admit(self, source: str, hello: Hello, now: float) -> list[Effect]: ...

    def node_message(self, source: str, correlation_id: int, message: Message) -> list[Effect]: ...

    # -- this process's own requests
    def own_request(self, correlation_id: int, message: Message) -> list[Effect]: ...

    def unregister_own(self, name: str) -> list[Effect]: ...

    def exiting_own(self, actors: list[str], peers: list[str]) -> list[Effect]: ...

    # -- liveness and verdicts
    def check(self, now: float) -> list[Effect]: ...

    @property
    def pending(self) -> object:
        """Truthy while an end waits for its verdict (the driver then calls :meth:`drained`)."""

    def next_verdict(self) -> float | None: ...

    def drained(self, now: float) -> list[Effect]: ...

    def process_exited(self, node: str, returncode: int, now: float) -> list[Effect]: ...

    def heard_from_refused(self, peer: str, now: float) -> list[Effect]: ...

    def expel(self, peer: str, why: str) -> list[Effect]: ...

    def members_but(self, skip: str | None) -> list[str]: ...
