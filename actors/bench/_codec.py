"""``actorwire bench codec``: encode and decode+validate rates per message kind.

Reference: msgpack-python unpacking into a dict and building a dataclass from
it, the way a hand-rolled typed wire usually does it (measured for Batch when
msgpack-python is installed).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from actorwire import messages
from actorwire.actors.bench._harness import Result, rate


@dataclasses.dataclass
class _BatchDC:
    type: str
    rank: int
    batch_ms: float
    step_count: int
    batch_loss: float
    data_ms: float = 0.0
    param_norm: float | None = None
    sync_divergence: float | None = None


def _baseline_batch(data: bytes) -> tuple[float | None, float | None]:
    try:
        import msgpack
    except ImportError:
        return None, None
    obj = msgpack.unpackb(data)

    def decode(n: int) -> None:
        unpackb = msgpack.unpackb
        for _ in range(n):
            _BatchDC(**unpackb(data))

    value = _BatchDC(**obj)

    def encode(n: int) -> None:
        packb = msgpack.packb
        for _ in range(n):
            packb(value.__dict__)

    return rate(encode), rate(decode)


def run(kinds: list[str] | None = None, progress=sys.stderr) -> list[Result]:
    codec = messages.Codec()
    selected = [
        cls
        for cls in messages.MESSAGE_TYPES
        if not kinds or cls.__name__ in kinds or cls.wire_tag() in kinds
    ]
    if kinds and not selected:
        raise SystemExit(f"no message kind matches {', '.join(kinds)}")
    show = progress.isatty()
    results = []
    for i, cls in enumerate(selected, 1):
        if show:
            print(f"\r[{i}/{len(selected)}] {cls.__name__:<24}", end="", file=progress, flush=True)
        msg = messages.example(cls)
        data = codec.encode_message(msg)
        enc, dec = codec.encode_message, codec.decode_message

        def encode(n: int, enc: Any = enc, msg: Any = msg) -> None:
            for _ in range(n):
                enc(msg)

        def decode(n: int, dec: Any = dec, data: Any = data) -> None:
            for _ in range(n):
                dec(data)

        base_enc = base_dec = None
        note_dec = ""
        if cls is messages.Batch:
            base_enc, base_dec = _baseline_batch(data)
            note_dec = ">= 1.5M/s"
        results.append(Result.against(f"codec.encode.{cls.__name__}", rate(encode), "msg/s", base_enc))
        results.append(
            Result.against(f"codec.decode.{cls.__name__}", rate(decode), "msg/s", base_dec, note_dec)
        )
    if show:
        print(file=progress)
    return results
