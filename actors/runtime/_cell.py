"""An actor's cell: its thread, mailbox and context, the handler loop, and what happens when a
handler fails or the actor retires.  The system (``_system``) creates one per actor."""

from __future__ import annotations

import collections
import operator
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from actorwire.actors.runtime._actor import Actor
from actorwire.actors.runtime._context import LiveContext, RecordingContext
from actorwire.actors.runtime._mailbox import Mailbox
from actorwire.actors.runtime._record import IN_TAG as _IN
from actorwire.actors.runtime._record import Recorder
from actorwire.messages import Envelope, Message
from actorwire.messages.kinds import ActorDetail, ActorStatus, AskFailed, Down, ErrorCode, ErrorReply, TimerFired
from actorwire.transport import (
    ActorDead,
    AskTimeout,
    RemoteError,
    SystemClosed,
)
from actorwire.transport.internal import (
    Node,
    get_logger,
)

if TYPE_CHECKING:
    from actorwire.actors.runtime._system import ActorSystem

_STOP = object()
_MESSAGE = operator.itemgetter(1)
_UNRESOLVED = object()  # a kind whose handler the cell has not looked up yet


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
        #: Why the actor stopped short of its work: ``ctx.stop(failure)``, or a handler that raised
        #: and stopped it; "" for a clean stop.  Kept by the system once the actor retires.
        self.failure = ""

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
        except Exception as exc:
            log.exception("on_start failed; the actor stops")
            self.stopping = True
            self.failure = f"on_start raised {type(exc).__name__}: {exc}"
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
            stops = not self.actor.on_error(exc, message, self.ctx)
        except Exception:
            log.exception("on_error failed; the actor stops")
            stops = True
        if stops:
            self.stopping = True
            self.failure = self.failure or f"handler of {type(message).wire_tag()} raised {type(exc).__name__}: {exc}"

    def _retire(self, leftover: list[tuple[Envelope, Any, str | None]]) -> None:
        system, node = self.system, self.system._node
        system._timers.cancel_all(self)
        if self.recorder is not None:
            self.recorder.close()
        node.remove_local(self.name)
        left = leftover + self.mailbox.close()
        tells = downs = 0
        kinds: dict[str, int] = {}
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
            elif isinstance(message, Down) and source is None:
                downs += 1  # the runtime's word that a watched actor is gone: no sender's work is lost
            elif not envelope.is_reply:
                tells += 1
                kind = type(message).wire_tag()
                kinds[kind] = kinds.get(kind, 0) + 1
            if source is not None:
                node.handled(source, envelope)
        if tells:
            self.log.error("actor stopped with unhandled messages", count=tells, kinds=kinds)
        if downs:
            self.log.debug("actor stopped before it read watch notifications", count=downs)
        system._cells.pop(self.name, None)
        if self.failure:
            system.failures[self.name] = self.failure
        adapter = system._cells.get(self.adapter) if self.adapter is not None else None
        if adapter is not None:  # after everything the actor told it (one mailbox: FIFO)
            try:
                adapter.mailbox.put((Envelope(sender=self.name, target=adapter.name, seq=0), _STOP, None), None)
            except SystemClosed:
                pass
