#!/usr/bin/env python3
"""Loads an event file written by tessera's EventWriter with TensorBoard's own reader.

  read_events.py --writer <write_events exe> --venv <dir>

Creates (once; cached) a virtualenv in <dir> with `pip install tensorboard`, runs the writer
into a scratch logdir, and checks in the venv that TensorBoard's EventAccumulator loads every
scalar with the written tag, step, wall time and (float32) value. Exit 77 (ctest SKIP) when
tensorboard cannot be installed (offline).
"""
import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile

SKIP = 77


def ensure_venv(venv):
    """The venv's python, with tensorboard installed; None when that is not possible."""
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".tensorboard-installed")
    if os.path.exists(marker) and os.path.exists(python):
        return python
    if os.path.exists(venv):
        shutil.rmtree(venv)
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"cannot create a virtualenv with {sys.executable}: {e}")
        return None
    pip = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
                          "--timeout", "20", "--retries", "1", "tensorboard"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if pip.returncode != 0:
        print("pip install tensorboard failed (offline?):\n" + pip.stdout[-2000:])
        return None
    open(marker, "w").close()
    return python


def check(logdir, expected_file):
    """Runs inside the venv: TensorBoard's reader against the writer's own listing."""
    from tensorboard.backend.event_processing import event_accumulator, event_file_loader

    expected = {}
    with open(expected_file) as f:
        for line in f:
            tag, step, value, wall = line.split()
            expected.setdefault(tag, []).append((int(step), float(value), float(wall)))

    run = os.path.join(logdir, "run")
    files = [n for n in os.listdir(run) if "tfevents" in n]
    assert len(files) == 1, files
    # Raw events (the loader checks both CRCs of every record): header first, then the scalars.
    events = list(event_file_loader.EventFileLoader(os.path.join(run, files[0])).Load())
    assert events[0].file_version == "brain.Event:2", events[0]
    assert len(events) == 1 + sum(len(v) for v in expected.values()), len(events)

    acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    assert acc.file_version == 2.0, acc.file_version
    assert sorted(acc.Tags()["scalars"]) == sorted(expected), acc.Tags()
    for tag, points in expected.items():
        got = acc.Scalars(tag)
        assert len(got) == len(points), (tag, len(got), len(points))
        for g, (step, value, wall) in zip(got, points):
            as_f32 = struct.unpack("<f", struct.pack("<f", value))[0]
            assert g.step == step, (tag, g, step)
            assert g.wall_time == wall, (tag, g, wall)
            assert g.value == as_f32, (tag, g, as_f32)
    print(f"TensorBoard read {len(events)} events: "
          + ", ".join(f"{t} x{len(p)}" for t, p in sorted(expected.items())))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writer")
    ap.add_argument("--venv")
    ap.add_argument("--check", nargs=2, metavar=("LOGDIR", "EXPECTED"))
    args = ap.parse_args()
    if args.check:
        return check(*args.check)
    python = ensure_venv(args.venv)
    if python is None:
        return SKIP
    with tempfile.TemporaryDirectory(prefix="tessera_tb_") as tmp:
        logdir = os.path.join(tmp, "logs")
        expected = os.path.join(tmp, "expected.txt")
        with open(expected, "w") as f:
            subprocess.run([args.writer, logdir], check=True, stdout=f)
        return subprocess.run([python, os.path.abspath(__file__), "--check", logdir, expected]).returncode


if __name__ == "__main__":
    sys.exit(main())
