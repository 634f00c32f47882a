"""python3 -m overlap_export.compare FORWARD.json WEIGHTS.safetensors OUT.safetensors [--tolerance T]
   python3 -m overlap_export.compare --trained DATA.safetensors OUT.safetensors [--losses LOG]

The executor's numbers against torch's (docs/interop.md, "The comparison rule"). A tensor
passes when its max absolute difference from torch's float32 result is within T times a
scale (default T 1e-4: float32): for gradients the largest |gradient| torch gives any
parameter of the model, for trained parameters' (buffers') changes the largest change torch
made to any parameter (buffer), for a loss its own |x|;
or, where torch's float32 result is itself further than that from torch's float64 result
(ref64/: a gradient that is zero but for round-off, say), when it is no further from the
float64 result than ten times torch's own float32 error:
- the executor's forward and backward (`overlap exec ... --save OUT`) against the
  exporter's --reference tensors in WEIGHTS: the loss (the forward's first output) and
  every parameter gradient (`grad:<name>` against `ref/grad/<name>`, `ref64/grad/<name>`);
- with --trained, what training changed in each parameter and buffer (`overlap train / run
  ... --save OUT`, by parameter name and buffer/<name>, minus the file's param/<name>,
  buffer/<name>) against what torch's changed (`ref/param/<name>`, `ref/buffer/<name>`
  minus the same start, and `ref64/param/<name>`, `ref64/buffer/<name>` from the float64
  training; the scale the largest change torch made to any parameter, or buffer), and with
  --losses the `step k loss x` lines of LOG against `ref/loss/<k-1>`.
With --float64, torch's float64 numbers (ref64/) are the reference, for a run of ours in
float64 (`exec --double`, `train --double`): round-off gone, a wrong kernel still fails.
There a tensor further than T also passes when it is no further from torch's float64
result than ten times torch's own float64 spread: how far that result moves when the
inputs are nudged by about nine rounding units (ref64p/, the exporter's second float64
run): the yardstick for a result that round-off alone moves far (AdamW's update of a
gradient that cancels to almost nothing).
Prints one line per tensor that fails and a summary; exits 1 when any fails or is missing,
or when a file is missing, unreadable or malformed (one line naming it); 2 on bad usage.
"""

import argparse
import json
import mmap
import struct
import sys

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "U8": np.uint8, "BOOL": np.bool_, "F16": np.float16}


class BadFile(Exception):
    """A file that cannot be read or is not what it should be: the message names it."""

    def __init__(self, path, why):
        super().__init__(f"{path}: {why}")


def _open_error(path, e):
    return BadFile(path, e.strerror or str(e))


def _bf16(raw):
    """bfloat16 bits (uint16) as float32."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def read(path):
    """{name: array} of a safetensors file; BadFile when it is not one. The arrays are views
    of the file mapped into memory (a large model's float64 reference is read as it is
    used, never copied whole); a pipe or an empty file is read instead."""
    try:
        with open(path, "rb") as f:
            try:
                data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            except (OSError, ValueError):  # not a mappable file: a pipe, an empty file
                data = memoryview(f.read())
    except OSError as e:
        raise _open_error(path, e) from None
    if len(data) < 8:
        raise BadFile(path, f"not a safetensors file ({len(data)} bytes, no header length)")
    n = struct.unpack("<Q", data[:8])[0]
    if n > len(data) - 8:
        raise BadFile(path, f"not a safetensors file (a header of {n} bytes in a file of "
                            f"{len(data)})")
    try:
        header = json.loads(bytes(data[8:8 + n]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadFile(path, f"not a safetensors file (its header is not JSON: {e})") from None
    if not isinstance(header, dict):
        raise BadFile(path, "not a safetensors file (its header is not a JSON object)")
    body = len(data) - 8 - n
    out = {}
    for key, v in header.items():
        if key == "__metadata__":
            continue
        try:
            code, shape, (begin, end) = v["dtype"], v["shape"], v["data_offsets"]
            if code != "BF16" and code not in _DTYPES:
                raise ValueError(f"dtype {code!r} is not one of "
                                 + ", ".join(sorted(list(_DTYPES) + ["BF16"])))
            if not all(isinstance(x, int) and x >= 0 for x in [begin, end] + list(shape)):
                raise ValueError("its shape and offsets are not non-negative integers")
            if not begin <= end <= body:
                raise ValueError(f"data_offsets [{begin}, {end}] outside the {body} data "
                                 "bytes")
            raw = data[8 + n + begin:8 + n + end]
            if code == "BF16":
                out[key] = _bf16(np.frombuffer(raw, dtype=np.uint16)).reshape(shape)
            else:
                out[key] = np.frombuffer(raw, dtype=_DTYPES[code]).reshape(shape)
        except (KeyError, TypeError, ValueError) as e:
            what = f"no {e}" if isinstance(e, KeyError) else str(e)
            raise BadFile(path, f"tensor '{key}' is malformed: {what}") from None
    return out


def _read_graph(path):
    """The forward graph's loss node name (the first output); BadFile when it has none."""
    try:
        with open(path, "rb") as f:
            graph = json.loads(f.read())
    except OSError as e:
        raise _open_error(path, e) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadFile(path, f"not JSON: {e}") from None
    try:
        output = next(n for n in graph["nodes"] if n["op"] == "output")["args"][0]
        loss = output[0] if isinstance(output, list) else output
        if not isinstance(loss, str) or not loss.startswith("%"):
            raise ValueError(f"its first output is {loss!r}, not a node")
        return loss[1:]
    except StopIteration:
        raise BadFile(path, "not an overlap graph (no output node)") from None
    except (KeyError, TypeError, IndexError, ValueError) as e:
        what = f"no {e}" if isinstance(e, KeyError) else str(e)
        raise BadFile(path, f"not an overlap graph ({what})") from None


