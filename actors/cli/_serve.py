"""``actorwire coordinator`` and ``actorwire keygen``: run the control plane across hosts.

``actorwire coordinator --bind tcp://HOST:PORT --world-size N ...`` starts the
root of a run on this host with a coordinator actor, prints how workers join,
prints each epoch's aggregated metrics, and exits when the run ends with one
line saying how (``Coordinator.outcome()``): 0 when every epoch was trained,
whether or not ranks were lost and recovered from; 1 when the run could not
finish (a save, a stall, too few ranks, SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import uuid

from actorwire.messages import kinds as m
from actorwire.transport.internal import settings


def cmd_keygen(args: argparse.Namespace) -> int:
    from actorwire.transport.internal import keygen

    try:
        public, secret = keygen(args.dir, args.name)
    except (FileExistsError, ValueError) as exc:
        print(f"actorwire keygen: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {public} (public: copy it to every host; every .key there is allowed to connect)")
    print(f"wrote {secret} (secret, mode 0600: keep it on hosts that run as {args.name!r})")
    print(f"use it with: ACTORWIRE_KEYS={args.dir} ACTORWIRE_KEY_NAME={args.name}")
    return 0


def cmd_coordinator(args: argparse.Namespace) -> int:
    from actorwire.actors.cli._summary import summary_path_problem, write_summary
    from actorwire.actors.control._coordinator import Coordinator
    from actorwire.actors.runtime._launch import launch_env, settle_heap
    from actorwire.actors.runtime._system import ActorSystem
    from actorwire.transport.internal import is_tcp

    if not is_tcp(args.bind):
        print(f"actorwire coordinator: --bind must be tcp://HOST:PORT, got {args.bind!r}", file=sys.stderr)
        return 2
    problem = summary_path_problem(args.summary)
    if problem is not None:
        print(f"actorwire coordinator: {problem}", file=sys.stderr)
        return 2
    found = launch_env()
    run_id = (args.run_id or found.run_id or os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID")
              or uuid.uuid4().hex[:12])
    world = args.world_size or found.world_size
    if not world:
        print("actorwire coordinator: --world-size is required (or WORLD_SIZE / SLURM_NTASKS)", file=sys.stderr)
        return 2
    try:
        system = ActorSystem(run_id=run_id, bind=args.bind)
    except Exception as exc:  # a security or bind error, with its reason
        print(f"actorwire coordinator: {exc}", file=sys.stderr)
        return 2
    done = threading.Event()
    with system:
        inbox = system.inbox("main")
        coordinator = Coordinator(world_size=world, run_id=run_id, num_epochs=args.epochs,
                                 dataset_size=args.dataset_size, batch_size=args.batch_size,
                                 backend=args.backend, sync_every=args.sync_every, metrics_sink="main",
                                 join_timeout=args.join_timeout, staleness_timeout=args.staleness_timeout,
                                 save_stem=args.save_stem or "", form_group=True,
                                 min_world_size=args.min_world_size or 1,
                                 checkpoint_every=args.checkpoint_every, restart_wait=args.restart_wait,
                                 # Eval only when asked for: a worker without an eval function
                                 # answered every request with a failure (30 warnings a run).
                                 eval_every=args.eval_every, final_eval=args.eval_every > 0)
        system.spawn(coordinator, "coordinator")
        inbox.watch("coordinator")
        join = reachable(system.endpoint)
        print(f"run {run_id}: coordinator listening on {system.endpoint}, waiting for {world} workers")
        print(f"workers join with ACTORWIRE_JOIN={join} ACTORWIRE_RUN_ID={run_id}"
              + (f" ACTORWIRE_KEYS={settings().keys}" if settings().keys else ""),
              flush=True)
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        joined = 0
        settled = False
        while not done.is_set():
            got = inbox.get(timeout=0.5)
            if got is None:
                continue
            msg = got.message
            if isinstance(msg, m.StartEpoch) and not settled:
                settled = True  # the ranks joined: their table stays for the run (settle_heap says why)
                settle_heap()
            if isinstance(msg, m.JoinAccepted):
                joined += 1
                print(f"rank {msg.rank} joined ({joined}/{msg.world_size})", flush=True)
            elif isinstance(msg, m.ShutdownWithSave):
                print(f"the run cannot go on ({msg.reason.value}): {msg.detail}", flush=True)
            elif isinstance(msg, m.EpochMetrics):
                # The scalars the workers recorded, by name (a fixed 'mse' column said 'mse nan' for
                # every script that records none).
                scalars = "".join(f" {name} {value:.4f}" for name, value in sorted(msg.scalars.items()))
                print(f"epoch {msg.epoch}: loss {msg.avg_loss:.4f}{scalars} {msg.epoch_ms:.0f} ms "
                      f"samples {msg.per_rank_samples}", flush=True)
            elif isinstance(msg, m.EvalBroadcast):  # asked at the start of epoch E: it sees 0..E-1
                print(f"eval after epoch {msg.epoch - 1}: {msg.metric:.4f}", flush=True)
            elif isinstance(msg, m.RankLost):
                when = f"in epoch {msg.epoch}" if msg.epoch >= 0 else "before the run started"
                print(f"rank {msg.rank} lost {when} ({msg.reason}); {msg.world_size} rank(s) go on", flush=True)
            elif isinstance(msg, m.GroupFormed):
                print(f"the group formed again: ranks {msg.ranks}, world size {msg.world_size}, "
                      f"{msg.seconds:.2f} s after the loss", flush=True)
            elif isinstance(msg, m.Down) and msg.name == "coordinator":
                break
    if done.is_set():
        print("run stopped by SIGTERM")
        if args.summary:
            write_summary(args.summary, coordinator.outcome().summary())
        return 1
    outcome = coordinator.outcome()
    print(outcome.line, flush=True)
    if args.summary:
        write_summary(args.summary, outcome.summary())
    return outcome.exit_code


def reachable(endpoint: str) -> str:
    """The address to give workers: a wildcard bind (``tcp://0.0.0.0:PORT``, ``tcp://*:PORT``) is
    listening everywhere, not an address; this host's name is one the others can use."""
    import socket

    host, sep, port = endpoint.removeprefix("tcp://").rpartition(":")
    if sep and host in ("0.0.0.0", "*", "[::]", "::"):
        return f"tcp://{socket.getfqdn() or socket.gethostname()}:{port}"
    return endpoint


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from actorwire.actors.cli._main import _non_negative, _positive, _seconds

    p = sub.add_parser("keygen", help="write a CURVE key pair for tcp (DIR/NAME.key and DIR/NAME.key_secret)")
    p.add_argument("dir", help="the keys directory (created 0700)")
    p.add_argument("--name", default="node", help="key name (default node; ACTORWIRE_KEY_NAME picks it)")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("coordinator", help="run a coordinator that workers on other hosts join over tcp")
    p.add_argument("--bind", required=True, metavar="tcp://HOST:PORT", help="where workers connect")
    p.add_argument("--world-size", type=_positive, help="number of workers (default: WORLD_SIZE or SLURM_NTASKS)")
    p.add_argument("--run-id", help="run id (default: TORCHELASTIC_RUN_ID or SLURM_JOB_ID, else random)")
    p.add_argument("--epochs", type=_positive, default=1)
    p.add_argument("--dataset-size", type=_positive, required=True, help="samples per epoch, split among workers")
    p.add_argument("--batch-size", type=_positive, default=32)
    p.add_argument("--sync-every", type=_positive, default=8, help="batches between all-reduces")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    p.add_argument("--join-timeout", type=_seconds, default=120.0, help="seconds to wait for every worker")
    p.add_argument("--staleness-timeout", type=_seconds, default=30.0, help="a silent worker is dead after this")
    p.add_argument("--save-stem", help="where ShutdownWithSave writes <stem>.meta.json")
    p.add_argument("--eval-every", type=_non_negative, default=0, metavar="N",
                   help="ask the fastest rank for an eval every N epochs, and a final one (default 0: never; "
                        "the workers need an eval function)")
    p.add_argument("--min-world-size", type=_positive, metavar="N",
                   help="the fewest workers the run goes on with, at its start and at any time (default 1)")
    p.add_argument("--summary", metavar="PATH",
                   help="write how the run ended as JSON to PATH (epochs trained, ranks lost and why, exit reason)")
    p.add_argument("--checkpoint-every", type=_non_negative, default=0, metavar="N",
                   help="ask one worker to save a checkpoint every N epochs (default 0: never; the workers need "
                        "a checkpoint function)")
    p.add_argument("--restart-wait", type=_seconds, default=0.0, metavar="SECONDS",
                   help="once every worker is lost, wait this long for the launcher to start them again "
                        "(torchrun --max-restarts): they resume from the last checkpoint (default 0: the run ends)")
    p.set_defaults(func=cmd_coordinator)
