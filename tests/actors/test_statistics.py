"""system.statistics() and the introspector that answers `actorwire status` (in-process and over the bus)."""

from __future__ import annotations

import os

import pytest
from conftest import TESTS

from actorwire import messages as m
from actorwire.actors import Actor, ActorSystem, Context, handler
from actorwire.transport._errors import InvalidArgument


class Faulty(Actor):
    """Fails on Throttle; says something of itself, or fails to."""

    def __init__(self, broken_status: bool = False) -> None:
        self.broken_status = broken_status

    @handler
    def on_throttle(self, msg: m.Throttle, ctx: Context) -> None:
        raise RuntimeError("no capacity left")

    @handler
    def on_sync(self, msg: m.SyncNow, ctx: Context) -> None:
        ctx.reply(m.SyncAck(rank=0, step_count=0))

    def status(self, now: float) -> m.ActorDetail:
        if self.broken_status:
            raise KeyError("half-built")
        return m.ActorDetail(phase="serving", notes={"load": "low"})


def _actor(stats: m.NodeStatus, name: str) -> m.ActorStatus:
    (found,) = [a for a in stats.actors if a.name == name]
    return found


def test_statistics_count_what_each_actor_handled_per_kind() -> None:
    with ActorSystem() as system:
        system.spawn(Faulty(), "faulty")
        for _ in range(3):
            system.tell("faulty", m.Throttle())
        system.ask("faulty", m.SyncNow(), timeout=10)
        stats = system.statistics()
        faulty = _actor(stats, "faulty")
        assert (faulty.handled, faulty.by_kind, faulty.failures) == (4, {"throttle": 3, "sync_now": 1}, 3)
        assert faulty.cls == "Faulty" and faulty.detail == m.ActorDetail(phase="serving", notes={"load": "low"})
        assert stats.is_root and stats.pid == os.getpid() and stats.wall_ns >= stats.started_ns
        assert any("faulty: handler of throttle raised RuntimeError: no capacity left" in e for e in stats.errors)
        assert [member.node_id for member in stats.members] == [system.node_id]


def test_a_status_hook_that_raises_is_shown_not_fatal() -> None:
    with ActorSystem() as system:
        system.spawn(Faulty(broken_status=True), "faulty")
        detail = _actor(system.statistics(), "faulty").detail
        assert detail is not None and detail.notes == {"status() failed": "KeyError: 'half-built'"}


def test_the_runtimes_own_actor_is_hidden_from_names_wait_and_statistics() -> None:
    with ActorSystem() as system:
        assert system.names() == []
        assert [n for n in system._node.names(runtime=True)] == [f".introspect/{system.node_id}"]
        assert system.statistics().actors == []
        assert system.wait(timeout=1.0)  # nothing of the user's runs: done
        with pytest.raises(InvalidArgument, match="names starting with '.' are the runtime's"):
            system.spawn(Faulty(), ".mine")


@pytest.mark.slow
def test_every_node_answers_a_status_request_over_the_bus() -> None:
    env = {"PYTHONPATH": str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with ActorSystem() as system:
        child = system.spawn_process({"echo": "_actors:Echo"}, env=env)
        system.ask("echo", m.SyncNow(), timeout=10)
        introspectors = [n for n in system._node.names(runtime=True) if n.startswith(".introspect/")]
        assert len(introspectors) == 2
        answers = {n: system.ask(n, m.StatusRequest(), timeout=10, expect=m.NodeStatus) for n in introspectors}
        child_status = next(s for s in answers.values() if not s.is_root)
        assert child_status.pid == child.pid
        assert _actor(child_status, "echo").by_kind == {"sync_now": 1}
        root_status = next(s for s in answers.values() if s.is_root)
        assert {member.node_id: member.liveness for member in root_status.members} == {
            system.node_id: "up", child_status.node_id: "up"}
        assert [member.actors for member in root_status.members if member.node_id == child_status.node_id] == \
            [["echo"]]
