"""The hand-off between sending threads and the node's I/O thread (transport/node/_outbox.py), on a
virtual clock: when the I/O thread is woken, how long it may sleep, when acks leave."""

from __future__ import annotations

from actorwire.transport.node._outbox import Outbox


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def outbox() -> tuple[Outbox, Wakes]:
    wakes = Wakes()
    return Outbox(wakes, ack_every=4, ack_delay=0.002), wakes


def no_deadline() -> float | None:
    return None


def test_a_sleeping_io_thread_is_woken_once_per_sleep_however_many_records_come() -> None:
    box, wakes = outbox()
    box.add("peer", b"r1")
    box.nudge()
    assert wakes.count == 0  # awake: it will look at the boxes before it sleeps
    assert box.go_idle(0.0, 1.0, no_deadline) == 0.0  # and it does: something is ready
    box.awake()
    assert list(box.take_records()) == [("peer", [b"r1"])]
    assert box.go_idle(0.0, 1.0, no_deadline) == 1.0
    for i in range(100):
        box.add("peer", b"r%d" % i)
        box.nudge()
    assert wakes.count == 1
    box.awake()
    [(peer, records)] = list(box.take_records())
    assert peer == "peer" and len(records) == 100
    assert list(box.take_records()) == []


def test_records_of_several_peers_and_re_sends_behind_them() -> None:
    box, _ = outbox()
    box.add("a", b"1")
    box.add("b", b"2")
    box.add_many("a", [b"0-again"])
    assert dict(box.take_records()) == {"a": [b"1", b"0-again"], "b": [b"2"]}


def test_replies_wake_once_per_sleep_and_commands_always() -> None:
    box, wakes = outbox()
    box.go_idle(0.0, 5.0, no_deadline)
    box.post("reply-1")
    box.post("reply-2")
    assert wakes.count == 1
    box.command("cmd")
    assert wakes.count == 2  # a command wakes it even when it is awake already
    assert list(box.take_items()) == ["reply-1", "reply-2", "cmd"]


def test_an_ask_wakes_the_io_thread_only_if_it_would_sleep_past_its_deadline() -> None:
    box, wakes = outbox()
    box.go_idle(0.0, 1.0, no_deadline)
    box.before(30.0)
    assert wakes.count == 0
    box.before(0.5)
    assert wakes.count == 1
    box.awake()
    box.before(0.1)  # awake: wake_at is 0, it will look at the deadlines
    assert wakes.count == 1


def test_a_deadline_sooner_than_the_wake_time_found_at_the_last_look_means_no_sleep() -> None:
    box, _ = outbox()
    assert box.go_idle(0.0, 1.0, lambda: 0.5) == 0.0


def test_acks_leave_within_the_delay_of_the_first_handled_message() -> None:
    box, wakes = outbox()
    box.go_idle(0.0, 1.0, no_deadline)
    box.handled(("n", "s", "t"), 1)
    assert wakes.count == 1  # the first owed ack starts the timer: the thread must look
    box.awake()
    assert not box.acks_due(10.0)  # no timer until the thread goes idle with acks owed
    assert abs(box.go_idle(10.0, 11.0, no_deadline) - 0.002) < 1e-9
    assert box.ack_due == 10.002 and box.wake_at == 10.002
    box.awake()
    box.handled(("n", "s", "t"), 2)
    assert not box.acks_due(10.001)
    assert box.acks_due(10.002)
    assert box.take_acks() == {("n", "s", "t"): 2}
    assert box.ack_due is None and box.take_acks() == {}


def test_acks_leave_at_once_when_enough_are_owed() -> None:
    box, wakes = outbox()
    box.handled(("n", "s", "t"), 1)
    box.go_idle(0.0, 1.0, no_deadline)
    box.handled_many({("n", "s", "t"): 3, ("n", "s", "u"): 1}, 3)
    assert box.full() and box.acks_due(0.0)
    assert wakes.count == 1
    assert box.take_acks() == {("n", "s", "t"): 3, ("n", "s", "u"): 1}
    assert not box.full()


def test_the_io_thread_adds_acks_it_owes_again_without_waking_itself() -> None:
    box, wakes = outbox()
    box.go_idle(0.0, 1.0, no_deadline)
    box.awake()
    box.owed.setdefault(("n", "s", "t"), 7)  # a duplicate: its ack was lost, it is owed again
    assert wakes.count == 0
    box.go_idle(0.0, 1.0, no_deadline)
    assert box.wake_at == 0.002
    assert box.take_acks() == {("n", "s", "t"): 7}
