"""Declaring a package's public names: each public object says it lives at its public path."""

from __future__ import annotations

from typing import Any

import msgspec


def publish(namespace: dict[str, Any], names: list[str]) -> None:
    """Set ``__module__`` of the classes and functions in ``names`` to the package that exports them.

    Only objects still named by a private module (``..._name``) are renamed:
    a name re-exported from another public package keeps that home.
    Tracebacks, reprs and docs then show ``actorwire.actors.ActorSystem``,
    not ``actorwire.actors.runtime._system.ActorSystem``.

    ``msgspec.Struct`` classes keep their defining module: msgspec resolves
    their (postponed) annotations in that module's namespace, and a renamed
    struct stops decoding.  Their stable name on the wire is their tag.
    """
    package = namespace["__name__"]
    for name in names:
        obj = namespace[name]
        module = getattr(obj, "__module__", None)
        private = isinstance(module, str) and module.startswith("actorwire.") and \
            any(part.startswith("_") for part in module.split("."))
        struct = isinstance(obj, type) and issubclass(obj, msgspec.Struct)
        if private and not struct and (isinstance(obj, type) or callable(obj)):
            try:
                obj.__module__ = package
            except (AttributeError, TypeError):  # a builtin or a C type: leave it
                pass
