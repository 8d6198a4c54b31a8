"""HeldLines: a member's lines from nodes the root's update has not named yet (virtual clock)."""

from __future__ import annotations

from actorwire.transport._lines import HeldLines

HELLO = [b"envelope", b"hello"]


def test_a_held_line_is_released_with_its_messages_in_order_once_its_node_is_known() -> None:
    held = HeldLines()
    assert not held
    assert held.hold("a\x1f1", "a", 0.0, HELLO)
    assert held.add("a\x1f1", [b"ask 1"]) and held.add("a\x1f1", [b"ask 2"])
    assert held.holds("a\x1f1") and held
    assert held.release({"b"}) == []  # another node named: still held
    assert held.release({"a", "b"}) == [("a\x1f1", [HELLO, [b"ask 1"], [b"ask 2"]])]
    assert not held and not held.holds("a\x1f1")


def test_a_line_held_past_its_patience_expires_and_one_within_it_stays() -> None:
    held = HeldLines()
    held.hold("a\x1f1", "a", 0.0, HELLO)
    held.hold("b\x1f1", "b", 4.0, HELLO)
    assert held.expired(5.0, patience=5.0) == []
    assert held.expired(5.5, patience=5.0) == [("a\x1f1", "a")]
    assert held.holds("b\x1f1") and not held.holds("a\x1f1")


def test_what_a_peer_can_make_a_member_hold_is_bounded() -> None:
    held = HeldLines(limit=2, depth=2)
    assert held.hold("a\x1f1", "a", 0.0, HELLO) and held.hold("a\x1f2", "a", 0.0, HELLO)
    assert not held.hold("c\x1f1", "c", 0.0, HELLO)  # full: the node refuses it
    assert not held.holds("c\x1f1")
    assert held.add("a\x1f1", [b"ask"])
    assert not held.add("a\x1f1", [b"one too many"])  # over depth: no longer held, refused
    assert not held.holds("a\x1f1") and held.holds("a\x1f2")


def test_the_lines_of_a_node_that_left_are_forgotten() -> None:
    held = HeldLines()
    held.hold("a\x1f1", "a", 0.0, HELLO)
    held.hold("a\x1f2", "a", 0.0, HELLO)
    held.hold("b\x1f1", "b", 0.0, HELLO)
    held.drop("a")
    assert [identity for identity, _ in held.release({"a", "b"})] == ["b\x1f1"]


def test_the_bytes_held_are_bounded_and_given_back_when_a_line_goes() -> None:
    """A peer must not make a member keep 64 lines x 64 messages of 16 MiB each."""
    held = HeldLines(max_bytes=100)
    assert held.hold("a\x1f1", "a", 0.0, [b"e" * 10, b"h" * 10])  # 20
    assert not held.hold("b\x1f1", "b", 0.0, [b"x" * 81])  # 101: refused, nothing kept
    assert held.size == 20 and not held.holds("b\x1f1")
    assert held.add("a\x1f1", [b"y" * 70])  # 90
    assert not held.add("a\x1f1", [b"z" * 11])  # 101: the line is let go, its bytes given back
    assert held.size == 0 and not held
    assert held.hold("b\x1f1", "b", 0.0, [b"x" * 81])
    held.release({"b"})
    assert held.size == 0
