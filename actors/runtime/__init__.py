"""The actor runtime: actors, contexts, systems, processes, timers, recording and replay.

Internal: the public names are exported by :mod:`actorwire.actors`.
"""
