"""The ``actorwire`` command line (also ``python -m actorwire``).

Each subcommand lives in the module that owns its subject; this file only
wires them into argparse.  Exit status: 0 on success, 1 when the command
found a problem (a divergence, a failed check), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import typing
from collections.abc import Sequence

from actorwire import __version__, messages


def _cmd_messages(args: argparse.Namespace) -> int:
    if args.schema:
        print(json.dumps(messages.json_schema(), indent=2))
        return 0
    kinds = messages.describe()
    if args.kind:
        known = [k.kind for k in kinds] + [k.name for k in kinds]
        kinds = [k for k in kinds if k.kind == args.kind or k.name == args.kind]
        if not kinds:
            import difflib

            close = difflib.get_close_matches(args.kind, known, n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else "; `actorwire messages` lists them all"
            print(f"actorwire messages: no message kind named {args.kind!r}{hint}", file=sys.stderr)
            return 2
    family = None
    for info in kinds:
        if info.family != family:
            family = info.family
            print(f"\n[{family}]")
        print(f"  {info.name}  (type: {info.kind!r})  {info.doc}")
        for f in info.fields:
            default = "" if f.required else f" = {f.default}"
            print(f"      {f.name}: {f.type}{default}")
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    import time

    from actorwire.actors.control import _simulate
    from actorwire.transport import configure_logging

    if not args.verbose:
        configure_logging(level="critical")  # thousands of coordinators log their faults
    if args.scale is not None:
        return _simulate_scale(args)
    if args.seed is not None:
        seeds = range(args.seed, args.seed + 1)
    else:
        seeds = range(args.seeds)
    started = time.monotonic()
    outcomes, broken = _simulate.run_seeds(seeds, args.ranks, progress=lambda line: print(line, file=sys.stderr),
                                           restarts=args.restarts, torchrun=args.torchrun, relays=args.relays)
    if args.seed is not None:
        for outcome in outcomes:
            print(outcome.line())
            if outcome.detail:
                print(f"  {outcome.detail}")
    ends: dict[str, int] = {}
    for outcome in outcomes:
        ends[outcome.ended_by] = ends.get(outcome.ended_by, 0) + 1
    for text in broken:
        print(text)
    summary = ", ".join(f"{n} {reason}" for reason, n in sorted(ends.items(), key=lambda kv: -kv[1]))
    print(f"{len(seeds)} seed(s) in {time.monotonic() - started:.1f} s: {len(broken)} broken"
          + (f"; ended by {summary}" if summary else ""))
    return 1 if broken else 0


def _simulate_scale(args: argparse.Namespace) -> int:
    import dataclasses
    import time

    from actorwire.actors.control._simulate import _scale

    costs = _scale.Costs()
    if args.message_us is not None:
        costs = dataclasses.replace(costs, coordinator_message_us=args.message_us)
    if args.entry_us is not None:
        costs = costs.uniform(args.entry_us)
    if args.measure:
        measured = _scale.measure_costs(args.scale)
        print(f"measured here ({args.scale:,} ranks; the default in brackets), us; the run below uses them:")
        for kind, us in measured.items():
            print(f"  {kind:<13} {us:8.3f}  ({getattr(costs, kind):g})")
        costs = dataclasses.replace(costs, **{kind: round(us, 3) for kind, us in measured.items()})
    started = time.monotonic()
    sim = _scale.ScaleSimulation(args.scale, racks=not args.flat, hosts_per_rack=args.hosts_per_rack,
                                 epochs=args.epochs, costs=costs, rack_interval=args.rack_interval)
    outcome = sim.run(progress=lambda line: print(line, file=sys.stderr))
    print(f"costs: coordinator {costs.coordinator_message_us:g} us a message; an entry: batch {costs.batch_us:g}, "
          f"beat {costs.beat_us:g}, ack {costs.ack_us:g}, epoch report {costs.metrics_us:g}, rank of a broadcast "
          f"{costs.broadcast_us:g}, of a plan {costs.each_us:g}, join {costs.join_us:g}, tick a rank {costs.tick_us:g}; "
          f"a relay {costs.relay_message_us:g} + {costs.relay_entry_us:g} us; a hop {costs.hop_us:g} us")
    width = max(len(name) for name, _, _ in outcome.rows())
    for name, value, note in outcome.rows():
        print(f"{name:<{width}}  {value:>18}  {note}")
    print(f"simulated in {time.monotonic() - started:.1f} s")
    return 0 if outcome.epochs == args.epochs and not outcome.lost else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    from actorwire.actors.bench._harness import report

    if args.suite == "codec":
        from actorwire.actors.bench import _codec as _bench_codec

        results = _bench_codec.run(args.kinds.split(",") if args.kinds else None)
    elif args.suite == "tensor":
        # Producer and consumer copy on the same cores here; OpenMP's spinning waits (its default)
        # would take them from each other (docs/tensor-planes.md, "Sharing cores"). Read when torch
        # loads: set before that, for this process and the consumer it starts.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from actorwire.actors.bench import _tensor as _bench_tensor

        results = _bench_tensor.run()
    elif args.suite == "scale":
        from actorwire.actors.bench import _scale as _bench_scale

        results = _bench_scale.run(workers=args.workers, relay=not args.no_relay)
    elif args.suite == "nccl":
        from actorwire.actors.bench import _nccl as _bench_nccl

        results = _bench_nccl.run()
    elif args.suite == "worker":
        from actorwire.actors.bench import _worker as _bench_worker

        results = _bench_worker.run(n=min(args.messages, 200_000))
    elif args.suite == "record":
        from actorwire.actors.bench import _record as _bench_record

        results = _bench_record.run(n=args.messages)
    elif args.suite == "train":
        from actorwire.actors.bench import _train as _bench_train

        try:
            results = _bench_train.run(epochs=args.epochs)
        except _bench_train.TrainBenchError as exc:
            print(f"actorwire bench train: {exc}", file=sys.stderr)
            return 1
    elif args.suite == "bus":
        from actorwire.actors.bench import _bus as _bench_bus

        results = _bench_bus.run(n=args.messages, asks=args.asks)
    else:  # argparse choices keep this unreachable
        raise AssertionError(args.suite)
    report(args.suite, results, args.json)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken or blocked install is as good as none
        found = False
    if not found:
        print("actorwire demo: the demo trains a torch model, and torch is not installed here: "
              "pip install torch (or `make venv`, which installs a CPU build)", file=sys.stderr)
        return 2
    from actorwire.actors.cli._demo import run_demo

    return run_demo(args)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (and exit 2) instead of the usage block."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="actorwire",
        description="Typed, replayable actors on ZeroMQ for GPU training and inference clusters.",
    )
    parser.add_argument("--version", action="version", version=f"actorwire {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    p = sub.add_parser("messages", help="list every message kind with its fields")
    p.add_argument("kind", nargs="?", help="show only this kind (tag or class name)")
    p.add_argument("--schema", action="store_true", help="print the catalog's JSON Schema")
    p.set_defaults(func=_cmd_messages)

    p = sub.add_parser("bench", help="measure actorwire against its baseline in one run")
    p.add_argument("suite", choices=["codec", "bus", "record", "worker", "tensor", "nccl", "scale", "train"],
                   help="which suite to run")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--kinds", metavar="K1,K2", help="codec: only these message kinds")
    p.add_argument("--workers", type=_positive, default=None, metavar="N",
                   help="scale: simulated workers (default: step 1k, 2k, 5k, 10k, 20k while it holds)")
    p.add_argument("--no-relay", action="store_true",
                   help="scale: every rank reports straight to the coordinator (no per-host relay)")
    p.add_argument("--messages", type=_positive, default=200_000, metavar="N",
                   help="bus: messages per throughput case (default 200000)")
    p.add_argument("--asks", type=_positive, default=3000, metavar="N",
                   help="bus: round trips per latency case (default 3000)")
    p.add_argument("--epochs", type=_positive, default=None, metavar="N",
                   help="train: epochs of the digits workload (default 20, as examples/digits.py)")
    p.set_defaults(func=_cmd_bench)

    from actorwire.actors.cli._log import add_parsers
    from actorwire.actors.cli._serve import add_parsers as add_serve_parsers
    from actorwire.actors.cli._status import add_parsers as add_status_parsers

    add_parsers(sub)
    add_serve_parsers(sub)
    add_status_parsers(sub)

    p = sub.add_parser("simulate", help="run the control plane under seeded faults, deterministically")
    p.add_argument("--seeds", type=_positive, default=1000, metavar="N", help="run seeds 0..N-1 (default 1000)")
    p.add_argument("--seed", type=int, metavar="S", help="run one seed and print its outcome (replays a failure)")
    p.add_argument("--ranks", type=_positive, metavar="K", help="ranks per run (default: drawn per seed, 1-6)")
    p.add_argument("--torchrun", action="store_true",
                   help="also stop every rank when one dies and start them all again, as torchrun's agent does "
                        "(the coordinator waits and the ranks resume from the last checkpoint)")
    p.add_argument("--restarts", action="store_true",
                   help="also restart a killed rank as its launcher would (it rejoins the run)")
    p.add_argument("--relays", action="store_true",
                   help="also give every two ranks a host relay (their reports, and what the coordinator tells them, go through it); a relay may be killed")
    p.add_argument("--verbose", action="store_true", help="show the coordinator's log (with --seed)")
    p.add_argument("--scale", type=_positive, metavar="N",
                   help="instead: N light ranks, 8 a host, under one coordinator through a two-level relay tree "
                        "(host relays under rack relays), in virtual time with a cost per message; prints the "
                        "coordinator's messages a second, batch rate, aggregation and sync cycle times")
    p.add_argument("--flat", action="store_true", help="with --scale: no rack relays (host relays report to the "
                                                       "coordinator)")
    p.add_argument("--hosts-per-rack", type=_positive, default=32, metavar="K",
                   help="with --scale: host relays under a rack relay (default 32)")
    p.add_argument("--rack-interval", type=float, default=0.5, metavar="S",
                   help="with --scale: how often a rack relay reports its ranks' batches (default 0.5 s)")
    p.add_argument("--epochs", type=_positive, default=3, metavar="E", help="with --scale: epochs (default 3)")
    p.add_argument("--message-us", type=float, metavar="US",
                   help="with --scale: the coordinator's cost per message (default 7)")
    p.add_argument("--entry-us", type=float, metavar="US",
                   help="with --scale: one cost for every kind of the coordinator's entries (default: "
                        "measured per kind, see --measure)")
    p.add_argument("--measure", action="store_true",
                   help="with --scale: first time the coordinator's handler per entry of each kind on this machine "
                        "(a run of N ranks), then simulate with those costs (not reproducible elsewhere)")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("demo", help="run the end-to-end demo")
    p.add_argument("--workers", type=_positive, default=3, help="worker processes (default 3)")
    p.add_argument("--epochs", type=_positive, default=4, help="epochs (default 4)")
    p.add_argument("--kill-rank", type=int, metavar="R", help="SIGKILL this worker during --at-epoch")
    p.add_argument("--at-epoch", default=None, metavar="E",
                   help="epoch of the kill (default 1, or 0 in a one-epoch run), or 'start': before the worker "
                        "has joined")
    p.add_argument("--min-world-size", type=_positive, metavar="N",
                   help="the fewest workers the run goes on with, at its start and after any loss (default 1)")
    p.add_argument("--summary", metavar="PATH",
                   help="write how the run ended as JSON to PATH (epochs trained, ranks lost and why, exit reason)")
    p.add_argument("--record", metavar="DIR", help="record every actor's messages into DIR")
    p.add_argument("--keep", action="store_true", help="keep the run's checkpoints (in a temp dir, named at the end)")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo",
                   help="all-reduce backend: gloo on the CPU (default), or nccl with one GPU per worker")
    p.set_defaults(func=_cmd_demo)
    _add_examples(parser, sub)
    return parser


#: What ``--help`` ends with, per command: lines a user can paste.
EXAMPLES: dict[str, list[str]] = {
    "": ["actorwire demo", "actorwire demo --kill-rank 1 --at-epoch 2 --record runs/kill",
         "actorwire status", "actorwire replay runs/kill --actor coordinator", "actorwire COMMAND --help"],
    "demo": ["actorwire demo --workers 2 --epochs 2",
             "actorwire demo --kill-rank 1 --at-epoch 2 --summary run.json",
             "actorwire demo --record runs/demo   # then: actorwire log show runs/demo"],
    "coordinator": ["actorwire keygen keys/ && export ACTORWIRE_KEYS=$PWD/keys",
                    "actorwire coordinator --bind tcp://0.0.0.0:29555 --world-size 8 --dataset-size 50000 "
                    "--epochs 10",
                    "actorwire coordinator --bind tcp://0.0.0.0:29555 --dataset-size 1400 --checkpoint-every 1 "
                    "--restart-wait 60   # under torchrun --max-restarts"],
    "keygen": ["actorwire keygen keys/"],
    "status": ["actorwire status", "actorwire status --json", "actorwire status --run 3f9c"],
    "top": ["actorwire top", "actorwire top --run 3f9c"],
    "messages": ["actorwire messages", "actorwire messages sync_now", "actorwire messages --schema"],
    "bench": ["actorwire bench codec", "actorwire bench bus", "actorwire bench train --epochs 5"],
    "simulate": ["actorwire simulate --seeds 1000", "actorwire simulate --seed 118 --verbose",
                 "actorwire simulate --seeds 2000 --restarts", "actorwire simulate --scale 100000"],
    "log": ["actorwire log show runs/demo --kind epoch_metrics", "actorwire log stats runs/demo",
            "actorwire log tail runs/demo/RUN/coordinator",
            "actorwire log export runs/demo --perfetto trace.json"],
    "replay": ["actorwire replay runs/demo --actor coordinator",
               "actorwire replay runs/demo --actor coordinator --until 100 --state"],
}


def _add_examples(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    def epilog(lines: list[str]) -> str:
        return "examples:\n" + "\n".join(f"  {line}" for line in lines)

    parser.epilog = epilog(EXAMPLES[""])
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    for name, command in sub.choices.items():
        if name in EXAMPLES:
            command.epilog = epilog(EXAMPLES[name])
            command.formatter_class = argparse.RawDescriptionHelpFormatter


def _first_interrupt(signum: int, frame: object) -> None:
    """Ctrl-C: raise KeyboardInterrupt once; later ones are ignored, so that the clean-up it starts
    (children ended, shared memory and sockets removed) is never cut short (a second Ctrl-C during it
    left workers SIGSTOPped for good, holding /dev/shm segments)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from actorwire.transport import configure_logging

    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _first_interrupt)
    try:
        configure_logging()  # the command line owns its process; the library never configures logging
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except messages.UsageError as exc:  # a setting or an argument the library refused: one line, not a traceback
        print(f"actorwire {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `actorwire messages | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit does not fail again
        return 0
