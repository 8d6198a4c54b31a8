"""A trainer rank for the weight-transfer tests: ``python _weight_trainer.py OUT_DIR RANK WORLD [options]``.

Attaches to the test's system, holds every other group (rank r holds the
groups g with g % world == r; every rank holds the embedding, so it is
replicated), writes the plan for the test to start consumers with, then runs
syncs, changing the weights before each, and writes one JSON line per sync.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import msgspec
import torch


def tiny_model(layers: int = 4, width: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(32, width)
    model.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
    model.head = torch.nn.Linear(width, 8)
    return model


def main() -> None:
    from actorwire.actors import attach
    from actorwire.actors.weights._plan import (
        ModuleSource,
        WeightSyncError,
        layerwise_groups,
    )
    from actorwire.actors.weights._sender import WeightSender

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("rank", type=int)
    ap.add_argument("world", type=int)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--syncs", type=int, default=2)
    ap.add_argument("--lookahead", type=int, default=1)
    ap.add_argument("--stall", type=float, default=300.0)
    ap.add_argument("--plane", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers-per-replica", type=int, default=0)
    args = ap.parse_args()

    model = tiny_model().to(args.device)
    names = list(model.state_dict())
    groups = layerwise_groups(names)
    held = [n for g, group in enumerate(groups) for n in group if g % args.world == args.rank or g == 0]
    system = attach()
    report_file = (args.out / f"rank{args.rank}.jsonl").open("w")
    try:
        sender = WeightSender(system, ModuleSource(model, held=held), consumer_ids=list(range(args.consumers)),
                              rank=args.rank, world_size=args.world, lookahead=args.lookahead,
                              stall_timeout=args.stall, plane=args.plane, device=args.device,
                              workers_per_replica=args.workers_per_replica)
        if args.rank == 0:
            tmp = args.out / "plan.json.tmp"
            tmp.write_bytes(msgspec.json.encode(sender.plan))
            tmp.rename(args.out / "plan.json")
        for cid in range(args.consumers):
            system.wait_for(f"weights/consumer/{cid}", 60)
        for sync in range(1, args.syncs + 1):
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.5).add_(sync)
            from actorwire.actors.weights._plan import state_digest

            line = {"sync": sync, "expected": state_digest(model.state_dict())}
            try:
                report = sender.send_weights()
            except WeightSyncError as exc:
                line["error"] = str(exc)
                report_file.write(json.dumps(line) + "\n")
                report_file.flush()
                break
            line.update(max_resident=report.max_resident, groups=report.groups,
                        digests={str(k): v for k, v in report.consumer_digests.items()}, done=report.consumers_done)
            report_file.write(json.dumps(line) + "\n")
            report_file.flush()
        sender.close()
    finally:
        report_file.close()
        system.shutdown()


if __name__ == "__main__":
    main()
