"""The shared-memory plane: packing, zero-copy views, reuse, release, and no leak when the owner dies."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import msgspec
import pytest
import torch
from conftest import stop_process

from actorwire.messages import Plane, TensorRef
from actorwire.transport._errors import BadHandle
from actorwire.transport.planes._choose import choose_plane
from actorwire.transport.planes._shm import ShmExporter, ShmImporter, sweep


def test_group_is_packed_aligned_into_one_slot_and_read_back() -> None:
    tensors = {"a": torch.arange(5, dtype=torch.float32), "b": torch.ones(3, 3, dtype=torch.bfloat16),
               "c": torch.arange(12, dtype=torch.int64).reshape(3, 4).t(), "empty": torch.empty(0)}
    with ShmExporter(slot_bytes=4096) as exporter:
        slot, refs = exporter.export(tensors)
        assert len({r.handle for r in refs.values()}) == 1  # one handle per slot
        assert all(r.offset % 16 == 0 for r in refs.values())
        importer = ShmImporter()
        for name, t in tensors.items():
            assert torch.equal(importer.open(refs[name]), t), name
        importer.drop()


def test_importer_views_share_memory_with_the_slot() -> None:
    with ShmExporter(slot_bytes=1024) as exporter:
        _, refs = exporter.export({"w": torch.zeros(4)})
        importer = ShmImporter()
        first = importer.open(refs["w"])
        second = importer.open(refs["w"])
        first[1] = 7.0
        assert second[1] == 7.0  # no copy on the reading side
        del first, second
        importer.drop()


def test_slots_are_reused_after_release() -> None:
    with ShmExporter(slot_bytes=1024) as exporter:
        a, _ = exporter.export({"x": torch.ones(10)})
        b, _ = exporter.export({"x": torch.ones(10)})
        assert a != b
        exporter.release(a)
        c, _ = exporter.export({"x": torch.ones(10)})
        assert c == a
        big, refs = exporter.export({"x": torch.ones(1000)})  # larger than a slot: its own segment
        assert refs["x"].nbytes == 4000 and big not in (a, b)


def test_refs_survive_the_wire() -> None:
    with ShmExporter(slot_bytes=1024) as exporter:
        _, refs = exporter.export({"x": torch.arange(6.0).reshape(2, 3)})
        wire = msgspec.msgpack.decode(msgspec.msgpack.encode(refs["x"]), type=TensorRef)
        assert wire.plane is Plane.SHM and wire.shape == [2, 3] and wire.stride == [3, 1]
        importer = ShmImporter()
        assert torch.equal(importer.open(wire), torch.arange(6.0).reshape(2, 3))
        importer.drop()


def test_errors_name_the_problem() -> None:
    with ShmExporter() as exporter:
        with pytest.raises(ValueError, match="the shm plane carries CPU tensors, got one on meta"):
            exporter.export({"x": torch.empty(2, device="meta")})
    gone = TensorRef(dtype="float32", shape=[1], stride=[1], plane=Plane.SHM, handle=b"aw-nope-1", nbytes=4)
    with pytest.raises(BadHandle, match="shared-memory slot 'aw-nope-1' is gone"):
        ShmImporter().open(gone)
    with pytest.raises(BadHandle, match="not a shared-memory tensor: plane frames"):
        ShmImporter().open(TensorRef(dtype="float32", shape=[1], stride=[1]))


def test_close_unlinks_the_segments() -> None:
    exporter = ShmExporter(slot_bytes=1024)
    _, refs = exporter.export({"x": torch.ones(2)})
    name = refs["x"].handle.decode()
    assert pathlib.Path("/dev/shm", name).exists()
    exporter.close()
    assert not pathlib.Path("/dev/shm", name).exists()
    exporter.close()  # idempotent


CHILD = """
import sys, torch
from actorwire.transport.planes._shm import ShmExporter
e = ShmExporter(slot_bytes=1 << 20)
_, refs = e.export({"x": torch.ones(100)})
print(refs["x"].handle.decode(), flush=True)
sys.stdin.readline()
"""


@pytest.mark.timeout(60)
def test_a_dead_owner_leaks_no_segment() -> None:
    """The owner unlinks; after a SIGKILL its launcher's sweep does, and no resource tracker warns."""
    from actorwire.transport.planes._shm import sweep

    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        name = proc.stdout.readline().strip()
        path = pathlib.Path("/dev/shm", name)
        assert path.exists()
        # Another process reads it while the owner lives.
        read = subprocess.run([sys.executable, "-c",
                               "import sys,torch; from actorwire.transport.planes._shm import ShmImporter;"
                               "from actorwire.messages import TensorRef, Plane;"
                               f"r=TensorRef(dtype='float32',shape=[100],stride=[1],plane=Plane.SHM,"
                               f"handle=b'{name}',nbytes=400);"
                               "print(float(ShmImporter().open(r).sum()))"],
                              capture_output=True, text=True, timeout=30)
        assert read.stdout.strip() == "100.0"
        assert path.exists()  # the reader exiting did not unlink the owner's segment
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert path.exists()  # no resource tracker unlinked it behind our back
        assert sweep(proc.pid) == [name]  # what the launcher that watched it does
        assert not path.exists()
        assert proc.stderr is not None and "leaked" not in proc.stderr.read()
    finally:
        stop_process(proc)


