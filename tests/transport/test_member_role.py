"""A member's half of the node protocol (transport/node/_member.py), on a virtual clock: its join,
who may welcome it, and when its root is taken for gone."""

from __future__ import annotations

from actorwire.messages import PROTOCOL_VERSION, DownReason
from actorwire.messages.runtime import NodeInfo, RegistryUpdate, Welcome
from actorwire.transport._liveness import Timing
from actorwire.transport._membership import View
from actorwire.transport._registry import REMOVED
from actorwire.transport.node import ROOT_LINK, Joined, MemberRole, Publish, Refuse, RootGone
from actorwire.transport.node._member import NOT_FROM_ROOT, NOT_OUR_ROOT

ME = NodeInfo(node_id="me", endpoints=["ipc:///tmp/me"], host="h", pid=10)
ROOT = NodeInfo(node_id="root", endpoints=["ipc:///tmp/root"], host="h", pid=20)
FAR_ROOT = NodeInfo(node_id="root", endpoints=["tcp://10.0.0.1:5555"], host="elsewhere", pid=20)
WELCOME = Welcome(protocol_version=PROTOCOL_VERSION, run_id="run", root_node_id="root",
                  nodes={"root": ROOT, "me": ME}, names={"coordinator": "root", "w/0": "me"},
                  heartbeat_interval=1.0, staleness_timeout=3.0)  # ZMTP timeout 1.5 s, then 1.5 s of grace


def member(alive: set[int] | None = None) -> MemberRole:
    alive = {20} if alive is None else alive
    return MemberRole(View(ME, run_id="run", is_root=False), timing=Timing.of(5.0, 15.0), host="h",
                      root_endpoint="ipc:///tmp/root", process_alive=lambda pid: pid in alive)


def joined(alive: set[int] | None = None, welcome: Welcome = WELCOME) -> MemberRole:
    role = member(alive)
    assert role.welcome(ROOT_LINK, welcome) == [Joined(welcome=welcome)]
    return role


def test_the_welcome_on_the_join_connection_admits_and_sets_the_roots_timing() -> None:
    role = joined()
    assert role.view.root_id == "root" and role.view.routes["coordinator"] == "root"
    assert role.timing == Timing.of(1.0, 3.0)
    assert role.watch.down_since is None  # the welcome came over the connection


def test_a_welcome_from_another_peer_or_a_second_one_is_refused_and_changes_nothing() -> None:
    role = member()
    forged = Welcome(protocol_version=PROTOCOL_VERSION, run_id="run", root_node_id="liar",
                     names={"coordinator": "liar"})
    assert role.welcome("liar", forged) == [Refuse("liar", NOT_OUR_ROOT)]
    assert role.view.root_id is None and not role.joined
    role.welcome(ROOT_LINK, WELCOME)
    assert role.welcome(ROOT_LINK, forged) == [Refuse(ROOT_LINK, NOT_OUR_ROOT)]
    assert role.view.root_id == "root" and role.view.routes["coordinator"] == "root"


def test_a_refused_join_is_the_answer_only_from_the_join_connection() -> None:
    role = member()
    assert role.refused("someone", "wrong run id") == []
    assert role.refused(ROOT_LINK, "wrong run id") == [Joined(error="the root refused this process: wrong run id")]
    assert role.refused(ROOT_LINK, "again") == []  # answered once


def test_a_failed_handshake_before_the_join_is_the_answer_and_after_it_nothing() -> None:
    role = member()
    [answer] = role.handshake_failed(auth=True)
    assert isinstance(answer, Joined) and answer.error is not None
    assert "CURVE key" in answer.error and answer.error.endswith("root ipc:///tmp/root")
    assert joined().handshake_failed(auth=False) == []


def test_registry_updates_count_only_from_the_root() -> None:
    role = joined()
    update = RegistryUpdate(added={"w/1": "me"})
    assert role.update("root", update) == [Publish(update)]
    assert role.update("other", update) == [Refuse("other", NOT_FROM_ROOT)]


def test_a_root_whose_connection_stays_down_past_the_grace_is_unreachable() -> None:
    role = joined(welcome=Welcome(protocol_version=PROTOCOL_VERSION, run_id="run", root_node_id="root",
                                  nodes={"root": FAR_ROOT}, names={"coordinator": "root"},
                                  heartbeat_interval=1.0, staleness_timeout=3.0))
    assert role.connection_down(10.0) == []  # on another host: only the connection judges it
    assert role.check(11.4) == []  # within the grace (1.5 s)
    assert role.connection_up() == [] and role.check(20.0) == []  # it came back
    role.connection_down(30.0)
    effects = role.check(31.6)
    assert effects[0] == RootGone("no connection for 1.6 s (libzmq's heartbeats timed out, or the peer "
                                  "closed its socket, and it did not reconnect)")
    assert isinstance(effects[1], Publish) and effects[1].update.removed == ["coordinator"]
    assert effects[1].update.reasons == {"coordinator": DownReason.UNREACHABLE}
    assert role.check(40.0) == []  # said once


def test_a_root_on_this_host_whose_process_is_gone_is_dead_at_once() -> None:
    alive = {20}
    role = joined(alive)
    assert role.connection_down(5.0) == []  # its process still runs: it may be closing its sockets
    alive.clear()
    effects = role.check(5.1)
    assert effects[0] == RootGone("its connection closed and process 20 no longer exists")
    assert isinstance(effects[1], Publish) and effects[1].update.reasons == {"coordinator": DownReason.DEAD}


def test_a_member_the_root_removed_is_headless() -> None:
    role = joined()
    assert role.refused("other", f"{REMOVED} (why)") == []
    effects = role.refused("root", f"{REMOVED} (stopped past the grace)")
    assert isinstance(effects[0], RootGone) and "the root removed this node" in (effects[0].why or "")
    assert isinstance(effects[1], Publish) and effects[1].update.reasons == {"coordinator": DownReason.UNREACHABLE}


def test_a_root_that_says_it_exits_is_gone_and_its_names_exited() -> None:
    role = joined()
    assert role.root_exiting("other") == []
    effects = role.root_exiting("root")
    assert effects[0] == RootGone(None)
    assert isinstance(effects[1], Publish) and effects[1].update.reasons == {"coordinator": DownReason.EXITED}
    role.connection_down(1.0)
    assert role.check(100.0) == []  # an exit is never counted as a death
