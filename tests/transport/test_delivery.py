"""The delivery machines on a virtual clock: one stream's rules, then Hypothesis against a network
that loses, duplicates and reorders, with senders that restart and targets that move."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actorwire.messages import Codec, Envelope
from actorwire.messages.kinds import Throttle
from actorwire.messages.runtime import Ack, NodeInfo, RegistryUpdate
from actorwire.transport._asks import Asks
from actorwire.transport._delivery import InStreams, OutStream, Verdict
from actorwire.transport._membership import Parking, View
from actorwire.transport.node._outbound import Outbound
from actorwire.transport.node._outbox import Outbox
from actorwire.transport.node._receive import Incoming
from actorwire.transport.node._settle import Settlement

KEY = ("node-a", "worker/1", "sink")
CODEC = Codec()


def _record(seq: int) -> bytes:
    return f"m{seq}".encode()


def _stream(n: int, *, window: int = 8) -> OutStream:
    out = OutStream("sink", "node-b", now=0.0, window=window)
    for seq in range(1, n + 1):
        out.append(seq, _record(seq))
    return out


def test_a_run_is_taken_whole_only_when_it_is_the_next_numbers_within_the_window() -> None:
    ins = InStreams(window=4)
    key = ("node-a", "worker/1", "sink")
    assert not ins.accept_run(key, 1, 2)  # no stream yet: the first record opens it through accept
    assert ins.accept(key, 1) is Verdict.ACCEPT
    assert not ins.accept_run(key, 3, 2)  # a gap
    assert not ins.accept_run(key, 2, 5)  # past the window (nothing handled yet)
    assert ins.accept_run(key, 2, 3)
    assert ins.accept(key, 4) is Verdict.DUPLICATE  # taken by the run
    assert ins.accept(key, 5) is Verdict.OVERRUN


def test_an_ack_releases_what_was_handled_and_returns_credit() -> None:
    out = _stream(5)
    assert out.in_flight == 5
    assert out.on_ack(received=5, handled=3, now=1.0) == 3
    assert out.in_flight == 2 and out.unacked == [_record(4), _record(5)] and out.first == 4
    assert out.on_ack(received=5, handled=3, now=2.0) == 0  # a repeated ack changes nothing


def test_streams_per_source_node_are_bounded_and_freed_with_their_node_or_target() -> None:
    streams = InStreams(window=8, max_streams=2)
    assert streams.accept(("a", "s1", "t1"), 1) is Verdict.ACCEPT
    assert streams.accept(("a", "s2", "t1"), 1) is Verdict.ACCEPT
    assert streams.accept(("a", "s3", "t2"), 1) is Verdict.TOO_MANY
    assert streams.accept(("b", "s3", "t2"), 1) is Verdict.ACCEPT  # another node has its own room
    assert streams.accept(("a", "s1", "t1"), 2) is Verdict.ACCEPT  # an open stream goes on
    streams.forget_target("t1")
    assert streams.accept(("a", "s3", "t2"), 1) is Verdict.ACCEPT
    streams.forget("a")
    assert streams.accept(("a", "s4", "t3"), 1) is Verdict.ACCEPT
    assert streams.accept(("a", "s5", "t3"), 1) is Verdict.ACCEPT


def test_only_what_was_not_received_is_sent_again_and_only_after_a_quiet_period() -> None:
    out = _stream(4)
    out.on_ack(received=2, handled=1, now=1.0)
    assert out.due(now=1.5, after=1.0) == []  # progress half a second ago
    assert out.due(now=2.5, after=1.0) == [_record(3), _record(4)]
    assert out.due(now=2.6, after=1.0) == []  # the re-send counts as progress
    out.on_ack(received=4, handled=4, now=3.0)
    assert out.due(now=99.0, after=1.0) == []


def test_the_resend_scan_waits_for_a_sender_holding_the_stream_lock() -> None:
    """Senders append under the stream's lock; the I/O thread's scan for re-sends must take it too
    (unlocked, a send during the scan raised "deque mutated during iteration" in the I/O thread)."""
    import threading

    out = OutStream("t", "node-b", now=0.0, window=8)
    for seq in (1, 2):
        out.append(seq, f"r{seq}".encode())
    result: list[list[bytes]] = []
    out.lock.acquire()  # a sender is between numbering and appending
    scan = threading.Thread(target=lambda: result.append(out.due(now=10.0, after=2.0)))
    scan.start()
    scan.join(timeout=0.2)
    assert scan.is_alive() and not result  # it waits for the sender
    out.append(3, b"r3")
    out.lock.release()
    scan.join(timeout=10)
    assert result == [[b"r1", b"r2", b"r3"]]


def test_a_moved_target_gets_a_new_stream_from_1_with_everything_unhandled() -> None:
    out = _stream(5)
    out.on_ack(received=5, handled=2, now=1.0)
    again = out.rehome("node-c", lambda record, seq: record + f"@{seq}".encode())
    assert again == [b"m3@1", b"m4@2", b"m5@3"]
    assert (out.node_id, out.seq, out.received, out.in_flight) == ("node-c", 3, 0, 3)


def test_the_receiver_takes_exactly_the_next_number_of_each_stream() -> None:
    ins = InStreams(window=4)
    assert ins.accept(KEY, 2) is Verdict.GAP  # a stream starts at 1
    assert ins.accept(KEY, 1) is Verdict.ACCEPT
    assert ins.accept(KEY, 1) is Verdict.DUPLICATE
    assert ins.accept(KEY, 3) is Verdict.GAP  # 2 was lost: 3 waits for its re-send
    assert ins.accept(KEY, 2) is Verdict.ACCEPT
    assert ins.accept(KEY, 2**64 - 1) is Verdict.GAP  # a forged number silences nothing
    assert ins.accept(KEY, 3) is Verdict.ACCEPT
    assert ins.gaps == 3  # each number past the next is counted
    other = ("node-z", "worker/1", "sink")  # the same names from another incarnation: its own stream
    assert ins.accept(other, 1) is Verdict.ACCEPT


def test_the_receiver_enforces_the_window_it_granted() -> None:
    ins = InStreams(window=2)
    assert [ins.accept(KEY, seq) for seq in (1, 2, 3)] == [Verdict.ACCEPT, Verdict.ACCEPT, Verdict.OVERRUN]
    assert ins.acks({KEY: 1}) == {"node-a": [("worker/1", "sink", 2, 1)]}
    assert ins.accept(KEY, 3) is Verdict.ACCEPT  # handled messages stop counting
    assert ins.handled_of(KEY) == 1  # what a duplicate is answered with


def test_forgetting_a_node_or_a_target_starts_their_streams_afresh() -> None:
    ins = InStreams(window=8)
    ins.accept(KEY, 1)
    ins.accept(("node-a", "worker/1", "other"), 1)
    ins.forget_target("sink")
    assert ins.accept(KEY, 1) is Verdict.ACCEPT
    ins.forget("node-a")
    assert len(ins) == 0


class _Log:
    """The log of the machines under test: an error or an exception they caught is the test's failure
    (``Incoming.frames`` logs what failed in a message and drops it, as a node must)."""

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **fields: Any) -> None:
            if level in ("error", "exception"):
                raise AssertionError(f"{event} {fields}")
        return log


class Network(RuleBasedStateMachine):
    """Senders (incarnations of "worker/1") -> one receiver, over a network that loses, duplicates and
    reorders; acks travel back over the same kind of network.  A restart starts a new incarnation (the
    old one is gone, what it had in flight may still arrive); a move sends the target to a new receiving
    node.  Both ends are the objects the node runs, with real records: the sender's ``Outbound`` streams
    and its ``Settlement`` (acks, re-sends, re-homing with renumbering), the receiver's ``Incoming``
    (each batch frame decoded, sender proof against the receiver's view, stream acceptance, the one-run
    fast path, duplicates acked again) and its ``Settlement`` (the acks owed, one per peer).  Checked:
    every stream's handled messages are its sent ones, in order, none twice; and once the network is
    quiet and retransmission has run, everything the live incarnation sent is handled."""

    WINDOW = 4

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.incarnation = 0
        self.receiver = 0
        self.refused_acks: list[str] = []  # the nodes whose acks the sender refused
        self._new_sender()
        self._new_receiver()
        self.net: list[tuple[int, str, bytes]] = []  # (incarnation, receiving node, record)
        self.acks: list[tuple[int, str, Ack]] = []
        self.mailbox: list[tuple[str, Envelope]] = []  # (source, envelope) delivered to the actor
        self.log: list[tuple[int, int, int]] = []  # what the actor handled: (incarnation, receiver, payload)
        self.sent: dict[int, list[int]] = {0: []}  # payloads per incarnation, in send order
        self.payloads = 0

    def _settlement(self, node_id: str, outbound: Outbound, outbox: Outbox, streams: InStreams, view: View,
                    send_node: Any) -> Settlement:
        return Settlement(node_id=node_id, codec=CODEC, view=view, asks=Asks(), outbound=outbound, outbox=outbox,
                          streams=streams, log=_Log(), refuse=lambda peer, what: self.refused_acks.append(peer),
                          send_node=send_node, changed=lambda: None, closing=lambda: False)

    def _new_sender(self) -> None:
        """A process that holds "worker/1" and streams to "sink" on the current receiving node."""
        node = self._source(self.incarnation)
        self.outbound = Outbound(self.WINDOW)
        self.out = self.outbound.open("worker/1", "sink", f"recv-{self.receiver}", self.now, self.WINDOW)
        self.sender_outbox = Outbox(lambda: None)
        view = View(NodeInfo(node_id=node, endpoints=["ipc:///x"], host="h", pid=1), run_id="r", is_root=True)
        self.sender = self._settlement(node, self.outbound, self.sender_outbox, InStreams(self.WINDOW), view,
                                       lambda peer, message: None)

    def _new_receiver(self) -> None:
        """The receiving node, whose view (the root's: nothing waits) gives "worker/1" to the live
        incarnation's node; every incarnation's node said hello on its connection."""
        node = f"recv-{self.receiver}"
        self.view = View(NodeInfo(node_id=node, endpoints=["ipc:///x"], host="h", pid=1), run_id="r", is_root=True)
        self.view.apply(RegistryUpdate(added={"worker/1": self._source(self.incarnation)}))
        streams, parking = InStreams(self.WINDOW), Parking(self.WINDOW)
        self.receiver_outbox = Outbox(lambda: None)
        receiver = self.receiver

        def refuse(peer: str, what: str) -> None:
            assert peer != self._source(self.incarnation), f"the live incarnation was refused: {what}"

        def expel(peer: str, why: str) -> None:
            raise AssertionError(f"a sender that keeps to its window is never expelled: {why}")

        def ack(peer: str, message: Ack) -> None:
            self.acks.append((int(peer.split("-")[1]), f"recv-{receiver}", message))

        self.incoming = Incoming(
            codec=CODEC, view=self.view, streams=streams, parking=parking, outbox=self.receiver_outbox,
            local={"sink": lambda envelope, message, source, line: self.mailbox.append((source, envelope))},
            bulk={}, log=_Log(), clock=lambda: self.now,
            node_message=lambda *args: None, resolve=lambda *args: None, refuse=refuse, expel=expel,
            reply=lambda *args: None)
        self.receiving = self._settlement(node, Outbound(self.WINDOW), self.receiver_outbox, streams, self.view, ack)

    def _source(self, incarnation: int) -> str:
        return f"node-{incarnation}"

    def _ship(self) -> None:
        """What the sender's settlement queued (re-sends, a re-homed stream), onto the network."""
        for node, records in self.sender_outbox.take_records():
            self.net.extend((self.incarnation, node, record) for record in records)

    def _take(self, incarnation: int, records: list[bytes]) -> None:
        """One batch frame from an incarnation's connection through the receiving node's Incoming."""
        source = self._source(incarnation)
        self.view.peers.add(source)  # it said hello on its connection
        self.incoming.frames(source, [CODEC.join_records(records)], from_router=True)

    @rule()
    @precondition(lambda self: self.out.in_flight < self.WINDOW)
    def send(self) -> None:
        self.payloads += 1
        seq = self.out.seq + 1
        record = CODEC.encode_record(Envelope(sender="worker/1", target="sink", seq=seq, wall_ns=self.payloads),
                                     Throttle())
        self.out.append(seq, record)
        self.sent[self.incarnation].append(self.payloads)
        self.net.append((self.incarnation, self.out.node_id, record))

    @rule(data=st.data())
    @precondition(lambda self: self.net)
    def deliver(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.net) - 1), label="which (reordering)")
        incarnation, node, record = self.net.pop(i)
        if node == f"recv-{self.receiver}":  # else that node is gone
            self._take(incarnation, [record])

    @rule(data=st.data())
    @precondition(lambda self: self.net)
    def deliver_batch(self, data: st.DataObject) -> None:
        """As the node takes a batch frame off one connection: the first ``k`` in flight from the
        first one's connection, in one frame (a run of a stream's next numbers is taken whole)."""
        k = data.draw(st.integers(1, len(self.net)), label="batch size")
        incarnation, node, _ = self.net[0]
        batch = [item for item in self.net[:k] if item[:2] == (incarnation, node)]
        self.net = [item for item in self.net[:k] if item[:2] != (incarnation, node)] + self.net[k:]
        if node == f"recv-{self.receiver}":
            self._take(incarnation, [record for _, _, record in batch])

    @rule(data=st.data())
    @precondition(lambda self: self.net)
    def lose(self, data: st.DataObject) -> None:
        self.net.pop(data.draw(st.integers(0, len(self.net) - 1)))

    @rule(data=st.data())
    @precondition(lambda self: self.net)
    def duplicate(self, data: st.DataObject) -> None:
        self.net.append(self.net[data.draw(st.integers(0, len(self.net) - 1))])

    @rule()
    @precondition(lambda self: self.mailbox)
    def handle(self) -> None:
        source, envelope = self.mailbox.pop(0)
        self.log.append((int(source.split("-")[1]), self.receiver, envelope.wall_ns))
        self.receiver_outbox.handled((source, envelope.sender, envelope.target), envelope.seq)

    @rule()
    def flush_acks(self) -> None:
        self.receiving.flush_acks()

    def _ack(self, incarnation: int, node: str, ack: Ack) -> None:
        if incarnation != self.incarnation:
            return  # for a sender that is gone
        self.refused_acks.clear()
        self.sender.acked(ack, node, self.now)
        assert not self.refused_acks or node != self.out.node_id, "only the target's former node is refused"

    @rule(data=st.data())
    @precondition(lambda self: self.acks)
    def deliver_ack(self, data: st.DataObject) -> None:
        self._ack(*self.acks.pop(data.draw(st.integers(0, len(self.acks) - 1))))

    @rule(data=st.data())
    @precondition(lambda self: self.acks)
    def lose_ack(self, data: st.DataObject) -> None:
        self.acks.pop(data.draw(st.integers(0, len(self.acks) - 1)))

    @rule(dt=st.floats(0.1, 2.0))
    def tick(self, dt: float) -> None:
        self.now += dt
        self.sender.retransmit(self.now, after=1.0)
        self._ship()

    @rule()
    def restart_sender(self) -> None:
        """A new process takes "worker/1" over; the receiver's view follows the registry."""
        self.incarnation += 1
        self.sent[self.incarnation] = []
        self._new_sender()
        self.view.apply(RegistryUpdate(added={"worker/1": self._source(self.incarnation)}))

    @rule()
    def move_target(self) -> None:
        """The target's process died with what it had not handled; a new one takes the name over."""
        self.receiver += 1
        self._new_receiver()
        self.mailbox = []
        self.sender.rehome("worker/1", "sink", f"recv-{self.receiver}")
        self._ship()

    @invariant()
    def each_stream_is_in_order_without_repeats(self) -> None:
        # Across a move a message the old node handled may be handled again by the new one (its ack was
        # lost with the old node): order and uniqueness hold per receiving node.
        for incarnation, payloads in self.sent.items():
            order = {p: n for n, p in enumerate(payloads)}
            for receiver in range(self.receiver + 1):
                got = [p for i, r, p in self.log if i == incarnation and r == receiver]
                positions = [order[p] for p in got]  # KeyError: something handled that was never sent
                assert all(a < b for a, b in zip(positions, positions[1:])), (incarnation, receiver, got)

    def teardown(self) -> None:
        # The network heals: what is in flight arrives, every message is handled and acked, retransmission runs.
        for _ in range(4 * self.WINDOW + 8):
            while self.net:
                self.deliver_first()
            while self.mailbox:
                self.handle()
            self.flush_acks()
            while self.acks:
                self._ack(*self.acks.pop(0))
            if not self.out.unacked:
                break
            self.tick(1.5)
        assert not self.out.unacked, "the live incarnation's messages were all handled"
        live = [p for i, _, p in self.log if i == self.incarnation]
        assert set(self.sent[self.incarnation]) <= set(live), "nothing the live incarnation sent is lost"

    def deliver_first(self) -> None:
        incarnation, node, record = self.net.pop(0)
        if node == f"recv-{self.receiver}":
            self._take(incarnation, [record])


TestNetwork = Network.TestCase
TestNetwork.settings = settings(max_examples=1000, stateful_step_count=60, deadline=None, derandomize=True)
