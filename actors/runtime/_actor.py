"""The actor base class: handlers found by message type.

An actor is a state machine.  A handler receives one message and a
:class:`~actorwire.actors.Context`, updates state and asks the context for
effects (send, reply, timers, watches).  It never touches a socket, a thread,
the clock or an unseeded random generator, which is what makes recording and
replay exact and unit tests instant.

Example::

    class Counter(Actor):
        def __init__(self) -> None:
            self.total = 0

        @handler
        def on_batch(self, msg: Batch, ctx: Context) -> None:
            self.total += 1
            if ctx.correlation_id:
                ctx.reply(Heartbeat(rank=msg.rank, step_count=self.total))
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from actorwire.messages import Message
from actorwire.messages.kinds import ActorDetail
from actorwire.transport.internal import WrongType

if TYPE_CHECKING:
    from actorwire.actors.runtime._context import Context

F = TypeVar("F", bound=Callable[..., Any])


def handler(*args: Any) -> Any:
    """Mark a method as the handler of the message types it names.

    ``@handler`` reads the type from the annotation of the message parameter
    (a union registers every member); ``@handler(Batch, SyncAck)`` names them.
    """
    if len(args) == 1 and callable(args[0]) and not isinstance(args[0], type):
        fn = args[0]
        fn.__actorwire_handles__ = None  # resolved from annotations by the class
        return fn
    kinds = args
    for kind in kinds:
        if not (isinstance(kind, type) and issubclass(kind, Message)):
            raise WrongType(f"@handler takes message classes, got {kind!r}")

    def mark(fn: F) -> F:
        fn.__actorwire_handles__ = tuple(kinds)  # type: ignore[attr-defined]
        return fn

    return mark


def _annotated_types(cls: type, fn: Callable[..., Any]) -> tuple[type[Message], ...]:
    hints = typing.get_type_hints(fn)
    params = [p for p in fn.__code__.co_varnames[1 : fn.__code__.co_argcount]]
    if not params or params[0] not in hints:
        raise WrongType(
            f"{cls.__name__}.{fn.__name__}: annotate the message parameter "
            f"(e.g. `msg: Batch`) or use @handler(Batch)"
        )
    tp = hints[params[0]]
    members = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for member in members:
        if not (isinstance(member, type) and issubclass(member, Message)):
            raise WrongType(f"{cls.__name__}.{fn.__name__}: {member!r} is not a message class")
    return tuple(members)


class Actor:
    """Base class of every actor.  Subclasses declare handlers with :func:`handler`."""

    _handlers: ClassVar[dict[type[Message], str]] = {}
    #: Declared by an actor whose handlers never block (no sleep, no I/O, no wait on another
    #: thread): messages from other processes may then be handled on the runtime's I/O thread
    #: while the actor is idle, which saves two thread hand-offs per message (and per ask, the
    #: reply leaves in the same turn).  A send from such a handler never waits: past the credit
    #: window or a full mailbox it raises ``WouldBlock``.
    never_blocks: ClassVar[bool] = False
    #: The constructor's arguments, kept so that config() can rebuild the actor for replay.
    _actorwire_init: tuple[tuple[Any, ...], dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type[Message], str] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                if not hasattr(fn, "__actorwire_handles__"):
                    continue
                if attr in _HOOKS:
                    raise WrongType(f"{klass.__name__}.{attr}: {attr}() is a lifecycle hook; "
                                    f"name the handler something else")
                kinds = fn.__actorwire_handles__ or _annotated_types(klass, fn)
                for kind in kinds:
                    owner = table.get(kind)
                    if owner is not None and owner != attr and klass is cls and _defined_here(cls, owner):
                        raise WrongType(f"{cls.__name__}: both {owner}() and {attr}() handle {kind.__name__}")
                    table[kind] = attr
        cls._handlers = table

    # -- hooks (override as needed) --------------------------------------

    def on_start(self, ctx: Context) -> None:
        """Runs in the actor's thread before the first message."""

    def on_stop(self, ctx: Context) -> None:
        """Runs in the actor's thread after the last message."""

    def on_unhandled(self, message: Message, ctx: Context) -> None:
        """A message with no handler arrived.  Default: log it (an ask gets an error reply)."""
        ctx.log.warning("no handler for message", kind=type(message).wire_tag(), sender=ctx.sender)

    def effects(self, name: str) -> Actor | None:
        """The adapter that carries out the effects of this actor (``name``: the actor's own), or None.

        Handlers stay pure: what touches shared memory, a GPU or a file goes to
        the adapter as a message, and its outcome comes back as one.  The
        runtime spawns the adapter beside the actor, in the same process, as
        ``<name>/io`` (see :func:`effects_name`), before the actor starts, and
        stops it after the actor stops; it is never recorded.  Replay never
        calls this: the recorded replies stand in for the effects.
        """
        return None

    def status(self, now: float) -> ActorDetail | None:
        """What ``actorwire status`` shows of this actor besides its counters (its phase, its ranks),
        or None.  ``now`` is the runtime's clock, as ``ctx.now()`` reads it.

        Called from the node's introspector, in another thread than the actor's, while handlers
        run: read attributes once and copy containers whole (``dict(self.x)``, ``list(...)``, which
        are atomic), never iterate a live one, and change nothing.
        """
        return None

    def on_error(self, error: Exception, message: Message, ctx: Context) -> bool:
        """A handler raised.  Return True to keep running (default), False to stop the actor.

        The error is already logged, and an asker already has its error reply.
        """
        return True

    # -- dispatch ---------------------------------------------------------

    @classmethod
    def handler_for(cls, kind: type[Message]) -> str | None:
        """Name of the method handling ``kind`` (exact type first, then its bases)."""
        name = cls._handlers.get(kind)
        if name is None:
            for base in kind.__mro__[1:]:
                name = cls._handlers.get(base)  # type: ignore[call-overload]
                if name is not None:
                    cls._handlers[kind] = name  # cache the resolution
                    break
        return name

    def __new__(cls, *args: Any, **kwargs: Any) -> Actor:
        self = super().__new__(cls)
        # Remembered so that config() can rebuild the actor for replay by default.
        self._actorwire_init = (args, kwargs)
        return self

    def config(self) -> dict[str, Any]:
        """Keyword arguments that rebuild this actor (recorded in logs, used by replay).

        By default, the arguments the actor was constructed with.  Override it
        when those are not plain data (msgpack-encodable).
        """
        args, kwargs = getattr(self, "_actorwire_init", ((), {}))
        if not args:
            return dict(kwargs)
        try:
            bound = inspect.signature(type(self).__init__).bind(self, *args, **kwargs)
        except TypeError:
            return {}
        params = dict(bound.arguments)
        params.pop("self", None)
        return params


