"""ActorSystem: hosts actors in a process, and lets any thread talk to them.

Each actor runs in its own thread and handles one message at a time.  The
transport's I/O thread owns every socket (see :mod:`actorwire.transport._node`);
user threads may call ``tell``/``ask`` freely, and a trainer that wants to be
told things gets an :class:`Inbox` it polls without blocking.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import operator
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, overload

from actorwire.actors.runtime._actor import Actor, effects_name
from actorwire.actors.runtime._context import LiveContext, RecordingContext
from actorwire.actors.runtime._inbox import Inbox
from actorwire.actors.runtime._launch import ActorSpec, ChildProcess, set_process_title
from actorwire.actors.runtime._mailbox import Mailbox
from actorwire.actors.runtime._record import IN_TAG as _IN
from actorwire.actors.runtime._record import Recorder, RecordSettings
from actorwire.actors.runtime._timers import Timers
from actorwire.messages import (
    ActorDetail,
    ActorStatus,
    ActorwireError,
    AskFailed,
    Down,
    DownReason,
    Envelope,
    ErrorCode,
    ErrorReply,
    Message,
    NodeStatus,
    RankExited,
    TimerFired,
)
from actorwire.transport import (
    ActorDead,
    AskTimeout,
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
_STOP = object()
_MESSAGE = operator.itemgetter(1)
#: Names that start so belong to the runtime (a node's introspector): hidden from names() and wait().
RUNTIME_PREFIX = "."
_UNRESOLVED = object()  # a kind whose handler the cell has not looked up yet


class UnexpectedReply(RemoteError):
    """An ask got a reply of another kind than the caller expected (``code`` is ``bad_message``)."""

    def __init__(self, target: str, expected: type[Message], got: Message) -> None:
        detail = f"answered `{type(got).wire_tag()}`, expected `{expected.wire_tag()}`"
        DeliveryError.__init__(self, f"{target!r} {detail}")
        self.target = target
        self.code = ErrorCode.BAD_MESSAGE
        self.remote_message = detail
        self.reply = got


def _failure_code(error: Exception) -> ErrorCode:
    if isinstance(error, AskTimeout):
        return ErrorCode.TIMEOUT
    if isinstance(error, ActorDead):
        return ErrorCode.TARGET_DEAD
    if isinstance(error, RemoteError):
        return error.code
    if isinstance(error, SystemClosed):
        return ErrorCode.SHUTTING_DOWN
    return ErrorCode.HANDLER_FAILED


class _ActorLog:
    """The actor's logger; each call adds the kind and correlation id of the current message."""

    __slots__ = ("_base", "_ctx")

    def __init__(self, base: Any) -> None:
        self._base = base
        self._ctx: LiveContext | None = None

    def _extra(self, kw: dict[str, Any]) -> dict[str, Any]:
        env = self._ctx.envelope if self._ctx is not None else None
        if env is not None:
            kw.setdefault("sender", env.sender)
            kw.setdefault("seq", env.seq)
            if env.correlation_id:
                kw.setdefault("corr", env.correlation_id)
        return kw

    def debug(self, event: str, **kw: Any) -> None:
        self._base.debug(event, **self._extra(kw))

    def info(self, event: str, **kw: Any) -> None:
        self._base.info(event, **self._extra(kw))

    def warning(self, event: str, **kw: Any) -> None:
        self._base.warning(event, **self._extra(kw))

    def error(self, event: str, **kw: Any) -> None:
        self._base.error(event, **self._extra(kw))

    def exception(self, event: str, **kw: Any) -> None:
        self._base.exception(event, **self._extra(kw))