def test_plane_choice() -> None:
    assert choose_plane("cpu", same_host=True) is Plane.SHM
    assert choose_plane("cuda:1", same_host=True) is Plane.CUDA_IPC
    assert choose_plane("cuda:0", same_host=False) is Plane.FRAMES
    assert choose_plane("cpu", same_host=True, force="frames") is Plane.FRAMES
    with pytest.raises(ValueError, match="plane cuda_ipc cannot carry a tensor on cpu"):
        choose_plane("cpu", same_host=True, force=Plane.CUDA_IPC)
    with pytest.raises(ValueError, match="plane shm works within one host only"):
        choose_plane("cpu", same_host=False, force="shm")


ORPHAN = """
import pathlib, sys, time, torch
from multiprocessing import resource_tracker
from actorwire.transport.planes._shm import ShmExporter
e = ShmExporter(slot_bytes=1 << 20)
_, refs = e.export({"x": torch.ones(100)})
name = refs["x"].handle.decode()
resource_tracker.unregister("/" + name, "shared_memory")  # as if the tracker died with the process
pathlib.Path(sys.argv[1]).write_text(name)
time.sleep(60)
"""


@pytest.mark.timeout(60)
def test_a_launched_process_killed_with_its_tracker_leaves_no_segment(tmp_path: pathlib.Path) -> None:
    """A job kill takes the worker and its resource tracker together: the segments stayed in
    /dev/shm. The launcher that watched the process unlinks what it left."""
    from actorwire.actors import ActorSystem

    told = tmp_path / "name"
    with ActorSystem() as system:
        child = system.launch([sys.executable, "-c", ORPHAN, str(told)])
        try:
            for _ in range(600):
                if told.exists() and told.read_text():
                    break
                subprocess.run(["sleep", "0.05"])
            path = pathlib.Path("/dev/shm", told.read_text())
            assert path.exists()
        finally:
            child.kill()
            child.wait(10)
        for _ in range(200):  # the launcher's watch thread sweeps right after the exit (bounded wait)
            if not path.exists():
                break
            subprocess.run(["sleep", "0.05"])
        assert not path.exists()


def test_sweep_unlinks_only_the_dead_processs_segments(tmp_path: pathlib.Path) -> None:
    for name in ("aw123_abc-1", "aws123_def-0-0", "aw1234_abc-1", "aws12_x-1", "other"):
        (tmp_path / name).write_bytes(b"")
    assert sorted(sweep(123, str(tmp_path))) == ["aw123_abc-1", "aws123_def-0-0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aw1234_abc-1", "aws12_x-1", "other"]


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait(10)
    return child.pid


def test_orphans_of_dead_processes_in_this_namespace_are_swept_and_nothing_else(tmp_path: pathlib.Path) -> None:
    from actorwire.transport.planes._shm import _namespace_tag, sweep_orphans

    tag, other = _namespace_tag(), "ffff" if _namespace_tag() != "ffff" else "0000"
    dead, live = _dead_pid(), os.getppid()
    names = {f"aw{dead}_{tag}a1b2c3-0": True, f"aws{dead}_{tag}a1b2c3-0-1": True,
             f"aw{dead}_{other}a1b2c3-0": False,  # another pid namespace: its pids are not ours to judge
             f"aw{live}_{tag}a1b2c3-0": False, f"aw{os.getpid()}_{tag}a1b2c3-0": False,
             f"aw{dead}_abc-1": False, "psm_1234": False, f"xaw{dead}_{tag}a1b2c3": False}
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert sorted(sweep_orphans(str(tmp_path))) == sorted(n for n, gone in names.items() if gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n, gone in names.items() if not gone)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_segment_left_by_a_process_no_launcher_of_ours_watched_is_swept_by_the_next_one() -> None:
    """torchrun or SLURM start the workers: when a worker and its resource tracker die together,
    nothing of ours was there to sweep, and the segment stayed in /dev/shm for good."""
    leave = textwrap.dedent("""
        import os, signal
        from multiprocessing import resource_tracker, shared_memory
        from actorwire.transport.planes._shm import segment_prefix
        seg = shared_memory.SharedMemory(name=segment_prefix("aw") + "-0", create=True, size=4096)
        print(seg.name, flush=True)
        os.kill(resource_tracker._resource_tracker._pid, signal.SIGKILL)  # a job kill takes both
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    left = subprocess.run([sys.executable, "-c", leave], capture_output=True, text=True, timeout=30)
    name = left.stdout.strip()
    path = pathlib.Path("/dev/shm") / name
    try:
        assert left.returncode == -signal.SIGKILL and name and path.exists()
        nxt = subprocess.run([sys.executable, "-c", "from actorwire.transport.planes._shm import segment_prefix;"
                              "segment_prefix('aws')"], capture_output=True, text=True, timeout=30)
        assert nxt.returncode == 0, nxt.stderr
        assert not path.exists()
    finally:
        path.unlink(missing_ok=True)
