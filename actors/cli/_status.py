"""``actorwire status`` and ``actorwire top``: a live view of a running system.

Both join the system as a worker does (the run's endpoint and run id, and its
CURVE keys over tcp), ask every node's introspector for its
:class:`~actorwire.messages.kinds.NodeStatus` and show nodes, actors, ranks, rates
and recent errors.  ``status`` prints once (``--json`` too); ``top`` redraws
until Ctrl-C.  Rates are counts over the time between two samples.

With neither ``--join`` nor ``--run-id``, the runs of this user on this host
are found from the file each root keeps in its private run directory; with
several, ``--run ID`` (a prefix is enough) picks one.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import msgspec

from actorwire.messages import ActorwireError
from actorwire.messages import kinds as m
from actorwire.transport.internal import ConfigError

_INTROSPECTOR = ".introspect/"


# -- finding and joining the run --------------------------------------------------------------


def _choose_run(args: argparse.Namespace) -> tuple[str, str]:
    """(endpoint, run id) to join: from the flags, or from the runs found on this host."""
    if args.join or args.run_id:
        if not (args.join and args.run_id):
            raise ConfigError("--join and --run-id go together (the run id proves you belong to the run)")
        return args.join, args.run_id
    from actorwire.transport.internal import local_runs

    runs = local_runs()
    if args.run:
        runs = [r for r in runs if str(r["run_id"]).startswith(args.run)]
        if not runs:
            raise ConfigError(f"no run of this user on this host has an id starting {args.run!r}")
    if not runs:
        raise ConfigError("no run of this user is running on this host; start one (actorwire demo), or give "
                          "--join ENDPOINT --run-id ID for a run elsewhere")
    if len(runs) > 1:
        listed = "; ".join(_describe(r) for r in runs)
        raise ConfigError(f"{len(runs)} runs are running here: {listed}; pick one with --run ID")
    run = runs[0]
    return str(run["ipc"] or run["endpoint"]), str(run["run_id"])


def _describe(run: dict[str, Any]) -> str:
    """A run found on this host, told apart from the others: id, start time, pid and command."""
    started = run.get("started_ns")
    when = time.strftime("%H:%M:%S", time.localtime(int(started) / 1e9)) if isinstance(started, int) else "?"
    try:
        argv = [a.decode(errors="replace") for a in
                pathlib.Path(f"/proc/{run['pid']}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        argv = []
    if argv and pathlib.Path(argv[0]).name.startswith("python"):
        argv = argv[1:]  # the interpreter says nothing that tells two runs apart
    if argv and argv[0] == "-m" and len(argv) > 1:
        argv = argv[1:]
    if argv:
        argv[0] = pathlib.Path(argv[0]).name
    command = " ".join(argv)
    if len(command) > 50:
        command = command[:47] + "..."
    return f"{run['run_id']} (started {when}, pid {run['pid']}{': ' + command if command else ''})"


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
        except ActorwireError:
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


def _coordinators(statuses: list[m.NodeStatus]) -> list[tuple[str, m.ActorDetail]]:
    """(name, detail) of every coordinator (an actor that reports ranks): usually one."""
    found = []
    for status in statuses:
        for actor in status.actors:
            detail = actor.detail
            if detail is not None and (detail.ranks or actor.cls.endswith("Coordinator")):
                found.append((actor.name, detail))
    return found


def _idle_adapter(actor: m.ActorStatus, rate: float | None) -> bool:
    """An effects adapter (``.../io``) with nothing to do: hidden unless asked (``--all``)."""
    return actor.name.endswith("/io") and not actor.mailbox and not actor.failures and not rate


def render(statuses: list[m.NodeStatus], silent: list[str], before: list[m.NodeStatus] | None,
           client: str, *, show_all: bool = False, run_id: str = "") -> Any:
    """The whole view as one rich renderable, what a trainer asks first first: the coordinator's
    phase and its ranks, then the busy actors, then the nodes in one line (``show_all``: every
    actor, the nodes and the message kinds in tables)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def table(title: str) -> Table:
        return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, expand=False,
                     show_edge=False)

    parts: list[Any] = []
    root = next((s for s in statuses if s.is_root), None)
    uptime = f"up {(root.wall_ns - root.started_ns) / 1e9:.0f} s" if root else "no answer from the root"
    parts.append(Text.assemble(("run ", "bold"), (f"{run_id} " if run_id else ""), uptime,
                               (f"; no answer from {', '.join(silent)}" if silent else "", "red")))

    for name, detail in _coordinators(statuses):
        joined = sum(1 for r in detail.ranks if r.state not in ("dead", "exited"))
        notes = "".join(f", {k} {v}" for k, v in sorted(detail.notes.items()))
        epoch = "not started" if detail.epoch < 0 else str(detail.epoch)
        line = Text.assemble((f"{name}: ", "bold"), ("phase ", ""), (detail.phase or "-", "bold"),
                             f", epoch {epoch}, {joined} rank(s) in{notes}")
        line.no_wrap, line.overflow = True, "ellipsis"
        parts.append(line)
        ranks = table("ranks")
        for column in ("rank", "state", "epoch", "steps", "ms/batch", "last report"):
            ranks.add_column(column, justify="left" if column == "state" else "right", no_wrap=True)
        for rank in detail.ranks:
            pace = rank.ms_per_batch
            ranks.add_row(str(rank.rank), _state(rank.state), "-" if rank.epoch < 0 else str(rank.epoch),
                          str(rank.steps), "-" if pace is None else f"{pace:.1f}", f"{rank.silent_s:.1f} s ago")
        if detail.ranks:
            parts.append(ranks)
        else:
            parts.append(Text("  no rank has joined yet", style="yellow"))

    rates = _rates(statuses, before)
    actors = table("actors" if show_all else "actors (idle adapters hidden: --all shows them)")
    columns = [("actor", "left"), ("mailbox", "right"), ("msg/s", "right"), ("handled", "right"),
               ("failed", "right")]
    if show_all:
        columns = [("node", "left"), *columns, ("class", "left"), ("most handled", "left")]
    for column, justify in columns:
        actors.add_column(column, justify=justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
    for status in statuses:
        for actor in status.actors:
            rate = rates.get((status.node_id, actor.name))
            if not show_all and _idle_adapter(actor, rate):
                continue
            row = [actor.name, _warn(actor.mailbox, 1000), "-" if rate is None else f"{rate:,.0f}",
                   str(actor.handled), _warn(actor.failures, 1)]
            if show_all:
                top = ", ".join(f"{k} {n}" for k, n in sorted(actor.by_kind.items(), key=lambda kv: -kv[1])[:3])
                row = [status.node_id, *row, actor.cls, top]
            actors.add_row(*row)
    parts.append(actors)

    liveness = {member.node_id: member.liveness for member in (root.members if root else [])}
    members = [mb for mb in (root.members if root else []) if mb.node_id != client]
    if show_all:
        nodes = table("nodes")
        for column in ("node", "host", "pid", "liveness", "actors", "asks", "unacked", "refused", "gaps"):
            numeric = column in ("pid", "actors", "asks", "unacked", "refused", "gaps")
            nodes.add_column(column, justify="right" if numeric else "left", no_wrap=True)
        answering = {s.node_id for s in statuses}
        for status in statuses:
            state = "root" if status.is_root else liveness.get(status.node_id, "?")
            nodes.add_row(status.node_id, status.host, str(status.pid), _state(state), str(len(status.actors)),
                          str(status.pending_asks), str(status.unacked), str(status.refused), str(status.gaps))
        for member in members:  # members the root knows that did not answer
            if member.node_id not in answering:
                nodes.add_row(member.node_id, member.host, str(member.pid), _state(member.liveness),
                              str(len(member.actors)), "-", "-", "-", "-")
        parts.append(nodes)
        kinds = _kind_rates(statuses, before)
        if kinds:
            by_kind = table("handled per second, by kind")
            by_kind.add_column("kind", no_wrap=True)
            by_kind.add_column("msg/s", justify="right", no_wrap=True)
            for kind, rate in sorted(kinds.items(), key=lambda kv: -kv[1])[:12]:
                by_kind.add_row(kind, f"{rate:,.1f}")
            parts.append(by_kind)
    else:
        up = sum(1 for mb in members if mb.liveness == "up")
        trouble = [f"{mb.node_id} {mb.liveness}" for mb in members if mb.liveness != "up"]
        parts.append(Text.assemble(("nodes: ", "bold"), f"root and {up} member(s) up",
                                   (f"; {', '.join(trouble)}" if trouble else "", "red")))

    if show_all:  # what the other actors say of themselves (a weight consumer's syncs, say)
        coordinators = {name for name, _ in _coordinators(statuses)}
        for status in statuses:
            for actor in status.actors:
                detail = actor.detail
                if detail is None or actor.name in coordinators or not (detail.phase or detail.notes):
                    continue
                notes = "".join(f", {k} {v}" for k, v in sorted(detail.notes.items()))
                parts.append(Text(f"{actor.name}: {detail.phase or '-'}{notes}", no_wrap=True, overflow="ellipsis"))

    errors = sorted({e for s in statuses for e in s.errors})[-(10 if show_all else 3):]
    if errors:
        parts.append(Text("recent errors", style="bold red"))
        for error in errors:
            parts.append(Text("  " + error, no_wrap=True, overflow="ellipsis"))
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


def _console() -> Any:
    """A terminal's console; piped or redirected, one wide enough that no cell wraps (it folded
    ``coordinator/io`` at 80 columns)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, 200))


def _cmd_status(args: argparse.Namespace) -> int:
    with _attach(args) as system:
        before, _ = sample(system, args.timeout)
        time.sleep(args.window)
        statuses, silent = sample(system, args.timeout)
        client = system.node_id
        run_id = system.run_id
    if args.json:
        print(json.dumps({"nodes": [_plain(s) for s in statuses], "silent": silent,
                          "rates": {f"{n}/{a}": round(r, 1) for (n, a), r in _rates(statuses, before).items()}},
                         indent=2))
        return 0
    _console().print(render(statuses, silent, before, client, show_all=args.all, run_id=run_id))
    return 1 if silent else 0


class _Keys:
    """Single keys from a terminal's stdin (cbreak mode, restored on exit); nothing elsewhere."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        self.saved: Any = None

    def __enter__(self) -> _Keys:
        if self.fd is not None:
            import termios
            import tty

            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None and self.saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def wait(self, seconds: float) -> str:
        """The key pressed within ``seconds`` ("" if none: then it slept them)."""
        if self.fd is None:
            time.sleep(seconds)
            return ""
        import os
        import select

        ready, _, _ = select.select([self.fd], [], [], seconds)
        return os.read(self.fd, 1).decode(errors="replace") if ready else ""


def _cmd_top(args: argparse.Namespace) -> int:
    from rich.live import Live

    console = _console()
    with _attach(args) as system:
        run_id = system.run_id
        before, _ = sample(system, args.timeout)
        redraws = 0
        ended = False
        try:
            with _Keys() as keys, Live(render(before, [], None, system.node_id, show_all=args.all, run_id=run_id),
                                       console=console, refresh_per_second=4, screen=console.is_terminal,
                                       vertical_overflow="crop") as live:
                while True:
                    if keys.wait(args.interval).lower() == "q":
                        return 0
                    if system._node.root_gone.is_set():
                        ended = True
                        break
                    statuses, silent = sample(system, args.timeout)
                    if system._node.root_gone.is_set() or not any(s.is_root for s in statuses):
                        ended = True
                        break
                    view = render(statuses, silent, before, system.node_id, show_all=args.all, run_id=run_id)
                    live.update(view)
                    before = statuses
                    redraws += 1
                    if args.count is not None and redraws >= args.count:
                        return 0
        except KeyboardInterrupt:
            return 0  # Ctrl-C ends top too
    if ended:
        print(f"run {run_id} ended")
    return 0


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
            p.add_argument("--all", action="store_true", help="every actor (idle adapters too), the nodes and the "
                                                              "message kinds in tables")
            p.set_defaults(func=_cmd_status)
        else:
            p.add_argument("--interval", type=seconds, default=1.0, metavar="S", help="redraw every S (default 1)")
            p.add_argument("--count", type=positive, metavar="N", help="stop after N redraws")
            p.add_argument("--all", action="store_true", help="every actor (idle adapters too), the nodes and the "
                                                              "message kinds in tables")
            p.set_defaults(func=_cmd_top)
