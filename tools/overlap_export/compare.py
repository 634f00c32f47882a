"""python3 -m overlap_export.compare FORWARD.json WEIGHTS.safetensors OUT.safetensors [--tolerance T]

The executor's numbers (`overlap exec ... --save OUT`) against torch's (the exporter's
--reference tensors in WEIGHTS): the loss (the forward's first output) and every parameter
gradient (`grad:<name>` against `ref/grad/<name>`), each within T * max|torch| in max
absolute difference (default 1e-4: float32). Prints one line per tensor that fails and a
summary; exits 1 when any fails or is missing.
"""

import argparse
import json
import struct
import sys

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "U8": np.uint8, "BOOL": np.bool_, "F16": np.float16}


def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for key, v in header.items():
        if key == "__metadata__":
            continue
        begin, end = v["data_offsets"]
        out[key] = np.frombuffer(data[8 + n + begin:8 + n + end],
                                 dtype=_DTYPES[v["dtype"]]).reshape(v["shape"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="overlap_export.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("forward")
    ap.add_argument("weights")
    ap.add_argument("got")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args(argv)
    graph = json.load(open(a.forward))
    ref, got = read(a.weights), read(a.got)
    output = next(n for n in graph["nodes"] if n["op"] == "output")["args"][0]
    loss_node = (output[0] if isinstance(output, list) else output)[1:]
    pairs = [("loss", loss_node, "ref/loss")]
    pairs += [(k[len("ref/grad/"):], "grad:" + k[len("ref/grad/"):], k) for k in sorted(ref)
              if k.startswith("ref/grad/")]
    bad, worst, worst_name = 0, 0.0, ""
    for name, got_key, ref_key in pairs:
        if got_key not in got or ref_key not in ref:
            print(f"compare: {name}: missing ({got_key} / {ref_key})")
            bad += 1
            continue
        g, r = got[got_key].astype(np.float64), ref[ref_key].astype(np.float64)
        if g.shape != r.shape:
            print(f"compare: {name}: shape {g.shape}, torch {r.shape}")
            bad += 1
            continue
        scale = max(float(np.abs(r).max()) if r.size else 0.0, 1e-30)
        err = float(np.abs(g - r).max()) / scale if r.size else 0.0
        if err > worst:
            worst, worst_name = err, name
        if not err <= a.tolerance:
            print(f"compare: {name}: max|a-b| / max|b| = {err:.3g} > {a.tolerance:g}")
            bad += 1
    print(f"compare: {len(pairs) - bad} of {len(pairs)} tensors within {a.tolerance:g} "
          f"(worst {worst:.3g}: {worst_name})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