def _loss_lines(path):
    """{step: loss} from `step k loss x` lines (overlap train / run's stdout)."""
    out = {}
    try:
        with open(path, errors="replace") as log:
            for i, line in enumerate(log, 1):
                f = line.split()
                if len(f) >= 4 and f[0] == "step" and f[2] == "loss":
                    try:
                        out[int(f[1])] = float(f[3])
                    except ValueError:
                        raise BadFile(path, f"line {i} is not `step k loss x`: "
                                            f"{line.strip()}") from None
    except OSError as e:
        raise _open_error(path, e) from None
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="overlap_export.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="FORWARD WEIGHTS OUT, or with --trained DATA OUT")
    ap.add_argument("--trained", action="store_true",
                    help="compare trained parameters with --train-data's ref/param/<name>")
    ap.add_argument("--losses", metavar="LOG",
                    help="with --trained: `step k loss x` lines to compare with ref/loss/<k-1>")
    ap.add_argument("--float64", action="store_true",
                    help="against torch's float64 numbers (ref64/) instead: for a run of ours "
                         "in float64 (exec / train --double)")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args(argv)
    if a.trained and len(a.files) != 2:
        ap.error("--trained takes DATA OUT")
    if not a.trained and len(a.files) != 3:
        ap.error("takes FORWARD WEIGHTS OUT")
    try:
        pairs = _pairs(a)
    except BadFile as e:
        print(f"compare: {e}", file=sys.stderr)
        return 1
    return _compare(pairs, a.tolerance)


def _pairs(a):
    """(name, torch's tensor, ours) to compare."""
    if a.trained:
        ref, got = _as_float64(read(a.files[0]), a.files[0], a.float64), read(a.files[1])
        pairs = []
        # What training changed, against what torch's changed: each parameter's (buffer's)
        # end minus its start in the file, scaled by the largest change torch made to any
        # parameter (buffer). A parameter that starts at zero (a bias) and moves by 1e-5
        # is judged by the update, not by its own size.
        for prefix, start, name_of in (("ref/param/", "param/", lambda k: k),
                                       ("ref/buffer/", "buffer/", lambda k: "buffer/" + k)):
            keys = [k for k in sorted(ref) if k.startswith(prefix)]
            deltas = {}
            for k in keys:
                name = k[len(prefix):]
                r, g, s0 = ref[k], got.get(name_of(name)), ref.get(start + name)
                r64 = ref.get("ref64/" + k[len("ref/"):])
                rp = ref.get("ref64p/" + k[len("ref/"):]) if a.float64 else None
                if s0 is None or g is None or np.shape(g) != np.shape(r):
                    deltas[name] = (r, g, None, None)  # compared as values (missing reported)
                    continue
                s0 = np.asarray(s0, dtype=np.float64)
                deltas[name] = (np.asarray(r, dtype=np.float64) - s0,
                                np.asarray(g, dtype=np.float64) - s0,
                                None if r64 is None or np.shape(r64) != np.shape(r) else
                                np.asarray(r64, dtype=np.float64) - s0,
                                None if rp is None or np.shape(rp) != np.shape(r) else
                                np.asarray(rp, dtype=np.float64) - s0)
            largest = max([float(np.nanmax(np.abs(d[0]))) for d in deltas.values()
                           if d[0] is not None and np.size(d[0]) and
                           not np.isnan(d[0]).all()] + [0.0])
            for name, (r, g, r64, rp) in deltas.items():
                pairs.append((name_of(name) + " (change)", r, g, r64, largest, rp))
        if a.losses:
            steps = _loss_lines(a.losses)
            steps_of = {}
            for key in ref:
                if key.startswith("ref/loss/"):
                    if not key[len("ref/loss/"):].isdigit():
                        raise BadFile(a.files[0], f"'{key}' is not ref/loss/<step>")
                    steps_of[int(key[len("ref/loss/"):])] = key
            for k in sorted(steps_of):
                value = steps.get(k + 1)
                pairs.append((f"loss at step {k + 1}", ref[steps_of[k]],
                              None if value is None else np.array(value),
                              ref.get(f"ref64/loss/{k}"), None,
                              ref.get(f"ref64p/loss/{k}") if a.float64 else None))
    else:
        loss_node = _read_graph(a.files[0])
        ref, got = _as_float64(read(a.files[1]), a.files[1], a.float64), read(a.files[2])
        grads = [k for k in sorted(ref) if k.startswith("ref/grad/")]
        largest = max([float(np.nanmax(np.abs(ref[k]))) for k in grads
                       if ref[k].size and not np.isnan(ref[k]).all()] + [0.0])
        spread = (lambda key: ref.get("ref64p/" + key)) if a.float64 else (lambda key: None)
        pairs = [("loss", ref.get("ref/loss"), got.get(loss_node), ref.get("ref64/loss"), None,
                  spread("loss"))]
        pairs += [(k[len("ref/grad/"):], ref[k], got.get("grad:" + k[len("ref/grad/"):]),
                   ref.get("ref64/grad/" + k[len("ref/grad/"):]), largest,
                   spread(k[len("ref/"):])) for k in grads]
    return [p if len(p) == 6 else p + (None,) * (6 - len(p)) for p in pairs]


