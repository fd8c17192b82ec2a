#!/usr/bin/env python3
"""Reads a checkpoint written by tessera (write_checkpoint) with h5py.

  read_checkpoint.py --writer <write_checkpoint exe>

Runs the writer into a scratch folder, then checks with h5py that every string attribute is of
the one kind tessera writes, fixed-length UTF-8 (core/io/hdf5_file.h), which h5py 3.x reads as
bytes (numpy.bytes_) that decode as UTF-8; that they are exactly the ones expected (root format,
framework_version, config; layout kind/generator; dtype on every dataset; optimizer type;
trainer strings) with their values; that config parses as JSON; and that the tensors read with
their dtype attributes. Exit 77 (ctest SKIP) when h5py cannot be imported.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77


def string_attrs(f, h5py):
    """{"<object path>:<name>": (string_info, value)} for every string attribute in the file."""
    out = {}

    def visit(path, obj):
        for name in obj.attrs:
            info = h5py.check_string_dtype(obj.attrs.get_id(name).dtype)
            if info is not None:
                out[f"{path}:{name}"] = (info, obj.attrs[name])

    visit("/", f)
    f.visititems(lambda name, obj: visit("/" + name, obj))
    return out


def check(path, h5py, np):
    """The checks of the module docstring; AssertionError naming what differs."""
    with h5py.File(path, "r") as f:
        datasets = []
        f.visititems(lambda name, obj: datasets.append("/" + name) if isinstance(obj, h5py.Dataset) else None)
        strings = string_attrs(f, h5py)
        want = {"/:format", "/:framework_version", "/:config", "/layout/sparse:kind", "/layout/attn:kind",
                "/layout/attn:generator", "/optimizer:type", "/trainer:run", "/trainer:note", "/trainer:empty"}
        want |= {d + ":dtype" for d in datasets}
        assert set(strings) == want, (sorted(set(strings) - want), sorted(want - set(strings)))
        text = {}
        for key, (info, value) in strings.items():
            # One kind: fixed-length (h5py: length is not None) UTF-8, read as bytes.
            assert info.length is not None and info.encoding == "utf-8", (key, info)
            assert isinstance(value, bytes), (key, type(value))
            text[key] = value.decode("utf-8")

        assert text["/:format"] == "tessera-checkpoint", text["/:format"]
        assert re.fullmatch(r"\d+\.\d+\.\d+.*", text["/:framework_version"]), text["/:framework_version"]
        config = json.loads(text["/:config"])
        assert config["model"] == {"type": "lstm", "hidden": 32, "name": "na\u00efve"}, config
        assert text["/layout/sparse:kind"] == "block" and text["/layout/attn:kind"] == "attention"
        assert text["/layout/attn:generator"] == "strided(stride_blocks=3)", text["/layout/attn:generator"]
        assert text["/optimizer:type"] == "adamw"
        assert text["/trainer:run"] == "tiny run" and text["/trainer:empty"] == ""
        assert text["/trainer:note"] == "na\u00efve \u2713", text["/trainer:note"]

        # The tensors, with their dtype attributes.
        model = [d for d in datasets if d.startswith("/model/")]
        assert sorted(model) == ["/model/fc.bias", "/model/fc.weight"], model
        for d in model:
            assert text[d + ":dtype"] == "f32" and f[d].dtype == np.float32, (d, f[d].dtype)
        assert (f["model/fc.weight"][...] == np.arange(1, 7, dtype=np.float32).reshape(2, 3)).all()
        assert list(f["model/fc.bias"][...]) == [0.5, -0.25, 0.125]
        assert text["/layout/sparse/block_row:dtype"] == "i32" and f["layout/sparse/block_row"].dtype == np.int32
        assert text["/layout/attn/mask:dtype"] == "u8" and f["layout/attn/mask"].shape == (2, 8, 8)
        assert text["/optimizer/fc.weight/exp_avg:dtype"] == "f32"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writer", required=True, help="the write_checkpoint executable")
    args = parser.parse_args()
    try:
        import h5py
        import numpy as np
    except ImportError as e:
        print(f"h5py cannot be imported with {sys.executable} ({e}; Debian: python3-h5py): skipped")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ck.h5")
        subprocess.run([args.writer, path], check=True)
        check(path, h5py, np)
    print(f"h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}): every string attribute is "
          "fixed-length UTF-8 (bytes), config is JSON, tensors read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
