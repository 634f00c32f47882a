"""python3 -m overlap_export.compare FORWARD.json WEIGHTS.safetensors OUT.safetensors [--tolerance T]
   python3 -m overlap_export.compare --trained DATA.safetensors OUT.safetensors [--losses LOG]

The executor's numbers against torch's, each tensor within T * max|torch| in max absolute
difference (default 1e-4: float32):
- the executor's forward and backward (`overlap exec ... --save OUT`) against the
  exporter's --reference tensors in WEIGHTS: the loss (the forward's first output) and
  every parameter gradient (`grad:<name>` against `ref/grad/<name>`);
- with --trained, trained parameters (`overlap train / run ... --save OUT`, by parameter
  name) against the exporter's --train-data file (`ref/param/<name>`), and with --losses
  the `step k loss x` lines of LOG against `ref/loss/<k-1>`.
Prints one line per tensor that fails and a summary; exits 1 when any fails or is missing.
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


def _loss_lines(path):
    """{step: loss} from `step k loss x` lines (overlap train / run's stdout)."""
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 4 and f[0] == "step" and f[2] == "loss":
            out[int(f[1])] = float(f[3])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="overlap_export.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="FORWARD WEIGHTS OUT, or with --trained DATA OUT")
    ap.add_argument("--trained", action="store_true",
                    help="compare trained parameters with --train-data's ref/param/<name>")
    ap.add_argument("--losses", metavar="LOG",
                    help="with --trained: `step k loss x` lines to compare with ref/loss/<k-1>")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args(argv)
    if a.trained:
        if len(a.files) != 2:
            ap.error("--trained takes DATA OUT")
        ref, got = read(a.files[0]), read(a.files[1])
        pairs = [(k[len("ref/param/"):], ref[k], got.get(k[len("ref/param/"):]))
                 for k in sorted(ref) if k.startswith("ref/param/")]
        if a.losses:
            steps = _loss_lines(a.losses)
            for k in sorted(int(key[len("ref/loss/"):]) for key in ref
                            if key.startswith("ref/loss/")):
                value = steps.get(k + 1)
                pairs.append((f"loss at step {k + 1}", ref[f"ref/loss/{k}"],
                              None if value is None else np.array(value)))
    else:
        if len(a.files) != 3:
            ap.error("takes FORWARD WEIGHTS OUT")
        graph = json.load(open(a.files[0]))
        ref, got = read(a.files[1]), read(a.files[2])
        output = next(n for n in graph["nodes"] if n["op"] == "output")["args"][0]
        loss_node = (output[0] if isinstance(output, list) else output)[1:]
        pairs = [("loss", ref.get("ref/loss"), got.get(loss_node))]
        pairs += [(k[len("ref/grad/"):], ref[k], got.get("grad:" + k[len("ref/grad/"):]))
                  for k in sorted(ref) if k.startswith("ref/grad/")]
    if not pairs:
        print("compare: no reference tensors to compare")
        return 1
    bad, worst, worst_name = 0, 0.0, ""
    for name, r, g in pairs:
        if g is None or r is None:
            print(f"compare: {name}: missing ({'ours' if g is None else 'torch'})")
            bad += 1
            continue
        g, r = np.asarray(g, dtype=np.float64), np.asarray(r, dtype=np.float64)
        if g.shape != r.shape and g.size == r.size == 1:
            g = g.reshape(r.shape)
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