class _Cell:
    """One actor, its mailbox and its thread."""

    def __init__(self, system: ActorSystem, name: str, actor: Actor, seed: int) -> None:
        self.system = system
        self.name = name
        self.actor = actor
        self.mailbox: Mailbox[tuple[Envelope, Any, str | None]] = Mailbox(system.config.mailbox_capacity,
                                                                          on_behind=self._behind)
        self.log = _ActorLog(get_logger(actor=name, rank=system.rank, cls=type(actor).__qualname__))
        self.recorder: Recorder | None = None
        settings = system._record
        if settings is not None and settings.wants(name) and getattr(actor, "recorded", True):
            self.recorder = Recorder(settings, run_id=system.run_id, name=name, actor=actor, rank=system.rank,
                                     seed=seed)
            self.ctx: LiveContext = RecordingContext(self, seed, self.recorder)
        else:
            self.ctx = LiveContext(self, seed)
        self.log._ctx = self.ctx
        self.stopping = False
        #: The name of the actor's effects adapter, when it has one.
        self.adapter: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"actor {name}", daemon=True)
        #: Held while a handler runs, by the actor's thread or (``never_blocks``) the I/O thread.
        self._turn = threading.Lock()
        self._inline = bool(getattr(actor, "never_blocks", False))
        self._started = False  # on_start has run: the I/O thread may take a turn
        self._leftover: list[tuple[Envelope, Any, str | None]] = []  # what a stop in an I/O-thread turn left
        self._methods: dict[type, Any] = {}  # kind -> its bound handler (None: no handler), as looked up
        # What statistics() reports: messages handled (in all and per kind) and handlers that raised.
        self.handled = 0
        self.kinds: collections.Counter[type[Message]] = collections.Counter()
        self.failures = 0

    # -- delivery (any thread) -------------------------------------------

    def _behind(self, depth: int) -> None:
        """The I/O thread appended past the mailbox's capacity: this actor cannot keep up."""
        self.log.warning("the actor is behind: messages from other processes wait in its mailbox; their "
                         "senders are held by credit and nothing is dropped", queued=depth,
                         capacity=self.system.config.mailbox_capacity)

    def deliver(self, envelope: Envelope, message: Message, source: str | None, timeout: float | None) -> bool:
        return self.mailbox.put((envelope, message, source), timeout)

    def deliver_many(self, batch: list[tuple[Envelope, Any, str | None]]) -> None:
        """The I/O thread's bulk path.  An actor that never blocks, idle and with nothing queued, is
        run here and now; otherwise the batch joins its mailbox.  The actor's thread takes messages
        from the mailbox only inside a turn, so nothing queued can be overtaken (per-stream FIFO)."""
        if self._inline and self._started and not self.stopping and self._turn.acquire(blocking=False):
            try:
                if not len(self.mailbox) and not self.stopping:
                    self._handle(batch)
                    return
            finally:
                self._turn.release()
        self.mailbox.put_many(batch)

    def deliver_timer(self, message: TimerFired, envelope: Envelope) -> None:
        try:
            self.mailbox.put((envelope, message, None), None)
        except SystemClosed:
            pass

    # -- what the context asks of the system (any thread) ---------------

    @property
    def node(self) -> Node:
        return self.system._node

    def start_timer(self, key: str, delay: float, periodic: bool) -> None:
        self.system._timers.start(self, key, delay, periodic)

    def cancel_timer(self, key: str) -> None:
        self.system._timers.cancel(self, key)

    def watch(self, name: str) -> None:
        self.system._watch(self.name, name)

    def unwatch(self, name: str) -> None:
        self.system._unwatch(self.name, name)

    def ask(self, target: str, message: Message, timeout: float | None) -> int:
        put = self.mailbox.put
        kind = type(message).wire_tag()

        def on_reply(envelope: Envelope, reply: Message) -> None:
            try:
                put((envelope, reply, None), None)
            except SystemClosed:
                pass

        def on_failure(corr: int, error: Exception) -> None:
            failed = AskFailed(correlation_id=corr, target=target, request_kind=kind,
                               reason=str(error), code=_failure_code(error))
            envelope = Envelope(sender=target, target=self.name, seq=0, correlation_id=corr, is_reply=True)
            try:
                put((envelope, failed, None), None)
            except SystemClosed:
                pass

        return self.system._node.ask(self.name, target, message, timeout=timeout,
                                     on_reply=on_reply, on_failure=on_failure)

    # -- the actor's thread ----------------------------------------------

    def _run(self) -> None:
        actor, ctx, log = self.actor, self.ctx, self.log
        rec = self.recorder
        if rec is not None:
            rec.begin()
        try:
            actor.on_start(ctx)
        except Exception:
            log.exception("on_start failed; the actor stops")
            self.stopping = True
        self._started = True
        mailbox = self.mailbox
        leftover: list[tuple[Envelope, Any, str | None]] = []
        while not self.stopping:
            try:
                mailbox.wait()
            except SystemClosed:
                break
            with self._turn:  # taken from the mailbox only inside a turn: see deliver_many
                batch = mailbox.take_many()
                if batch:
                    leftover = self._handle(batch)
        leftover = leftover or self._leftover
        ctx.envelope = None
        try:
            actor.on_stop(ctx)
        except Exception:
            log.exception("on_stop failed")
        self._retire(leftover)

    def _handle(self, batch: list[tuple[Envelope, Any, str | None]]) -> list[tuple[Envelope, Any, str | None]]:
        """Run ``batch`` through the handlers (inside a turn); returns what a stop left unhandled."""
        ctx, rec, methods = self.ctx, self.recorder, self._methods
        leftover: list[tuple[Envelope, Any, str | None]] = []
        done = 0
        if rec is not None:
            # An In row per message (recording.row's tuple, built here: Recorder.message and .done
            # with three clock reads were a third of a recorded receiver in a profile of bench
            # record).  One monotonic read per message: a handler ends when the next begins (the
            # batch's last end is read), and the wall clock is the monotonic one plus an offset
            # read once per batch.
            write, mono = rec.writer.write, time.monotonic_ns
            offset = time.time_ns() - mono()
            start = mono()
        for envelope, message, source in batch:
            if message is _STOP or self.stopping:
                leftover = batch[done:]
                self.stopping = True
                self.mailbox.wake()  # the actor's thread retires it
                break
            ctx.envelope = envelope
            ctx._source = source
            error: Exception | None = None
            if rec is not None:
                rec.index += 1
            # The handler, looked up once per kind: the same one dispatch() would pick (profile of
            # bench bus's receiver: dispatch and handler_for per message were a fifth of it).
            method = methods.get(type(message), _UNRESOLVED)
            if method is _UNRESOLVED:
                method = methods[type(message)] = self._method_for(type(message))
            try:
                if method is not None:
                    method(message, ctx)
                else:
                    self.actor.on_unhandled(message, ctx)
                    self._reply_unhandled(message, envelope, source)
            except SystemClosed as exc:  # the system closed under the handler: the actor stops, no fault
                error = exc
                if not self.system._closed:
                    self._failed(exc, message, envelope, source)
                else:
                    self.log.debug("the system closed while a handler ran", kind=type(message).wire_tag())
                    self.stopping = True
            except Exception as exc:
                error = exc
                self._failed(exc, message, envelope, source)
            if rec is not None:
                end = mono()
                wall = start + offset
                write((_IN, rec.index, start, wall, envelope, message, end) if error is None else
                      (_IN, rec.index, start, wall, envelope, message, end, f"{type(error).__name__}: {error}"),
                      rec.index, wall)
                start = end
            done += 1
        if rec is not None and done:
            rec.handled_until(start)
        taken = batch if not leftover else batch[:done]
        self.handled += done
        self.kinds.update(map(type, map(_MESSAGE, taken)))  # counted in C: 0.05 us a message
        # Credit for remote senders goes back once per batch, not per message.
        acks = {(source, envelope.sender, envelope.target): envelope.seq
                for envelope, _, source in taken if source is not None}
        if acks:
            self.system._node.handled_many(acks, done)
        if leftover:
            self._leftover = leftover
        elif self.stopping:
            self.mailbox.wake()  # ctx.stop() in the I/O thread's turn: the actor's thread retires it
        return leftover

    def _method_for(self, kind: type) -> Callable[[Any, Any], None] | None:
        """The bound handler of ``kind`` (what :func:`dispatch` calls), or None for none."""
        name = self.actor.handler_for(kind)
        return getattr(self.actor, name) if name is not None else None

    def statistics(self) -> ActorStatus:
        """This actor's counters (any thread: each is read once)."""
        try:
            detail = self.actor.status(time.monotonic())
        except Exception as exc:  # a status hook must not take the introspector down
            detail = ActorDetail(notes={"status() failed": f"{type(exc).__name__}: {exc}"})
        return ActorStatus(name=self.name, cls=type(self.actor).__qualname__, mailbox=len(self.mailbox),
                           handled=self.handled, by_kind={k.wire_tag(): n for k, n in list(self.kinds.items())},
                           failures=self.failures, detail=detail)

    def _reply_unhandled(self, message: Message, envelope: Envelope, source: str | None) -> None:
        if envelope.correlation_id and not envelope.is_reply:
            self.system._node.reply(self.name, envelope, source, ErrorReply(
                code=ErrorCode.NO_HANDLER, request_kind=type(message).wire_tag(),
                message=f"{type(self.actor).__name__} has no handler for `{type(message).wire_tag()}`"))

    def _failed(self, exc: Exception, message: Message, envelope: Envelope, source: str | None) -> None:
        log = self.log
        log.exception("handler failed", kind=type(message).wire_tag())
        self.failures += 1
        self.system._node.note(f"{self.name}: handler of {type(message).wire_tag()} raised "
                               f"{type(exc).__name__}: {exc}")
        if envelope.correlation_id and not envelope.is_reply:
            try:
                self.system._node.reply(self.name, envelope, source, ErrorReply(
                    code=ErrorCode.HANDLER_FAILED, request_kind=type(message).wire_tag(),
                    message=f"{type(exc).__name__}: {exc}"))
            except Exception:
                log.exception("could not send the error reply")
        try:
            if not self.actor.on_error(exc, message, self.ctx):
                self.stopping = True
        except Exception:
            log.exception("on_error failed; the actor stops")
            self.stopping = True

    def _retire(self, leftover: list[tuple[Envelope, Any, str | None]]) -> None:
        system, node = self.system, self.system._node
        system._timers.cancel_all(self)
        if self.recorder is not None:
            self.recorder.close()
        node.remove_local(self.name)
        left = leftover + self.mailbox.close()
        tells = 0
        for envelope, message, source in left:
            if message is _STOP:
                continue
            if envelope.correlation_id and not envelope.is_reply:
                try:
                    node.reply(self.name, envelope, source, ErrorReply(
                        code=ErrorCode.TARGET_DEAD, request_kind=type(message).wire_tag(),
                        message=f"actor {self.name!r} stopped before handling it"))
                except Exception as exc:  # the system is closing under it: the asker's deadline answers
                    self.log.debug("could not answer an ask left in a stopped actor's mailbox",
                                   kind=type(message).wire_tag(), error=f"{type(exc).__name__}: {exc}")
            elif not envelope.is_reply:
                tells += 1
            if source is not None:
                node.handled(source, envelope)
        if tells:
            self.log.error("actor stopped with unhandled messages", count=tells)
        system._cells.pop(self.name, None)
        adapter = system._cells.get(self.adapter) if self.adapter is not None else None
        if adapter is not None:  # after everything the actor told it (one mailbox: FIFO)
            try:
                adapter.mailbox.put((Envelope(sender=self.name, target=adapter.name, seq=0), _STOP, None), None)
            except SystemClosed:
                pass


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
        self._node.add_local(name, inbox._deliver, deliver_many=inbox._mailbox.put_many)
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
        self._node.close()
        self._timers.close()
        for child in self._children:
            child.stop(self.config.scaled(timeout))
            child.forget_socket()  # also here: its watcher thread may not have run yet
        self._node.remove_run_dir()  # emptied by the children that left after this node closed

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
