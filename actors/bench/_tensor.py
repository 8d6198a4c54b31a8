"""``actorwire bench tensor``: moving tensors between two processes on the planes.

* ``tensor.shm.{64MiB,1GiB}``: export into a shared-memory slot (one copy)
  and copy out in the consumer process (the second copy), against one
  in-process ``memcpy`` of the same bytes.  Target: at least 0.5 of memcpy.
* ``tensor.cuda_ipc.{64MiB,1GiB}`` (where CUDA exists): export by IPC handle,
  open and copy device-to-device in the consumer, against a device copy in
  the exporter; both timed with CUDA events over 10 back-to-back copies.  Target: at least 0.9 at 1 GiB.  ``tensor.cuda_ipc.export``
  and ``.open``: median handle export and open times.
* ``tensor.shm_ring.{64MiB,1GiB}``: the same bytes as a model of 8 layers synced
  the way weight transfer syncs on shm: each layer packed into a two-slot serve
  ring and copied out by the consumer, the producer packing the next layer
  while the consumer copies this one.
* ``tensor.shm_view.{64MiB,1GiB}``: export into a slot and open a view in the
  consumer, no copy out: what a consumer that uses the weights in place pays
  (docs/tensor-planes.md says when that is safe).
* ``tensor.cuda_ipc_torch.*``: the CUDA IPC rows through torch's private
  sharing, which the public API (cuda-python) replaced, in the same run.
* ``tensor.frames_tcp.64MiB`` and ``tensor.frames_curve.64MiB``: the frames plane over tcp on
  loopback, plain and with CURVE (as between hosts).
* ``tensor.frames.{64MiB,1GiB}``: the same over the frames plane (a socket,
  zero-copy above 64 KiB), for peers without shared memory; no target.
* ``tensor.publish_group64``: what a trainer rank's publish of a 64-tensor
  group costs (local refs, as the weight sender does it, and encoding the
  ``PublishGroup``).  Target: under 1 ms.  ``.shm_copy``: the same with the
  group copied into a shared-memory slot.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

import msgspec

from actorwire.actors.bench._harness import Result
from actorwire.messages import Codec
from actorwire.messages import kinds as m

SIZES = {"64MiB": 64 << 20, "1GiB": 1 << 30}


def _consumer() -> None:
    """Child: for each line (hex msgpack of a name->TensorRef map) open, copy out, answer."""
    import torch

    from actorwire.transport.internal import CudaIpcImporter, FramesImporter, ShmImporter

    decoder = msgspec.msgpack.Decoder(dict[str, m.TensorRef])
    dst: dict[tuple[Any, ...], Any] = {}
    cuda, shm, frames = CudaIpcImporter(), ShmImporter(), FramesImporter()
    for line in sys.stdin:
        mode, _, hexed = line.strip().rpartition(" ")
        refs = decoder.decode(bytes.fromhex(hexed))
        t0 = time.perf_counter()
        opened = copied = 0.0
        for name, ref in refs.items():
            importer: Any = {m.Plane.CUDA_IPC: cuda, m.Plane.FRAMES: frames}.get(ref.plane, shm)
            o0 = time.perf_counter()
            src = importer.open(ref)
            opened += time.perf_counter() - o0
            if mode == "view":  # used in place: nothing is copied out
                del src
                continue
            key = (name, ref.dtype, tuple(ref.shape), src.device.type)  # a pull's tensors land apart
            if key not in dst:
                dst[key] = torch.empty_like(src)
            if src.is_cuda:
                copied += _gpu_copy_seconds(dst[key], src)
            else:
                c0 = time.perf_counter()
                dst[key].copy_(src)
                copied += time.perf_counter() - c0
            del src  # bases and mappings stay cached, as within one sync
        print(f"{time.perf_counter() - t0:.9f} {opened:.9f} {copied:.9f}", flush=True)


#: Device copies timed back to back between two CUDA events: host-side launch and
#: synchronisation costs (tens of microseconds) would otherwise dominate 64 MiB copies.
GPU_REPS = 10


def _gpu_copy_seconds(dst: Any, src: Any) -> float:
    """Seconds per device copy ``dst <- src``, the mean of ``GPU_REPS`` timed with CUDA events."""
    import torch

    dst.copy_(src)  # warm
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(GPU_REPS):
        dst.copy_(src)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000 / GPU_REPS


class _Child:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        import os

        self.proc = subprocess.Popen([sys.executable, "-m", "actorwire.actors.bench._tensor", "consumer"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})

    def send(self, refs: dict[str, m.TensorRef], mode: str = "copy") -> tuple[float, float, float]:
        """Consumer-side seconds: in total, opening, and copying out (``mode="view"``: no copy)."""
        self.post(refs, mode)
        return self.result()

    def post(self, refs: dict[str, m.TensorRef], mode: str = "copy") -> None:
        """Hand the consumer ``refs`` without waiting: it works on them while this process goes on."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{mode} {msgspec.msgpack.encode(refs).hex()}\n")
        self.proc.stdin.flush()

    def result(self) -> tuple[float, float, float]:
        """The consumer's answer to the oldest ``post`` not yet answered."""
        assert self.proc.stdout is not None
        total, opened, copied = self.proc.stdout.readline().split()
        return float(total), float(opened), float(copied)

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(60)
        self.proc.stdout.close()