def _as_float64(ref, path, wanted):
    """`ref` with torch's float64 numbers (ref64/<x>) as its reference (ref/<x>) when
    `wanted`: no float64 clause then, the reference being float64 itself."""
    if not wanted:
        return ref
    wide = {k: v for k, v in ref.items() if not k.startswith(("ref/", "ref64/"))}
    wide.update({"ref/" + k[len("ref64/"):]: v for k, v in ref.items() if k.startswith("ref64/")})
    if len(wide) == len([k for k in ref if not k.startswith(("ref/", "ref64/"))]):
        raise BadFile(path, "has no float64 reference (ref64/): the exporter writes it with "
                            "--reference / --train-data, unless the model's float64 copy "
                            "fails (the export notes why)")
    return wide


def _compare(pairs, tolerance):
    if not pairs:
        print("compare: no reference tensors to compare")
        return 1
    bad, worst, worst_name, by_float64, by_spread = 0, 0.0, "", 0, 0
    for name, r, g, r64, scale, nudged in pairs:
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
        # NaN and infinities equal where both sides hold the same (torch.testing's
        # equal_nan): a model that overflows does so in both; one side alone fails.
        same = (np.isnan(g) & np.isnan(r)) | (np.isinf(g) & (g == r))
        if same.any():
            g, r = np.where(same, 0.0, g), np.where(same, 0.0, r)
        if not (np.isfinite(g).all() and np.isfinite(r).all()):
            print(f"compare: {name}: NaN or infinity on one side only")
            bad += 1
            continue
        if scale is not None and not np.isfinite(scale):
            scale = None
        err = _relative(g, r, r if scale is None else scale)
        if not err <= tolerance and r64 is not None:
            r64 = np.asarray(r64, dtype=np.float64).reshape(r.shape)
            torch_err = float(np.abs(r - r64).max()) if r.size else 0.0
            ours_err = float(np.abs(g - r64).max()) if r.size else 0.0
            if (_relative(r, r64, r64 if scale is None else scale) > tolerance and
                    ours_err <= 10 * torch_err):
                by_float64 += 1
                print(f"compare: {name}: {err:.3g} off, but torch's float32 is "
                      f"itself {torch_err:.3g} from float64, ours {ours_err:.3g}: passes")
                continue
        if not err <= tolerance and nudged is not None and np.size(nudged) == r.size:
            # A result float64 round-off alone moves far (AdamW's update of a gradient
            # that a batch norm over two values cancels to almost nothing): torch against
            # itself on inputs nudged by ~9 rounding units is the yardstick.
            nudged = np.asarray(nudged, dtype=np.float64).reshape(r.shape)
            torch_spread = float(np.abs(nudged - r).max()) if r.size else 0.0
            ours_off = float(np.abs(g - r).max()) if r.size else 0.0
            if ours_off <= 10 * torch_spread:
                by_spread += 1
                print(f"compare: {name}: {err:.3g} off, but torch's float64 moves it "
                      f"{torch_spread:.3g} when its inputs move by a rounding, ours "
                      f"{ours_off:.3g}: passes")
                continue
        if err > worst:
            worst, worst_name = err, name
        if not err <= tolerance:
            print(f"compare: {name}: max|a-b| / {'max|b|' if scale is None else 'the model-wide scale'}"
                  f" = {err:.3g} > {tolerance:g}")
            bad += 1
    extra = f"; {by_float64} by the float64 rule" if by_float64 else ""
    extra += f"; {by_spread} by float64's spread" if by_spread else ""
    print(f"compare: {len(pairs) - bad} of {len(pairs)} tensors within {tolerance:g} "
          f"(worst {worst:.3g}: {worst_name}{extra})")
    return 1 if bad else 0


def _relative(a, b, scale):
    """max|a - b| / scale, `scale` a number or the tensor whose max|x| it is (0 for empty
    tensors)."""
    if not b.size:
        return 0.0
    if not isinstance(scale, float):
        scale = float(np.abs(scale).max()) if np.asarray(scale).size else 0.0
    return float(np.abs(a - b).max()) / max(scale, 1e-30)


if __name__ == "__main__":
    sys.exit(main())
