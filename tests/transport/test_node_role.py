"""The one interface the node's driver uses for either role (transport/node/_role.py): what the root
and a member each answer to what arrives and to what their own process asks, on a virtual clock."""

from __future__ import annotations

import inspect

import pytest

from actorwire.messages import PROTOCOL_VERSION
from actorwire.messages.runtime import (
    Hello,
    NodeExiting,
    NodeInfo,
    Refused,
    Register,
    RegistryUpdate,
    Unregister,
    Welcome,
)
from actorwire.transport._liveness import Timing
from actorwire.transport._membership import View
from actorwire.transport.node import ROOT_LINK, Answer, Joined, MemberRole, Publish, Refuse, RootRole, Send
from actorwire.transport.node._effects import ToRoot
from actorwire.transport.node._member import NOT_FROM_ROOT, NOT_OUR_ROOT
from actorwire.transport.node._role import NodeRole

TIMING = Timing.of(1.0, 3.0)
ROOT = NodeInfo(node_id="root", endpoints=["ipc:///tmp/root"], host="h", pid=20)
ME = NodeInfo(node_id="me", endpoints=["ipc:///tmp/me"], host="h", pid=10)
WELCOME = Welcome(protocol_version=PROTOCOL_VERSION, run_id="run", root_node_id="root",
                  nodes={"root": ROOT, "me": ME}, names={"coordinator": "root"},
                  heartbeat_interval=1.0, staleness_timeout=3.0)


def root() -> RootRole:
    role = RootRole(ROOT, run_id="run", timing=TIMING, now=0.0, heartbeat_interval=1.0, staleness_timeout=3.0,
                    process_alive=lambda pid: True)
    role.admit("me", Hello(protocol_version=PROTOCOL_VERSION, run_id="run", node=ME), 0.0)
    return role


def member() -> MemberRole:
    return MemberRole(View(ME, run_id="run", is_root=False), timing=TIMING, host="h", root_endpoint="ipc:///r",
                      process_alive=lambda pid: True)


@pytest.mark.parametrize("make", [root, member], ids=["root", "member"])
def test_both_roles_answer_everything_the_driver_asks_with_the_same_signatures(make) -> None:  # type: ignore[no-untyped-def]
    """The driver holds either role as a NodeRole and never asks which: a method one lacks, or takes
    other arguments of, would fail only on that kind of node."""
    role = make()
    asked = [name for name in vars(NodeRole) if not name.startswith("_")]
    assert {"admit", "node_message", "own_request", "unregister_own", "exiting_own", "check", "pending",
            "next_verdict", "drained", "process_exited", "heard_from_refused", "expel", "members_but"} <= set(asked)
    for name in asked:
        theirs = inspect.getattr_static(NodeRole, name)
        if isinstance(theirs, property):
            getattr(role, name)  # read: a dict or a flag
            continue
        ours = getattr(role, name)
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters)[1:], name
    assert role.node_id == make().node_id


def test_the_root_answers_its_own_requests_and_a_members_and_refuses_what_only_a_root_sends() -> None:
    r = root()
    assert r.node_message("me", 0, Welcome(protocol_version=PROTOCOL_VERSION, run_id="run",
                                          root_node_id="me")) == [Refuse("me", NOT_OUR_ROOT)]
    assert r.node_message("me", 0, RegistryUpdate(added={"x": "me"})) == [Refuse("me", NOT_FROM_ROOT)]
    assert r.node_message("me", 0, Refused(reason="no")) == []
    registered = r.node_message("me", 5, Register(names=["w/0"]))
    assert registered[0] == Publish(RegistryUpdate(added={"w/0": "me"})) and registered[1] == \
        Answer("me", 5, RegistryUpdate(added={"w/0": "me"}))
    own = r.own_request(6, Register(names=["coordinator"]))
    assert [type(e) for e in own] == [Publish, Answer] and own[1].node == "root"  # type: ignore[union-attr]
    (gone,) = r.unregister_own("coordinator")
    assert isinstance(gone, Publish) and gone.update.removed == ["coordinator"]
    assert r.exiting_own(["coordinator"], ["me", "other"]) == [
        Send("me", NodeExiting(node_id="root", actors=["coordinator"])),
        Send("other", NodeExiting(node_id="root", actors=["coordinator"]))]
    assert isinstance(r.node_message("me", 0, NodeExiting(node_id="me", actors=["w/0"]))[0], Publish)


def test_a_member_sends_its_own_requests_to_the_root_and_takes_only_the_roots_answers() -> None:
    m = member()
    assert m.own_request(4, Register(names=["w/0"])) == [ToRoot(Register(names=["w/0"]), 4)]
    assert m.unregister_own("w/0") == [ToRoot(Unregister(names=["w/0"]))]
    assert m.exiting_own(["w/0"], ["peer"]) == [ToRoot(NodeExiting(node_id="me", actors=["w/0"]))]
    assert m.node_message(ROOT_LINK, 0, WELCOME) == [Joined(welcome=WELCOME)]
    assert m.node_message("root", 3, Register(names=["x"])) == []  # the root's to answer
    assert m.node_message("other", 0, RegistryUpdate(added={"x": "other"})) == [Refuse("other", NOT_FROM_ROOT)]
    assert m.admit("peer", Hello(protocol_version=PROTOCOL_VERSION, run_id="run", node=ROOT), 1.0) == []
    assert not m.pending and m.next_verdict() is None and m.drained(9.0) == []
    assert m.process_exited("x", 1, 1.0) == [] and m.heard_from_refused("x", 1.0) == [] and m.expel("x", "y") == []
    assert m.members_but(None) == []