def dispatch(actor: Actor, message: Message, ctx: Context) -> bool:
    """Run the handler ``actor`` declares for ``message``; without one, ``on_unhandled``.

    The one place a message meets a handler: the live system, the test kit
    and replay all call it.  Returns whether a handler ran (the live system
    then answers an unhandled ask with an error).
    """
    name = actor.handler_for(type(message))
    if name is None:
        actor.on_unhandled(message, ctx)
        return False
    getattr(actor, name)(message, ctx)
    return True


_HOOKS = frozenset({"on_start", "on_stop", "on_error", "on_unhandled", "handler_for", "config", "effects",
                    "status"})


def effects_name(owner: str) -> str:
    """The name of ``owner``'s effects adapter."""
    return f"{owner}/io"


class EffectsAdapter(Actor):
    """Base of the adapters :meth:`Actor.effects` returns: it obeys its owner only.

    The adapter's handlers run the effects (that is their job); a message from
    any other sender is refused and logged, so no peer of the bus can make an
    adapter pack, map or write anything.
    """

    #: Never recorded: its effects are what replay must not repeat.
    recorded: ClassVar[bool] = False

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def obeys(self, ctx: Context) -> bool:
        """True when the message being handled is from the owner; otherwise logs the refusal."""
        if ctx.sender == self.owner:
            return True
        ctx.log.warning("effects adapter refused a message from another sender", sender=ctx.sender,
                        owner=self.owner)
        return False


def _defined_here(cls: type, attr: str) -> bool:
    return attr in vars(cls)
