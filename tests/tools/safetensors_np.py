#!/usr/bin/env python3
"""Reads and writes safetensors files from Python, for tests/test_nn_module.cpp.

Uses Hugging Face's `safetensors` package when it is installed, else the small
numpy reader and writer below (the format: 8-byte little-endian header length,
a JSON header, then the raw little-endian data).

  safetensors_np.py to-json FILE.safetensors OUT.json
  safetensors_np.py from-json IN.json FILE.safetensors

The JSON holds {"tensors": {name: {"shape": [..], "data": [..]}}, "metadata": {..}}.
"""
import json
import struct
import sys

import numpy as np

try:
    import safetensors
    import safetensors.numpy
except ImportError:
    safetensors = None


def load_np(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", entry["dtype"]
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(entry["shape"])
    return tensors, metadata


def save_np(path, tensors, metadata):
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        chunks.append(a.tobytes())
        offset += a.nbytes
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def load(path):
    if safetensors is None:
        return load_np(path)
    with safetensors.safe_open(path, framework="np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}


def save(path, tensors, metadata):
    if safetensors is None:
        return save_np(path, tensors, metadata)
    safetensors.numpy.save_file(tensors, path, metadata=metadata or None)


def main(command, src, dst):
    if command == "to-json":
        tensors, metadata = load(src)
        out = {"tensors": {k: {"shape": list(v.shape), "data": v.astype(float).reshape(-1).tolist()}
                           for k, v in tensors.items()},
               "metadata": metadata, "reader": "safetensors" if safetensors else "numpy"}
        with open(dst, "w") as f:
            json.dump(out, f)
    elif command == "from-json":
        with open(src) as f:
            j = json.load(f)
        tensors = {k: np.array(v["data"], dtype="<f4").reshape(v["shape"]) for k, v in j["tensors"].items()}
        save(dst, tensors, j.get("metadata", {}))
    else:
        sys.exit("unknown command " + command)


if __name__ == "__main__":
    main(*sys.argv[1:])
