"""The root's registry and liveness rules, on a virtual clock."""

from __future__ import annotations

import pytest

from actorwire.messages import DownReason
from actorwire.messages.runtime import NodeInfo
from actorwire.transport._liveness import Timing
from actorwire.transport._registry import Registry, RegistryError

TIMING = Timing.of(1.0, 3.0)  # ZMTP timeout 1.5 s, then 1.5 s of grace

ROOT = NodeInfo(node_id="root", endpoints=["ipc:///tmp/root"], host="h")
A = NodeInfo(node_id="a", endpoints=["ipc:///tmp/a"], host="h")
B = NodeInfo(node_id="b", endpoints=["tcp://10.0.0.2:5555"], host="other")


def registry() -> Registry:
    reg = Registry(root_node=ROOT, timing=TIMING, now=0.0)
    reg.join(A, now=0.0)
    reg.join(B, now=0.0)
    return reg


def test_join_announces_the_node() -> None:
    reg = Registry(root_node=ROOT, timing=TIMING, now=0.0)
    update = reg.join(A, now=0.0)
    assert update.nodes == {"a": A}
    assert set(reg.nodes) == {"root", "a"}


def test_duplicate_node_id_is_refused() -> None:
    reg = registry()
    with pytest.raises(RegistryError, match="node id 'a' is already in this system"):
        reg.join(A, now=1.0)


def test_register_and_names() -> None:
    reg = registry()
    update = reg.register("a", ["worker/0", "worker/1"])
    assert update.added == {"worker/0": "a", "worker/1": "a"}
    assert reg.names == {"worker/0": "a", "worker/1": "a"}


def test_register_from_unknown_node() -> None:
    with pytest.raises(RegistryError, match="node 'zzz' has not joined"):
        registry().register("zzz", ["x"])


def test_duplicate_name_is_refused_unless_takeover() -> None:
    reg = Registry(root_node=ROOT, timing=TIMING, now=0.0, process_alive=lambda pid: False)
    reg.join(NodeInfo(node_id="a", endpoints=["ipc:///tmp/a"], host="h", pid=7), now=0.0)  # its process is gone
    reg.join(B, now=0.0)
    reg.register("a", ["coordinator"])
    with pytest.raises(RegistryError, match="actor name 'coordinator' is already taken by node 'a'"):
        reg.register("b", ["coordinator"])
    update = reg.register("b", ["coordinator"], takeover=True)
    assert update.added == {"coordinator": "b"}
    # The old holder no longer owns it: its death does not remove the name.
    reg.connected("b")
    (drop,) = reg.check(now=10.0)
    assert drop.left_nodes == ["a"]
    assert drop.removed == []
    assert reg.names["coordinator"] == "b"


def test_unregister_is_a_clean_exit() -> None:
    reg = registry()
    reg.register("a", ["w"])
    update = reg.unregister("a", ["w"])
    assert update.removed == ["w"] and update.reasons == {"w": DownReason.EXITED}
    # Unregistering a name one does not hold changes nothing.
    assert reg.unregister("b", ["w"]).removed == []


def test_a_connected_node_is_alive_however_long_it_says_nothing() -> None:
    reg = registry()
    reg.register("a", ["worker/0"])
    reg.connected("a")
    reg.connected("b")
    assert reg.check(now=10_000.0) == []


def test_a_node_whose_first_connection_is_not_made_is_unreachable_after_the_staleness() -> None:
    reg = registry()
    reg.register("a", ["worker/0"])
    reg.register("b", ["worker/1"])
    reg.connected("a")
    assert reg.check(now=2.9) == []
    updates = reg.check(now=3.5)  # b never connected: 3.5 s > 3 s
    assert [u.removed for u in updates] == [["worker/1"]]
    assert updates[0].reasons == {"worker/1": DownReason.UNREACHABLE}
    assert "no connection made within 3.5 s of its join" in updates[0].detail
    assert updates[0].left_nodes == ["b"]
    assert reg.names == {"worker/0": "a"}


def test_a_dropped_connection_has_the_grace_to_come_back() -> None:
    reg = registry()
    reg.register("b", ["worker/1"])  # on another host: its pid proves nothing
    reg.connected("a")
    reg.connected("b")
    assert reg.disconnected("b", now=10.0).removed == []
    assert reg.check(now=11.4) == []  # grace 1.5 s
    reg.connected("b")  # back: libzmq reconnected
    assert reg.check(now=100.0) == []
    reg.disconnected("b", now=100.0)
    reg.disconnected("b", now=101.0)  # a second report does not restart the grace
    (update,) = reg.check(now=101.6)
    assert update.reasons == {"worker/1": DownReason.UNREACHABLE}
    assert "no connection for 1.6 s (libzmq's heartbeats timed out" in update.detail


