"""``actorwire demo``: the smallest real example, until the control-plane demo exists."""

from __future__ import annotations

import argparse

from actorwire import messages


def run_demo(args: argparse.Namespace) -> int:
    envelope = messages.Envelope(sender="worker/0", target="coordinator", seq=1)
    batch = messages.Batch(rank=0, batch_ms=12.5, step_count=1, batch_loss=0.71)
    frames = messages.encode(envelope, batch)
    print(f"encoded {batch!r} as frames of {[len(f) for f in frames]} bytes")
    print(f"decoded back: {messages.decode(frames)[1]!r}")
    bad = frames[1].replace(b"\xa4rank\x00", b"\xa4rank\xa3one")
    try:
        messages.decode_message(bad)
    except messages.DecodeError as exc:
        print(f"a corrupted frame is refused: {exc}")
    return 0
