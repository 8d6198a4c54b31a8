"""A node's view of the registry, without sockets: admission, who speaks for whom, updates."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import node_info

from actorwire.messages import PROTOCOL_VERSION, DownReason
from actorwire.messages.runtime import Hello, RegistryUpdate, Welcome
from actorwire.transport._membership import HelloRefused, Parking, View

SECRET = "run-7f3a"


@dataclasses.dataclass(frozen=True)
class _Env:
    sender: str


def _hello(node_id: str, *, run_id: str = SECRET, version: int = PROTOCOL_VERSION) -> Hello:
    return Hello(protocol_version=version, run_id=run_id, node=node_info(node_id))


def _root() -> View:
    return View(node_info("root"), run_id=SECRET, is_root=True)


def _member() -> View:
    view = View(node_info("m1"), run_id=SECRET, is_root=False)
    view.welcomed(Welcome(protocol_version=PROTOCOL_VERSION, run_id=SECRET, root_node_id="root",
                          nodes={"root": node_info("root"), "m2": node_info("m2")},
                          names={"coordinator": "root", "worker/2": "m2"},
                          heartbeat_interval=0.5, staleness_timeout=3.0))
    return view


def test_a_valid_hello_admits_the_peer() -> None:
    view = _root()
    assert view.hello(_hello("m1"), "m1") is True
    assert "m1" in view.peers


def test_a_wrong_run_id_is_refused_without_naming_the_real_one() -> None:
    view = _root()
    with pytest.raises(HelloRefused) as refused:
        view.hello(_hello("m1", run_id="guess"), "m1")
    assert str(refused.value) == "wrong run id" and SECRET not in str(refused.value)
    assert "m1" not in view.peers


def test_another_protocol_version_is_refused() -> None:
    with pytest.raises(HelloRefused, match=f"is not {PROTOCOL_VERSION}"):
        _root().hello(_hello("m1", version=PROTOCOL_VERSION + 1), "m1")


def test_a_hello_for_another_identity_admits_nobody() -> None:
    view = _root()
    assert view.hello(_hello("m2"), "mallory") is False
    assert view.peers == set()


def test_an_expelled_peer_must_say_hello_again() -> None:
    view = _root()
    view.hello(_hello("m1"), "m1")
    view.expel("m1")
    assert "m1" not in view.peers


def test_the_welcome_gives_the_root_and_the_names() -> None:
    view = _member()
    assert view.root_id == "root" and "root" in view.peers
    assert view.host_of("worker/2") == "m2"


def test_a_name_is_spoken_for_only_by_its_holder() -> None:
    view = _member()
    assert view.speaks_for("m2", "worker/2")
    assert not view.speaks_for("m2", "coordinator")  # a forged sender
    assert not view.speaks_for("root", "worker/2")


def test_user_thread_names_belong_to_the_node_they_name() -> None:
    view = _member()
    assert view.speaks_for("m2", "~m2/main")
    assert not view.speaks_for("m2", "~root/main")
    assert not view.speaks_for("m2", "~m2")  # no separator: not a user thread of m2


def test_the_root_refuses_a_name_it_has_not_registered_and_a_member_lets_it_wait() -> None:
    root, member = _root(), _member()
    assert not root.speaks_for("m1", "worker/9") and not root.unheard_of("m1", "worker/9")
    # The root's update naming the holder may still be on its way to a member.
    assert not member.speaks_for("m2", "worker/9") and member.unheard_of("m2", "worker/9")
    # A name the member knows is held elsewhere is a forgery, not news.
    assert not member.unheard_of("m2", "coordinator")
    assert not member.unheard_of("m2", "~root/main")


def test_a_parked_sender_keeps_its_order_until_its_messages_ran() -> None:
    view, parking = _member(), Parking(limit=2)
    assert parking.park("m2", "worker/9", (1.0, _Env("worker/9"), "first"))
    view.apply(RegistryUpdate(added={"worker/9": "m2"}))
    # Proven now, but a later message may not overtake the parked one.
    assert not view.speaks_for("m2", "worker/9", parking) and view.unheard_of("m2", "worker/9", parking)
    assert parking.release() == {"m2": [(1.0, _Env("worker/9"), "first")]}
    assert view.speaks_for("m2", "worker/9", parking) and not parking


def test_parking_is_bounded_per_source() -> None:
    parking = Parking(limit=2)
    assert parking.park("m2", "a", (0.0, _Env("a"), 1)) and parking.park("m2", "b", (0.0, _Env("b"), 2))
    assert not parking.park("m2", "a", (0.0, _Env("a"), 3))
    assert parking.park("m3", "a", (0.0, _Env("a"), 4))  # another source has its own room


def test_what_a_node_that_left_had_parked_is_handed_back_and_forgotten() -> None:
    parking = Parking(limit=4)
    parking.park("m2", "a", (0.0, _Env("a"), 1))
    parking.park("m3", "b", (0.0, _Env("b"), 2))
    assert parking.drop("m2") == [(0.0, _Env("a"), 1)]
    assert not parking.waits("m2", "a") and parking.waits("m3", "b")


def test_what_a_removed_name_sent_before_it_went_down_is_still_its_holders() -> None:
    view = _member()
    changes = view.apply(RegistryUpdate(removed=["worker/2"], reasons={"worker/2": DownReason.DEAD},
                                        detail="killed"))
    assert changes.down == [("worker/2", DownReason.DEAD, "killed")]
    assert view.gone["worker/2"] == (DownReason.DEAD, "killed")
    assert view.speaks_for("m2", "worker/2") and not view.speaks_for("root", "worker/2")
    assert view.host_of("worker/2") == "m2"


def test_a_name_taken_over_moves_and_is_no_longer_gone() -> None:
    view = _member()
    view.apply(RegistryUpdate(removed=["worker/2"], reasons={"worker/2": DownReason.DEAD}))
    changes = view.apply(RegistryUpdate(nodes={"m3": node_info("m3")}, added={"worker/2": "m3"}))
    assert changes.moved == []  # it was removed first: nothing is left to follow it
    assert "worker/2" not in view.gone and view.host_of("worker/2") == "m3"
    assert view.speaks_for("m3", "worker/2")


def test_a_name_moved_without_removal_is_reported_as_moved() -> None:
    view = _member()
    changes = view.apply(RegistryUpdate(nodes={"m3": node_info("m3")}, added={"worker/2": "m3",
                                                                          "worker/3": "m3"}))
    assert changes.moved == [("worker/2", "m3")]


def test_a_node_that_left_is_forgotten_with_its_former_names() -> None:
    view = _member()
    view.hello(_hello("m2"), "m2")
    view.apply(RegistryUpdate(removed=["worker/2"], reasons={"worker/2": DownReason.EXITED}))
    changes = view.apply(RegistryUpdate(left_nodes=["m2"]))
    assert changes.left == ["m2"]
    assert "m2" not in view.nodes and "m2" not in view.peers
    assert view.host_of("worker/2") is None
