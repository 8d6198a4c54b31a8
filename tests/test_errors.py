"""One exception tree: everything actorwire raises on purpose derives from ActorwireError."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from actorwire import messages as m
from actorwire.actors import ActorSystem, RemoteError, UnexpectedReply
from actorwire.messages import ActorwireError, PeerError, UsageError


def _all_modules() -> list[str]:
    names = []
    for sub in ("messages", "transport", "actors"):
        package = importlib.import_module(f"actorwire.{sub}")
        names += [info.name for info in pkgutil.walk_packages(package.__path__, f"actorwire.{sub}.")
                  if not info.name.endswith(("__main__", "_demo_train"))]
    return names


def test_every_exception_class_we_define_is_an_actorwire_error() -> None:
    strays = []
    for name in _all_modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__.startswith("actorwire") and not issubclass(value, ActorwireError)):
                strays.append(f"{value.__module__}.{value.__qualname__}")
    assert sorted(set(strays)) == []


def test_whose_fault_it_is_can_be_told_apart() -> None:
    assert issubclass(m.DecodeError, PeerError) and issubclass(m.DecodeError, ValueError)
    from actorwire.transport._errors import ConfigError, InvalidArgument, NotAnAsk

    for local in (ConfigError, InvalidArgument, NotAnAsk):
        assert issubclass(local, UsageError) and not issubclass(local, PeerError)


def test_an_unexpected_reply_has_the_code_its_base_promises() -> None:
    error = UnexpectedReply("coordinator", m.SetGlobalStep, m.SyncAck(rank=0, step_count=1))
    assert isinstance(error, RemoteError)
    assert error.code is m.ErrorCode.BAD_MESSAGE
    assert str(error) == "'coordinator' answered `sync_ack`, expected `set_global_step`"


def test_bad_arguments_to_a_system_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="^joining a system needs its run_id$"):
        ActorSystem(join="ipc:///nowhere")
    with ActorSystem() as system:
        with pytest.raises(UsageError, match="^spawn\\(\\) takes an Actor instance, got int$"):
            system.spawn(3, "x")  # type: ignore[arg-type]
        system.inbox("taken")
        with pytest.raises(UsageError, match="^an actor named 'taken' already runs in this process$"):
            system.inbox("taken")



# Builtins a library may raise on purpose: none of them is an error of ours.
_NOT_ERRORS = {"AssertionError", "SystemExit", "KeyboardInterrupt", "NotImplementedError", "StopIteration", "GeneratorExit"}


def test_every_raise_names_an_actorwire_error() -> None:
    """Scans each module's ``raise X(...)``: X must resolve, in that module, to one of our errors."""
    import ast
    import builtins
    import inspect

    strays = []
    for name in _all_modules():
        module = importlib.import_module(name)
        if name.startswith("actorwire.messages._schema"):
            continue  # sample generation for tests of the catalog, not a runtime path
        tree = ast.parse(inspect.getsource(module))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                    and isinstance(node.exc.func, ast.Name)):
                continue
            raised = node.exc.func.id
            value = getattr(module, raised, getattr(builtins, raised, None))
            if raised in _NOT_ERRORS or not isinstance(value, type):
                continue  # a local name (e.g. an exception class bound in an except clause)
            if not issubclass(value, ActorwireError):
                strays.append(f"{name}:{node.lineno} raises {raised}")
    assert strays == [], "\n".join(strays)
