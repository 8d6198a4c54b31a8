"""``actorwire status`` and ``actorwire top``: a live view of a running system.

Both join the system as a worker does (the run's endpoint and run id, and its
CURVE keys over tcp), ask every node's introspector for its
:class:`~actorwire.messages.NodeStatus` and show nodes, actors, ranks, rates
and recent errors.  ``status`` prints once (``--json`` too); ``top`` redraws
until Ctrl-C.  Rates are counts over the time between two samples.

With neither ``--join`` nor ``--run-id``, the runs of this user on this host
are found from the file each root keeps in its private run directory; with
several, ``--run ID`` (a prefix is enough) picks one.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import msgspec

from actorwire import messages as m
from actorwire.transport._errors import ConfigError

_INTROSPECTOR = ".introspect/"


# -- finding and joining the run --------------------------------------------------------------


def _choose_run(args: argparse.Namespace) -> tuple[str, str]:
    """(endpoint, run id) to join: from the flags, or from the runs found on this host."""
    if args.join or args.run_id:
        if not (args.join and args.run_id):
            raise ConfigError("--join and --run-id go together (the run id proves you belong to the run)")
        return args.join, args.run_id
    from actorwire.transport._endpoints import local_runs

    runs = local_runs()
    if args.run:
        runs = [r for r in runs if str(r["run_id"]).startswith(args.run)]
        if not runs:
            raise ConfigError(f"no run of this user on this host has an id starting {args.run!r}")
    if not runs:
        raise ConfigError("no run of this user is running on this host; start one (actorwire demo), or give "
                          "--join ENDPOINT --run-id ID for a run elsewhere")
    if len(runs) > 1:
        listed = ", ".join(f"{r['run_id']} (pid {r['pid']})" for r in runs)
        raise ConfigError(f"{len(runs)} runs are running here: {listed}; pick one with --run ID")
    run = runs[0]
    return str(run["ipc"] or run["endpoint"]), str(run["run_id"])


def _attach(args: argparse.Namespace) -> Any:
    from actorwire.actors.runtime._system import ActorSystem

    endpoint, run_id = _choose_run(args)
    return ActorSystem(join=endpoint, run_id=run_id, introspect=False, join_timeout=args.timeout)


def sample(system: Any, timeout: float) -> tuple[list[m.NodeStatus], list[str]]:
    """Every node's status (asked in turn), and the nodes that did not answer within ``timeout``."""
    statuses, silent = [], []
    for name in system._node.names(runtime=True):
        if not name.startswith(_INTROSPECTOR):
            continue
        try:
            statuses.append(system.ask(name, m.StatusRequest(), timeout=timeout, expect=m.NodeStatus))
        except m.ActorwireError:
            silent.append(name[len(_INTROSPECTOR):])
    statuses.sort(key=lambda s: (not s.is_root, s.node_id))
    return statuses, silent


# -- the view ----------------------------------------------------------------------------------


def _rates(now: list[m.NodeStatus], before: list[m.NodeStatus] | None) -> dict[tuple[str, str], float]:
    """Messages handled per second by each (node, actor) between two samples."""
    if not before:
        return {}
    earlier = {(s.node_id, a.name): (s.wall_ns, a.handled) for s in before for a in s.actors}
    rates = {}
    for status in now:
        for actor in status.actors:
            then = earlier.get((status.node_id, actor.name))
            if then is not None and status.wall_ns > then[0]:
                rates[(status.node_id, actor.name)] = (actor.handled - then[1]) / ((status.wall_ns - then[0]) / 1e9)
    return rates


def _kind_rates(now: list[m.NodeStatus], before: list[m.NodeStatus] | None) -> dict[str, float]:
    """Messages handled per second per kind, the whole system together."""
    if not before:
        return {}
    span = max((s.wall_ns for s in now), default=0) - max((s.wall_ns for s in before), default=0)
    if span <= 0:
        return {}
    totals: dict[str, int] = {}
    for sign, statuses in ((1, now), (-1, before)):
        for status in statuses:
            for actor in status.actors:
                for kind, n in actor.by_kind.items():
                    totals[kind] = totals.get(kind, 0) + sign * n
    return {kind: n / (span / 1e9) for kind, n in totals.items() if n > 0}


