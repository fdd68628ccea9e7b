#!/usr/bin/python3
"""Checks model.h5 and model.safetensors written by save_model_test.cpp, with h5py and numpy
only (no mpitrain code): PyTorch names, shapes, float32, and the closed-form values
salt + i / 8 of save_model_test.cpp. The safetensors file is parsed as its specification
says: an 8-byte little-endian header length, a JSON header, then the data.

usage: check_saved_model.py DIR      prints "ok" and exits 0 when everything matches
"""
import json
import struct
import sys

import h5py
import numpy as np

# name -> (torch shape, salt); must match save_model_test.cpp
EXPECTED = {
    "0.weight": ((4, 3), 1.0),
    "0.bias": ((4,), 2.0),
    "2.weight": ((2, 4), 3.0),
    "2.bias": ((2,), 4.0),
    "norm.scale": ((), 5.0),
}


def expected_values(shape, salt):
    n = int(np.prod(shape, dtype=np.int64))
    values = np.float32(salt) + np.arange(n, dtype=np.float32) / np.float32(8)
    return values.astype(np.float32).reshape(shape)


def check_hdf5(path):
    with h5py.File(path, "r") as f:
        names = sorted(f.keys())
        assert names == sorted(EXPECTED), f"model.h5 names {names}"
        for name, (shape, salt) in EXPECTED.items():
            ds = f[name]
            assert ds.dtype == np.dtype("<f4"), f"{name}: dtype {ds.dtype}"
            assert ds.shape == shape, f"{name}: shape {ds.shape} != {shape}"
            # HDF5 cannot chunk (or checksum) a 0-d dataset; every other one carries Fletcher32.
            assert ds.fletcher32 == (len(shape) > 0), f"{name}: fletcher32 {ds.fletcher32}"
            got = ds[()]
            assert np.array_equal(got, expected_values(shape, salt)), f"{name}: {got}"


def check_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0, f"header length {n} is not padded to 8 bytes"
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    # As PyTorch/transformers write it (save_file(..., metadata={"format": "pt"})): some
    # loaders refuse a file without it.
    assert next(iter(header)) == "__metadata__", f"the header starts with {next(iter(header))}"
    assert header.pop("__metadata__") == {"format": "pt"}, "__metadata__ is not {'format': 'pt'}"
    assert sorted(header) == sorted(EXPECTED), f"safetensors names {sorted(header)}"
    covered = []
    for name, (shape, salt) in EXPECTED.items():
        entry = header[name]
        assert entry["dtype"] == "F32", f"{name}: dtype {entry['dtype']}"
        assert tuple(entry["shape"]) == shape, f"{name}: shape {entry['shape']}"
        begin, end = entry["data_offsets"]
        assert end - begin == 4 * int(np.prod(shape, dtype=np.int64)), f"{name}: {begin}..{end}"
        covered.append((begin, end))
        got = np.frombuffer(data[begin:end], dtype="<f4").reshape(shape)
        assert np.array_equal(got, expected_values(shape, salt)), f"{name}: {got}"
    covered.sort()
    position = 0
    for begin, end in covered:
        assert begin == position, f"gap or overlap at byte {begin}"
        position = end
    assert position == len(data), f"{len(data) - position} bytes of data belong to no tensor"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = sys.argv[1]
    check_hdf5(folder + "/model.h5")
    check_safetensors(folder + "/model.safetensors")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