def test_a_dropped_connection_of_a_gone_process_on_this_host_is_a_death_at_once() -> None:
    alive = {7: True}
    reg = Registry(root_node=ROOT, timing=TIMING, now=0.0, process_alive=lambda pid: alive.get(pid, False))
    reg.join(NodeInfo(node_id="a", endpoints=["ipc:///tmp/a"], host="h", pid=7), now=0.0)
    reg.register("a", ["worker/0"])
    reg.connected("a")
    assert reg.disconnected("a", now=5.0).removed == []  # still running (stopped, say): the grace
    reg.connected("a")
    alive[7] = False
    update = reg.disconnected("a", now=6.0)
    assert update.reasons == {"worker/0": DownReason.DEAD}
    assert update.detail == "node a: its connection closed and process 7 no longer exists"
    assert reg.disconnected("a", now=6.0).removed == []  # already gone


def test_a_dying_process_whose_drop_is_seen_before_its_pid_is_gone_is_still_a_death() -> None:
    """The kernel closes a killed process's sockets before its pid goes: the root may see the drop
    while the pid still answers, and then it must look again, not wait out the grace."""
    alive = {7: True}
    reg = Registry(root_node=ROOT, timing=TIMING, now=0.0, process_alive=lambda pid: alive.get(pid, False))
    reg.join(NodeInfo(node_id="a", endpoints=["ipc:///tmp/a"], host="h", pid=7), now=0.0)
    reg.register("a", ["worker/0"])
    reg.connected("a")
    assert reg.disconnected("a", now=5.0).removed == []
    assert reg.check(now=5.1) == []
    alive[7] = False
    (update,) = reg.check(now=5.2)  # well inside the 1.5 s grace
    assert update.reasons == {"worker/0": DownReason.DEAD}
    assert update.detail == "node a: its connection closed and process 7 no longer exists"


def test_an_exiting_node_is_never_judged_by_its_connection() -> None:
    reg = registry()
    reg.register("a", ["worker/0"])
    reg.connected("b")
    reg.exiting("a")
    assert reg.disconnected("a", now=1.0).removed == []
    assert reg.check(now=100.0) == []


def test_root_is_never_stale() -> None:
    reg = Registry(root_node=ROOT, timing=TIMING, now=0.0)
    reg.register("root", ["coordinator"])
    assert reg.check(now=1000.0) == []


def test_exit_detection_reports_dead() -> None:
    reg = registry()
    reg.register("a", ["worker/0"])
    update = reg.process_exited("a", -9)
    assert update.reasons == {"worker/0": DownReason.DEAD}
    assert update.detail == "node a: process exited with status -9"


def test_clean_exit_is_latched_and_never_counted_as_death() -> None:
    reg = registry()
    reg.register("a", ["worker/0"])
    update = reg.exiting("a")
    assert update.reasons == {"worker/0": DownReason.EXITED}
    # The process then exits (status 0) and stops heartbeating: neither
    # detector may turn the clean exit into a death.
    assert reg.process_exited("a", 0).removed == []
    assert all("a" not in u.left_nodes for u in reg.check(now=100.0))


def test_exit_of_unknown_node_is_ignored() -> None:
    reg = registry()
    assert reg.process_exited("ghost", 1).removed == []
    assert reg.exiting("ghost").removed == []


def test_a_takeover_waits_until_the_holder_is_proven_gone() -> None:
    alive = {111: True}
    reg = Registry(root_node=NodeInfo(node_id="root", endpoints=["ipc:///r"], host="h"), timing=TIMING,
                   now=0.0, process_alive=lambda pid: alive.get(pid, False))
    reg.join(NodeInfo(node_id="a", endpoints=["ipc:///a"], host="h", pid=111), now=0.0)
    reg.join(NodeInfo(node_id="b", endpoints=["ipc:///b"], host="h", pid=222), now=0.0)
    reg.join(NodeInfo(node_id="far", endpoints=["tcp://x:1"], host="elsewhere", pid=5), now=0.0)
    reg.register("a", ["worker/1"])
    reg.register("far", ["worker/2"])
    reg.register("root", ["coordinator"])
    for name in ("worker/1", "worker/2", "coordinator"):
        with pytest.raises(RegistryError, match=f"held by a node that may be alive: actor name '{name}'"):
            reg.register("b", [name], takeover=True)
    alive[111] = False  # the holder's process is gone (checked on the root's host only)
    assert reg.register("b", ["worker/1"], takeover=True).added == {"worker/1": "b"}
    with pytest.raises(RegistryError, match="may be alive"):
        reg.register("b", ["worker/2"], takeover=True)  # another host: only its lost connection frees it
    reg.exiting("far")
    assert reg.names.get("worker/2") is None


def test_a_removed_node_keeps_the_reason_until_it_joins_again() -> None:
    reg = registry()
    reg.connected("a")
    reg.connected("b")
    assert reg.removed("b") is None
    reg.disconnected("b", now=10.0)
    reg.check(now=12.0)
    assert reg.removed("b") == ("unreachable: no connection for 2.0 s (libzmq's heartbeats timed out, or the "
                                "peer closed its socket, and it did not reconnect)")
    assert reg.removed("a") is None  # never removed
    reg.join(B, now=20.0)
    assert reg.removed("b") is None