def _best(fn: Any, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def _move_rate(exporter: Any, src: Any, child: _Child, repeats: int, mode: str = "copy") -> float:
    """GB/s of export here plus open and copy out in the child (best of ``repeats``, after a warm-up)."""
    def move() -> float:
        t0 = time.perf_counter()
        key, refs = exporter.export({"w": src})
        child.send(refs, mode)
        exporter.release(key)
        return time.perf_counter() - t0

    move()  # warm: the first export creates the segment or starts the server
    return src.numel() * src.element_size() / _best(move, repeats) / 1e9


#: A model's sync through a serve ring: its bytes in this many pulls (layers), two slots deep.
RING_PULLS, RING_SLOTS = 8, 2


def _ring_rate(src: Any, child: _Child, repeats: int) -> float:
    """GB/s of a sync the way weight transfer runs one on shm: ``src`` cut into ``RING_PULLS`` layers,
    each packed into slot ``seq % RING_SLOTS`` of a consumer's serve ring and copied out by the
    consumer, which issues pull ``seq`` once pull ``seq - RING_SLOTS`` drained.  The producer packs
    the next layer while the consumer copies out this one."""
    from actorwire.transport.internal import ServeRing

    layers = list(src.chunk(RING_PULLS))
    ring = ServeRing(m.Plane.SHM)
    try:
        ring.reserve(1, RING_SLOTS, layers[0].numel() * layers[0].element_size())

        def sync() -> float:
            t0 = time.perf_counter()
            for seq, layer in enumerate(layers):
                if seq >= RING_SLOTS:
                    child.result()  # pull seq - RING_SLOTS drained: its slot is free
                child.post(ring.pack(1, seq, {f"layer{seq}": layer}))
            for _ in range(min(RING_SLOTS, len(layers))):
                child.result()
            return time.perf_counter() - t0

        sync()  # warm: the consumer maps the slots and makes its buffers
        return src.numel() * src.element_size() / _best(sync, repeats) / 1e9
    finally:
        ring.close()


def run(sizes: list[str] | None = None, repeats: int = 3, progress: Any = sys.stderr) -> list[Result]:
    import tempfile

    import torch

    from actorwire.transport.internal import FramesExporter, Security, ShmExporter, keygen

    results: list[Result] = []
    keys = tempfile.mkdtemp(prefix="actorwire-bench-keys-")
    keygen(keys)
    child = _Child({"ACTORWIRE_KEYS": keys})  # its frames importer is a CURVE client where a server is one
    try:
        for label in sizes or list(SIZES):
            nbytes = SIZES[label]
            src = torch.ones(nbytes // 4, dtype=torch.float32)
            dst = torch.empty_like(src)

            def memcpy(dst: Any = dst, src: Any = src) -> float:
                t0 = time.perf_counter()
                dst.copy_(src)
                return time.perf_counter() - t0

            # Best of `repeats`, as the planes are: more repeats let a 64 MiB copy run from a large
            # last-level cache (the H200 host's memcpy then reads 90-130 GB/s against 40-50 at 1 GiB).
            base = nbytes / _best(memcpy, repeats) / 1e9
            rates: list[tuple[str, float, str]] = []  # name, GB/s, target
            with ShmExporter(slot_bytes=nbytes) as exporter:
                rates.append(("shm", _move_rate(exporter, src, child, repeats), ">= 0.5 of memcpy"))
                rates.append(("shm_ring", _ring_rate(src, child, repeats), ""))
                rates.append(("shm_view", _move_rate(exporter, src, child, repeats, "view"), ""))
            frames_exporter = FramesExporter()
            try:
                rates.append(("frames", _move_rate(frames_exporter, src, child, repeats), ""))
            finally:
                frames_exporter.close()
            if label == "64MiB":  # over tcp on loopback, plain and with CURVE, as between hosts
                for name, security in (("frames_tcp", Security(insecure_tcp=True)), ("frames_curve", Security(keys=keys))):
                    tcp_exporter = FramesExporter("tcp://127.0.0.1:0", security=security)
                    try:
                        rates.append((name, _move_rate(tcp_exporter, src, child, repeats), ""))
                    finally:
                        tcp_exporter.close()
            results += [Result.against(f"tensor.{name}.{label}", rate, "GB/s", base, target)
                        for name, rate, target in rates]
            del src, dst
        if torch.cuda.is_available():
            results += _cuda(child, sizes or list(SIZES), repeats)
        results += _publish_group64()
    finally:
        child.close()
        import shutil

        shutil.rmtree(keys, ignore_errors=True)
    return results


def _cuda(child: _Child, sizes: list[str], repeats: int) -> list[Result]:
    import torch

    from actorwire.transport.internal import CudaIpcExporter, cuda_python

    out: list[Result] = []
    paths = [("cuda_ipc", True)] if cuda_python() is not None else []
    paths.append(("cuda_ipc_torch", False))  # torch's private sharing, which the public API replaced
    for name, public in paths:
        exporter = CudaIpcExporter(public_api=public)
        export_times: list[float] = []
        open_times: list[float] = []
        for label in sizes:
            nbytes = SIZES[label]
            src = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
            dst = torch.empty_like(src)

            def d2d(dst: Any = dst, src: Any = src) -> float:
                return _gpu_copy_seconds(dst, src)

            base = nbytes / _best(d2d, repeats) / 1e9

            def ipc(src: Any = src, exporter: Any = exporter, export_times: list[float] = export_times,
                    open_times: list[float] = open_times) -> float:
                e0 = time.perf_counter()
                key, refs = exporter.export({"w": src})
                export_times.append(time.perf_counter() - e0)
                _, opened, copied = child.send(refs)
                open_times.append(opened)
                exporter.release(key)
                return copied

            ipc()  # warm: CUDA context and first open in the consumer
            # As in the reference figures: the consumer's copy out of the IPC-opened
            # tensor, against a copy inside one process; export and open are reported apart.
            out.append(Result.against(f"tensor.{name}.{label}", nbytes / _best(ipc, repeats) / 1e9, "GB/s", base,
                                      ">= 0.9 of device copy at 1GiB" if label == "1GiB" and public else ""))
            del src, dst
        out.append(Result.against(f"tensor.{name}.export", statistics.median(export_times) * 1e3, "ms", None))
        out.append(Result.against(f"tensor.{name}.open", statistics.median(open_times) * 1e3, "ms", None))
        exporter.close()
    return out


def _publish_group64() -> list[Result]:
    import torch

    from actorwire.transport.internal import ShmExporter
    from actorwire.transport.internal import local_plane as _local

    group = {f"layers.3.w{i}": torch.randn(256) for i in range(64)}
    codec = Codec()

    def best_publish(export: Any, release: Any) -> float:
        """Best of 20: put the group on a plane and encode its PublishGroup."""
        def publish() -> float:
            t0 = time.perf_counter()
            key, refs = export(group)
            codec.encode_message(m.PublishGroup(sync_id=1, group_idx=3, tensors=refs))
            release(key)
            return time.perf_counter() - t0

        publish()
        return _best(publish, 20)

    with ShmExporter(slot_bytes=1 << 20) as exporter:
        copied = best_publish(exporter.export, exporter.release)
    local = best_publish(_local.put, _local.drop)
    return [Result.against("tensor.publish_group64", local * 1e3, "ms", None, "< 1 ms"),
            Result.against("tensor.publish_group64.shm_copy", copied * 1e3, "ms", None)]


if __name__ == "__main__":
    from actorwire.transport import configure_logging

    configure_logging()  # a program of ours: it may configure its process
    if sys.argv[1:] == ["consumer"]:
        _consumer()