def render(statuses: list[m.NodeStatus], silent: list[str], before: list[m.NodeStatus] | None,
           client: str) -> Any:
    """The whole view as one rich renderable."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    root = next((s for s in statuses if s.is_root), None)
    uptime = f"{(root.wall_ns - root.started_ns) / 1e9:.0f} s" if root else "?"
    parts.append(Text.assemble(("run ", "bold"), f"{len(statuses)} node(s) answering, up {uptime}",
                               (f"; no answer from {', '.join(silent)}" if silent else "", "red")))
    nodes = Table(title="nodes", title_justify="left", expand=False)
    for column in ("node", "host", "pid", "liveness", "actors", "asks", "unacked", "refused", "gaps"):
        numeric = column in ("pid", "actors", "asks", "unacked", "refused", "gaps")
        nodes.add_column(column, justify="right" if numeric else "left", overflow="fold")
    liveness = {member.node_id: member.liveness for member in (root.members if root else [])}
    answering = {s.node_id for s in statuses}
    for status in statuses:
        state = "root" if status.is_root else liveness.get(status.node_id, "?")
        nodes.add_row(status.node_id, status.host, str(status.pid), _state(state), str(len(status.actors)),
                      str(status.pending_asks), str(status.unacked), str(status.refused), str(status.gaps))
    for member in (root.members if root else []):  # members the root knows that did not answer
        if member.node_id not in answering and member.node_id != client:
            nodes.add_row(member.node_id, member.host, str(member.pid), _state(member.liveness),
                          str(len(member.actors)), "-", "-", "-", "-")
    parts.append(nodes)

    rates = _rates(statuses, before)
    actors = Table(title="actors", title_justify="left")
    for column, justify in (("node", "left"), ("actor", "left"), ("class", "left"), ("mailbox", "right"),
                            ("handled", "right"), ("msg/s", "right"), ("failed", "right"), ("most handled", "left")):
        actors.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for status in statuses:
        for actor in status.actors:
            rate = rates.get((status.node_id, actor.name))
            top = ", ".join(f"{k} {n}" for k, n in sorted(actor.by_kind.items(), key=lambda kv: -kv[1])[:3])
            actors.add_row(status.node_id, actor.name, actor.cls, _warn(actor.mailbox, 1000), str(actor.handled),
                           "-" if rate is None else f"{rate:,.0f}", _warn(actor.failures, 1), top)
    parts.append(actors)

    kinds = _kind_rates(statuses, before)
    if kinds:
        table = Table(title="handled per second, by kind", title_justify="left")
        table.add_column("kind", overflow="fold")
        table.add_column("msg/s", justify="right", overflow="fold")
        for kind, rate in sorted(kinds.items(), key=lambda kv: -kv[1])[:12]:
            table.add_row(kind, f"{rate:,.1f}")
        parts.append(table)

    for status in statuses:
        for actor in status.actors:
            detail = actor.detail
            if detail is None or not (detail.phase or detail.ranks or detail.notes):
                continue
            line = f"{actor.name}: phase {detail.phase or '-'}, epoch {detail.epoch}" + "".join(
                f", {k} {v}" for k, v in sorted(detail.notes.items()))
            parts.append(Text(line, style="bold"))
            if detail.ranks:
                ranks = Table(title=f"ranks of {actor.name}", title_justify="left")
                for column in ("rank", "state", "epoch", "steps", "ms/batch", "batches/s", "last report"):
                    ranks.add_column(column, justify="left" if column == "state" else "right", overflow="fold")
                for rank in detail.ranks:
                    pace = rank.ms_per_batch
                    ranks.add_row(str(rank.rank), _state(rank.state), str(rank.epoch), str(rank.steps),
                                  "-" if pace is None else f"{pace:.1f}",
                                  "-" if not pace else f"{1000 / pace:.1f}", f"{rank.silent_s:.1f} s ago")
                parts.append(ranks)

    errors = sorted({e for s in statuses for e in s.errors})[-10:]
    if errors:
        parts.append(Text("recent errors", style="bold red"))
        for error in errors:
            parts.append(Text("  " + error))
    return Group(*parts)


def _plain(value: Any) -> Any:
    """A status record as JSON-ready data, every field present (the wire form leaves defaults out)."""
    if isinstance(value, msgspec.Struct):
        return {field: _plain(getattr(value, field)) for field in value.__struct_fields__}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _state(state: str) -> Any:
    from rich.text import Text

    good = state in ("up", "root", "training")
    bad = state.startswith(("down", "dead")) or state == "?"
    return Text(state, style="green" if good else "red" if bad else "yellow")


def _warn(value: int, at: int) -> Any:
    from rich.text import Text

    return Text(str(value), style="yellow" if value >= at else "")


# -- the commands --------------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    with _attach(args) as system:
        before, _ = sample(system, args.timeout)
        time.sleep(args.window)
        statuses, silent = sample(system, args.timeout)
        client = system.node_id
    if args.json:
        print(json.dumps({"nodes": [_plain(s) for s in statuses], "silent": silent,
                          "rates": {f"{n}/{a}": round(r, 1) for (n, a), r in _rates(statuses, before).items()}},
                         indent=2))
        return 0
    Console().print(render(statuses, silent, before, client))
    return 1 if silent else 0


def _cmd_top(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    with _attach(args) as system:
        before, _ = sample(system, args.timeout)
        redraws = 0
        try:
            with Live(render(before, [], None, system.node_id), console=console, refresh_per_second=4,
                      screen=console.is_terminal) as live:
                while True:
                    time.sleep(args.interval)
                    statuses, silent = sample(system, args.timeout)
                    live.update(render(statuses, silent, before, system.node_id))
                    before = statuses
                    redraws += 1
                    if args.count is not None and redraws >= args.count:
                        return 0
        except KeyboardInterrupt:
            return 0  # Ctrl-C is how top ends


def add_parsers(sub: Any) -> None:
    from actorwire.actors.cli._main import _positive as positive
    from actorwire.actors.cli._main import _seconds as seconds

    for name, text in (("status", "show a running system once: nodes, actors, ranks, rates, errors"),
                       ("top", "show a running system, redrawn until Ctrl-C")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--run", metavar="ID", help="which of this host's runs (a prefix of its run id)")
        p.add_argument("--join", metavar="ENDPOINT", help="the root's endpoint of a run elsewhere (with --run-id; "
                                                          "over tcp, ACTORWIRE_KEYS holds the keys)")
        p.add_argument("--run-id", metavar="ID", help="that run's id")
        p.add_argument("--timeout", type=seconds, default=5.0, metavar="S",
                       help="how long to wait for the run and for each node's answer (default 5)")
        if name == "status":
            p.add_argument("--window", type=seconds, default=1.0, metavar="S",
                           help="rates are counted over this long (default 1)")
            p.add_argument("--json", action="store_true", help="print the nodes' records as JSON")
            p.set_defaults(func=_cmd_status)
        else:
            p.add_argument("--interval", type=seconds, default=1.0, metavar="S", help="redraw every S (default 1)")
            p.add_argument("--count", type=positive, metavar="N", help="stop after N redraws")
            p.set_defaults(func=_cmd_top)
