"""ActorSystem: hosts actors in a process, and lets any thread talk to them.

Each actor runs in its own thread and handles one message at a time.  The
transport's I/O thread owns every socket (see :mod:`actorwire.transport._node`);
user threads may call ``tell``/``ask`` freely, and a trainer that wants to be
told things gets an :class:`Inbox` it polls without blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, overload

from actorwire.actors.runtime._actor import Actor, effects_name
from actorwire.actors.runtime._cell import _STOP, _Cell
from actorwire.actors.runtime._inbox import Inbox
from actorwire.actors.runtime._launch import ActorSpec, ChildProcess, set_process_title
from actorwire.actors.runtime._record import RecordSettings
from actorwire.actors.runtime._timers import Timers
from actorwire.messages import ActorwireError, Envelope, Message
from actorwire.messages.kinds import Down, DownReason, ErrorCode, NodeStatus, RankExited
from actorwire.transport import (
    ActorDead,
    RemoteError,
    RuntimeConfig,
    SystemClosed,
    UnknownActor,
)
from actorwire.transport.internal import (
    ChildFailed,
    DeliveryError,
    InvalidArgument,
    Node,
    Security,
    WrongType,
    get_logger,
)

R = TypeVar("R", bound=Message)
#: Names that start so belong to the runtime (a node's introspector): hidden from names() and wait().
RUNTIME_PREFIX = "."


class UnexpectedReply(RemoteError):
    """An ask got a reply of another kind than the caller expected (``code`` is ``bad_message``)."""

    def __init__(self, target: str, expected: type[Message], got: Message) -> None:
        detail = f"answered `{type(got).wire_tag()}`, expected `{expected.wire_tag()}`"
        DeliveryError.__init__(self, f"{target!r} {detail}")
        self.target = target
        self.code = ErrorCode.BAD_MESSAGE
        self.remote_message = detail
        self.reply = got


class ActorSystem:
    """Actors of one process, joined to a system of processes.

    With ``join=None`` this process is the root: it holds the registry and
    others join it at :attr:`endpoint`.  With ``join=ENDPOINT`` it joins a
    running system (use :func:`attach` to read the endpoint and run id from
    the environment).
    """

    def __init__(
        self,
        *,
        run_id: str | None = None,
        join: str | None = None,
        bind: str | None = None,
        config: RuntimeConfig | None = None,
        rank: int | None = None,
        seed: int | None = None,
        takeover: bool = False,
        node_id: str | None = None,
        proctitle: bool = False,
        record: str | os.PathLike[str] | RecordSettings | None = None,
        security: Security | None = None,
        join_timeout: float = 10.0,
        introspect: bool = True,
    ) -> None:
        if join is not None and run_id is None:
            raise InvalidArgument("joining a system needs its run_id")
        if record is not None and not isinstance(record, (str, os.PathLike, RecordSettings)):
            raise WrongType(f"record= takes a directory (str or path) or RecordSettings, got {type(record).__name__}")
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.config = config or RuntimeConfig()
        self.rank = rank
        self.seed = seed if seed is not None else _stable_int(self.run_id)
        self._cells: dict[str, _Cell] = {}
        #: Local actors that stopped short of their work, and why (``Context.stop(failure)``, or a
        #: handler that raised and stopped its actor): a child process exits 3 when there are any.
        self.failures: dict[str, str] = {}
        self._inboxes: dict[str, Inbox] = {}
        self._watchers: dict[str, set[str]] = {}
        self._watch_lock = threading.Lock()
        self._thread_names = threading.local()
        self._closed = False
        self._record = (RecordSettings(os.fspath(record)) if isinstance(record, (str, os.PathLike))
                        else record or RecordSettings.from_env())
        self.log = get_logger(run_id=self.run_id, rank=rank)
        self._node = Node(run_id=self.run_id, root_endpoint=join, bind_tcp=bind, config=self.config,
                          on_down=self._on_down, node_id=node_id, takeover=takeover, security=security)
        self._timers = Timers()
        self._children: list[ChildProcess] = []
        self._proctitle = proctitle
        self._title_lead: str | None = None
        self._idle = threading.Condition()
        try:
            self._node.start(join_timeout)
        except BaseException:
            self._timers.close()
            raise
        if introspect:  # what `actorwire status` asks this node (read-only; see _introspect)
            from actorwire.actors.runtime._introspect import Introspector, introspector_name

            self._spawn(Introspector(self), introspector_name(self.node_id))

    # -- properties ------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Where other processes join this system (the root's endpoint)."""
        return self._node.root_endpoint

    @property
    def node_id(self) -> str:
        return self._node.node_id

    @property
    def is_root(self) -> bool:
        return self._node.is_root

    def names(self) -> list[str]:
        """Every actor name registered in the system (the runtime's own, starting with ``.``, left out)."""
        return self._node.names()

    def statistics(self) -> NodeStatus:
        """This node's counters and actors, as ``actorwire status`` shows them (a frozen record)."""
        cells = [cell for name, cell in list(self._cells.items()) if not name.startswith(RUNTIME_PREFIX)]
        return self._node.status([cell.statistics() for cell in cells], self._node.notes())

    def wait_for(self, name: str, timeout: float = 10.0) -> None:
        self._node.wait_for(name, timeout)

    # -- actors ----------------------------------------------------------

    def spawn(self, actor: Actor, name: str) -> str:
        """Start ``actor`` under ``name`` in this process; returns the name."""
        if not isinstance(actor, Actor):
            raise WrongType(f"spawn() takes an Actor instance, got {type(actor).__name__}")
        if not isinstance(name, str) or not 1 <= len(name) <= 256:
            # The wire's ActorName: a name another node could not be told is no name (and "" is the
            # target of node-level messages).
            raise InvalidArgument(f"an actor name is 1 to 256 characters, got {name!r}")
        if name.startswith(RUNTIME_PREFIX):
            raise InvalidArgument(f"actor names starting with {RUNTIME_PREFIX!r} are the runtime's: {name!r}")
        return self._spawn(actor, name)

    def _spawn(self, actor: Actor, name: str) -> str:
        self._check_open()
        adapter = actor.effects(name)
        if adapter is not None:  # beside the actor, before it starts: its on_start may use it
            self._spawn(adapter, effects_name(name))
        cell = _Cell(self, name, actor, _stable_int(f"{self.seed}:{name}"))
        cell.adapter = effects_name(name) if adapter is not None else None
        self._node.add_local(name, cell.deliver, deliver_many=cell.deliver_many)
        self._cells[name] = cell
        cell.thread.start()
        self._retitle()
        return name

    def _retitle(self, lead: str | None = None) -> None:
        """``ps`` names what this process is for: ``lead`` first (a Worker's rank), then its actors
        (adapters left out: they serve an actor already named)."""
        if lead is not None:
            self._title_lead = lead
        if not self._proctitle:
            return
        adapters = {c.adapter for c in self._cells.values() if c.adapter}
        names = [n for n in sorted(self._cells) if n not in adapters and n != self._title_lead
                 and not n.startswith(RUNTIME_PREFIX)]
        if self._title_lead:
            names = [self._title_lead, *([f"({' '.join(names)})"] if names else [])]
        set_process_title(names)

    def spawn_process(
        self,
        actors: dict[str, str] | list[ActorSpec],
        *,
        config: dict[str, dict[str, Any]] | None = None,
        rank: int | None = None,
        env: dict[str, str] | None = None,
        wait: bool = True,
        timeout: float = 30.0,
        takeover: bool = False,
        watcher: str | None = None,
    ) -> ChildProcess:
        """Start actors in a new local process; by default wait until they are registered.

        ``actors`` maps names to ``"module:Class"`` targets (``config[name]``
        gives keyword arguments), or is a list of :class:`ActorSpec`.  The child
        is watched: if it dies, watchers of its actors get ``Down(dead)`` at once,
        and ``watcher`` (with ``rank``) gets ``RankExited`` whenever it exits.
        """
        self._check_open()
        if isinstance(actors, dict):
            specs = [ActorSpec(name, target, (config or {}).get(name, {})) for name, target in actors.items()]
        else:
            specs = list(actors)
        if self._record is not None:  # children record too, into the same directory
            env = {"ACTORWIRE_RECORD": self._record.directory,
                   "ACTORWIRE_RECORD_ACTORS": ",".join(self._record.actors), **(env or {})}
        child = ChildProcess(self, specs, rank=rank, env=env, takeover=takeover,
                             on_exit=self._exit_reporter(rank, watcher))
        self._children.append(child)
        if wait:
            for spec in specs:
                try:
                    self.wait_for(spec.name, timeout)
                except TimeoutError:
                    code = child.returncode
                    if code is not None:
                        raise ChildFailed(
                            f"child process for {child.names} exited with status {code} before registering"
                        ) from None
                    raise
        return child

    def launch(self, argv: list[str], *, rank: int | None = None, env: dict[str, str] | None = None,
               watcher: str | None = None) -> ChildProcess:
        """Start any command as a member process: it joins with ``attach()`` and no flags.

        The child gets ``ACTORWIRE_JOIN``, ``ACTORWIRE_RUN_ID``, ``ACTORWIRE_NODE_ID`` (and
        ``ACTORWIRE_RANK``) and is watched: its actors are reported dead the moment it dies.
        With ``rank`` and ``watcher`` (an actor name, e.g. the coordinator), the watcher is told
        ``RankExited`` when the process exits, also when it dies before it has joined, which no
        ``Down`` can report (it had no actor yet).
        """
        self._check_open()
        if self._record is not None:
            env = {"ACTORWIRE_RECORD": self._record.directory,
                   "ACTORWIRE_RECORD_ACTORS": ",".join(self._record.actors), **(env or {})}
        child = ChildProcess(self, [], rank=rank, env=env, argv=argv, on_exit=self._exit_reporter(rank, watcher))
        self._children.append(child)
        return child

    def _exit_reporter(self, rank: int | None, watcher: str | None) -> Callable[[str, int], None]:
        """What a child's watch thread runs when the child exits: its actors are reported down,
        then the rank's watcher is told (its Down, if it had joined, comes first)."""

        def exited(node_id: str, code: int) -> None:
            self._node.report_process_exit(node_id, code)
            if watcher is None or rank is None or self._closed:
                return
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            try:
                self.tell(watcher, RankExited(rank=rank, returncode=code, detail=how), timeout=5.0)
            except ActorwireError as exc:  # the watcher is gone, or the system is closing
                self.log.debug("could not report a rank's exit", rank=rank, watcher=watcher, error=str(exc))

        return exited

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every local actor has stopped or the root is gone; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self._inboxes and all(name.startswith(RUNTIME_PREFIX) for name in list(self._cells)):
                return True
            if self._node.root_gone.is_set():
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._node.root_gone.wait(0.05 if left is None else min(0.05, left))

    def stop(self, name: str, timeout: float = 10.0) -> None:
        """Stop local actor ``name`` after the messages already in its mailbox."""
        cell = self._cells.get(name)
        if cell is None:
            raise UnknownActor(name, self._cells)
        try:
            cell.mailbox.put((Envelope(sender=name, target=name, seq=0), _STOP, None), None)
        except SystemClosed:
            return
        cell.thread.join(self.config.scaled(timeout))

    def inbox(self, name: str) -> Inbox:
        """A named mailbox for the calling user thread."""
        self._check_open()
        inbox = Inbox(self, name)
        self._node.add_local(name, inbox._deliver, deliver_many=inbox._deliver_many)
        self._inboxes[name] = inbox
        return inbox

    # -- messaging from user threads -------------------------------------

    def _user_name(self) -> str:
        """The sender name of the calling user thread (one name per thread keeps FIFO per sender)."""
        try:
            return self._thread_names.name  # type: ignore[no-any-return]
        except AttributeError:
            name = self._thread_names.name = f"~{self._node.node_id}/{threading.get_ident()}"
            return name

    def tell(self, target: str, message: Message, *, timeout: float | None = None) -> None:
        """Send ``message`` to ``target`` from the calling thread.

        Blocks while ``target`` is full, up to ``timeout`` (default: the
        config's ``send_timeout``), then raises ``BackpressureTimeout``.
        """
        self._node.send(self._user_name(), target, message, timeout=timeout)

    def tell_nowait(self, target: str, message: Message) -> None:
        """``tell`` that raises ``WouldBlock`` at once instead of waiting for room."""
        self._node.send(self._user_name(), target, message, block=False)

    @overload
    def ask(self, target: str, message: Message, *, timeout: float | None = ..., expect: type[R]) -> R: ...
    @overload
    def ask(self, target: str, message: Message, *, timeout: float | None = ..., expect: None = ...) -> Message: ...

    def ask(self, target: str, message: Message, *, timeout: float | None = None,
            expect: type[R] | None = None) -> Any:
        """Send a request and wait for the reply.

        Raises ``AskTimeout`` (naming the target and the kind), ``ActorDead``,
        ``RemoteError`` (the handler failed or had no handler) or
        ``UnexpectedReply`` when ``expect`` is given and the reply is another kind.
        """
        return self._blocking_ask(self._user_name(), target, message, timeout, expect)

    async def ask_async(self, target: str, message: Message, *, timeout: float | None = None,
                        expect: type[R] | None = None) -> Any:
        """``ask`` for asyncio code: awaits the reply without blocking the event loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()

        def settle(value: Any, error: Exception | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        self._node.ask(
            self._user_name(), target, message, timeout=timeout,
            on_reply=lambda env, reply: loop.call_soon_threadsafe(settle, reply, None),
            on_failure=lambda corr, exc: loop.call_soon_threadsafe(settle, None, exc),
        )
        reply = await future
        if expect is not None and not isinstance(reply, expect):
            raise UnexpectedReply(target, expect, reply)
        return reply

    def _blocking_ask(self, sender: str, target: str, message: Message, timeout: float | None,
                      expect: type[R] | None) -> Any:
        result = self._node.ask_and_wait(sender, target, message, timeout)
        if expect is not None and not isinstance(result, expect):
            raise UnexpectedReply(target, expect, result)
        return result

    # -- supervision -----------------------------------------------------

    def _watch(self, watcher: str, name: str) -> None:
        # Looked up under the lock: the I/O thread removes the route before it takes the watchers
        # (``_on_down``), so a name that goes down while this runs is either dead here or finds the
        # watcher there.  Looked up before the lock, a Down in between was lost for good.
        with self._watch_lock:
            try:
                self._node.lookup(name)
            except ActorDead as dead:
                gone = dead
            else:
                self._watchers.setdefault(name, set()).add(watcher)
                return
        self._send_down(watcher, name, gone.reason, str(gone))

    def _unwatch(self, watcher: str, name: str) -> None:
        with self._watch_lock:
            self._watchers.get(name, set()).discard(watcher)

    def _on_down(self, name: str, reason: DownReason, detail: str) -> None:
        with self._watch_lock:
            watchers = self._watchers.pop(name, set())
        for watcher in watchers:
            self._send_down(watcher, name, reason, detail)

    def _send_down(self, watcher: str, name: str, reason: DownReason, detail: str) -> None:
        down = Down(name=name, reason=reason, detail=detail)
        envelope = Envelope(sender=name, target=watcher, seq=0)
        target = self._cells.get(watcher) or self._inboxes.get(watcher)
        if target is None:
            return
        try:
            (target.deliver if isinstance(target, _Cell) else target._deliver)(envelope, down, None, None)
        except SystemClosed:
            pass

    # -- lifecycle -------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SystemClosed("the actor system was shut down")

    def shutdown(self, timeout: float = 10.0, *, clean: bool = True) -> None:
        """Stop every local actor (after its queued messages), leave the system, close sockets.

        Idempotent.  Asks still waiting fail with ``SystemClosed``.  ``clean=False``
        is how a process that failed leaves: nothing is announced and nothing
        waited for, so every peer watching this node's actors sees them die
        (``Down`` with reason dead), never a clean exit.
        """
        if self._closed:
            return
        self._closed = True
        if not clean:
            self._node.close(timeout=0.0, announce=False)
        for name in list(self._cells):
            cell = self._cells.get(name)
            if cell is not None:
                try:
                    cell.mailbox.put((Envelope(sender=name, target=name, seq=0), _STOP, None), None)
                except SystemClosed:
                    pass
        for cell in list(self._cells.values()):
            cell.thread.join(self.config.scaled(timeout))
        for inbox in list(self._inboxes.values()):
            inbox.close()
        # The processes a root launched leave when they hear it leave; its sockets close after they
        # did (bounded by ``timeout``), not under them: see Node.leave.  (A member's children are
        # the root's members: they stay, and child.stop below ends them.)
        self._node.leave()
        if self.is_root:
            deadline = time.monotonic() + self.config.scaled(timeout)
            for child in self._children:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(max(0.0, deadline - time.monotonic()))
        self._node.close()
        self._timers.close()
        for child in self._children:
            child.stop(self.config.scaled(timeout))
            child.forget_socket()  # also here: its watcher thread may not have run yet
        self._node.remove_run_dir()  # empty once the children are gone (forget_socket took an ended one's)

    close = shutdown

    def interrupt(self, timeout: float = 5.0) -> None:
        """Ctrl-C of a run this process launched: end every child now (SIGTERM) and quietly, then
        shut down without waiting for them to leave cleanly."""
        # A second Ctrl-C (or a SIGTERM) must not cut this short: children frozen below and never
        # continued stayed SIGSTOPped for good, holding shared memory and sockets.  Held back until
        # the end (in the main thread, where Python runs signal handlers), and the children are
        # ended whatever is raised on the way.
        held = _hold_signals()
        children, self._children = self._children, []
        try:
            for child in children:  # frozen first: they log nothing about this node going away
                child.freeze()
            self.shutdown(timeout=1.0, clean=False)  # then this node, sockets first: nothing left to judge them
        finally:
            try:
                for child in children:
                    child.interrupt()
                for child in children:
                    try:
                        child.wait(timeout)
                    except subprocess.TimeoutExpired:
                        child.kill()
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            child.wait(timeout)
                    child.forget_socket()
                self._node.remove_run_dir()
            finally:
                _release_signals(held)

    def __enter__(self) -> ActorSystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        role = "root" if self.is_root else "member"
        return f"<ActorSystem {role} run={self.run_id} node={self.node_id} actors={sorted(self._cells)}>"


def _hold_signals() -> set[int | signal.Signals] | None:
    """Block SIGINT and SIGTERM in the main thread (they stay pending); the mask it replaced, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def _release_signals(held: set[int | signal.Signals] | None) -> None:
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _stable_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
