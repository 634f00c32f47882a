"""The exporter's command lines (python3 -m overlap_export, python3 -m overlap_export.compare)
run in subprocesses in temporary folders, on testing/tiny_models.py's models:

- the model's own failures (sys.exit, an exception in its constructor or forward, a wrong
  input shape) are one-line errors naming the step, exit 1, no traceback, no file; a
  KeyboardInterrupt is not swallowed;
- output paths: -o "" and -o naming a folder, and outputs whose folder is missing or that
  are folders, are usage errors (exit 2) before the model is loaded; a failed write leaves
  no file of the run; a symbolic link is replaced, never written through (its target
  untouched), a FIFO or a device is written in place;
- bad --input specs and a --kwargs that is not a JSON object are usage errors naming them;
- --help says what each --loss computes;
- compare: a missing, unreadable or malformed file is one line naming it, exit 1;
- state: a parameter read as a constant, or a tensor with no value, is refused; tensor
  constants are written (constant/<name>) and bound, the backward's too; RNN weights are
  parameters with gradients; weight norm's computed weight is copied and its fused ops
  written in others;
- what it refuses is one line naming the model's module and the construct (data-dependent
  control flow, `.item()`), the model's float64 copy failing is a one-line note, and an
  exception no step expects is one line naming the exporter's function; never a traceback
  but with --debug / OVERLAP_EXPORT_DEBUG=1.

Run: cd tools && $(bash python.sh) -m unittest overlap_export.testing.cli_test -v
"""

import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

import numpy as np

TOOLS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = "overlap_export.testing.tiny_models"
TINY = MODELS + ":tiny"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = TOOLS + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"  # modest CPU use: the models are tiny
    return env


def run(module, args, cwd, timeout=120, env_extra=None):
    env = _env()
    env.update(env_extra or {})
    env["COLUMNS"] = "100"  # argparse's help, wrapped alike everywhere
    return subprocess.run([sys.executable, "-m", module] + list(args), cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def export(args, cwd, env_extra=None):
    return run("overlap_export", args, cwd, env_extra=env_extra)


def compare(args, cwd):
    return run("overlap_export.compare", args, cwd)


def lines(text):
    return [line for line in text.splitlines() if line.strip()]


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="overlap_export_cli_test.")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def files(self):
        """Every name in the test's folder (temporary files included), sorted."""
        out = []
        for root, dirs, names in os.walk(self.dir):
            rel = os.path.relpath(root, self.dir)
            out += [os.path.normpath(os.path.join(rel, n)) for n in names]
        return sorted(out)

    def assertOneLineError(self, r, code, *needles):
        """Exit `code`, no traceback, stderr a single line holding every needle."""
        msg = f"rc {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
        self.assertEqual(r.returncode, code, msg)
        self.assertNotIn("Traceback", r.stderr, msg)
        self.assertEqual(len(lines(r.stderr)), 1, msg)
        for n in needles:
            self.assertIn(n, r.stderr, msg)

    def assertUsageError(self, r, *needles):
        """argparse's exit 2: its usage, then one `error:` line holding every needle."""
        msg = f"rc {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
        self.assertEqual(r.returncode, 2, msg)
        self.assertNotIn("Traceback", r.stderr, msg)
        last = lines(r.stderr)[-1]
        self.assertIn("error:", last, msg)
        for n in needles:
            self.assertIn(n, last, msg)


class ModelFailureTest(Base):
    """Finding 1: the model's own failures are the exporter's one-line errors."""

    def test_constructor_sys_exit(self):
        r = export([f"{MODELS}:ExitInConstructor", "--input", "2x4", "--aot", "--weights",
                    "w.safetensors", "-o", "m"], self.dir)
        self.assertOneLineError(r, 1, "overlap_export: import:",
                                "the model's constructor called sys.exit(3)")
        self.assertEqual(self.files(), [])

    def test_forward_sys_exit_while_tracing(self):
        for extra in ([], ["--aot"]):  # no fallback to the AOT path: the model asked to stop
            with self.subTest(extra=extra):
                r = export([f"{MODELS}:ExitInForward", "--input", "2x4", "-o", "m"] + extra,
                           self.dir)
                self.assertOneLineError(r, 1, "overlap_export: trace:",
                                        "the model's forward called sys.exit(4)")
                self.assertEqual(self.files(), [])

    def test_forward_sys_exit_on_aot_path(self):
        r = export([f"{MODELS}:ExitInAotForward", "--input", "2x4", "--aot", "-o", "m"],
                   self.dir)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        # The fallback's note, then the error.
        self.assertIn("taking the AOT path only", r.stderr)
        self.assertIn("overlap_export: aot: the model's forward called sys.exit(5)",
                      lines(r.stderr)[-1])
        self.assertEqual(self.files(), [])

    def test_forward_exception(self):
        r = export([f"{MODELS}:RaiseInForward", "--input", "2x4", "--aot", "-o", "m"],
                   self.dir)
        self.assertOneLineError(r, 1, "overlap_export: forward: ValueError: the tiny model "
                                      "refuses its input")
        self.assertEqual(self.files(), [])

    def test_wrong_input_shape(self):
        for extra in ([], ["--aot", "--loss", "mse"]):
            with self.subTest(extra=extra):
                r = export([TINY, "--input", "2x5", "-o", "m"] + extra, self.dir)
                self.assertOneLineError(r, 1, "overlap_export: forward: model.fc1 "
                                              "(Linear.forward): RuntimeError:", "2x5")
                self.assertEqual(self.files(), [])

    def test_keyboard_interrupt_propagates_sys_exit_does_not(self):
        r = export([f"{MODELS}:InterruptInConstructor", "--input", "2x4", "-o", "m"],
                   self.dir)
        # Python's own ending for an uncaught KeyboardInterrupt: killed by SIGINT.
        self.assertIn(r.returncode, (-2, 130), r.stderr)
        self.assertIn("KeyboardInterrupt", r.stderr)
        self.assertNotIn("overlap_export: import:", r.stderr)
        self.assertEqual(self.files(), [])
        r = export([f"{MODELS}:ExitInConstructor", "--input", "2x4", "-o", "m"], self.dir)
        self.assertOneLineError(r, 1, "sys.exit(3)")


class StateTest(Base):
    """Every tensor an AOT graph reads is a parameter, a buffer, an input or a constant whose
    value is written (docs/interop.md)."""

    def _graph(self, prefix, which):
        with open(self.path(f"{prefix}.{which}.json")) as f:
            return json.load(f)

    def test_parameter_read_as_a_constant_is_refused(self):
        r = export([MODELS + ":cached_weight", "--input", "2x4", "--aot", "-o", "m"], self.dir)
        self.assertOneLineError(r, 1, "aot:", "parameter 'w' as a constant")
        self.assertEqual(self.files(), [])

    def test_a_tensor_with_no_value_is_refused(self):
        import torch
        import torch.fx

        from overlap_export import export as ex
        from overlap_export.errors import ExportError
        root = torch.nn.Module()
        root.sub = torch.nn.Module()
        root.sub.table = torch.zeros(3)
        g = torch.fx.Graph()
        x = g.placeholder("x")
        g.output(g.call_function(torch.add, (x, g.get_attr("sub.table"))))
        gm = torch.fx.GraphModule(root, g)
        del gm.sub.table
        with self.assertRaises(ExportError) as e:
            ex._constants(gm, "forward", torch.nn.Linear(2, 2))
        self.assertIn("'sub.table' of sub, which has no value anywhere", str(e.exception))

    def test_constants_are_written_and_bound(self):
        r = export([MODELS + ":with_constant", "--input", "2x4", "--aot", "--loss", "sum",
                    "-o", "m", "--weights", "m.safetensors"], self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        fw = self._graph("m", "forward")
        self.assertFalse([n for n in fw["nodes"] if n["op"] == "get_attr"])
        constants = [n["meta"]["constant"] for n in fw["nodes"]
                     if "constant" in n.get("meta", {})]
        self.assertEqual(len(constants), 1)
        keys = _safetensors_keys(self.path("m.safetensors"))
        self.assertIn("constant/" + constants[0], keys)
        bw = self._graph("m", "backward")
        out = next(n for n in bw["nodes"] if n["op"] == "output")["args"][0]
        placeholders = [n for n in fw["nodes"] if n["op"] == "placeholder"]
        self.assertEqual(len(out), len(placeholders))  # one per forward placeholder
        self.assertIsNone(out[-1])  # the constant's

    def test_rnn_weights_are_parameters_with_gradients(self):
        r = export([MODELS + ":recurrent", "--input", "2x5:int64:11", "--aot", "-o", "m"],
                   self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        fw, bw = self._graph("m", "forward"), self._graph("m", "backward")
        self.assertFalse([n["name"] for n in fw["nodes"] + bw["nodes"] if n["op"] == "get_attr"])
        params = {p["name"] for p in fw["params"]}
        self.assertEqual(len(params), 1 + 2 * 2 * 4 + 4 + 2)  # emb, lstm, gru, head
        graded = {n["meta"]["grad_of"] for n in bw["nodes"] if "grad_of" in n.get("meta", {})}
        self.assertEqual(graded, params)


class StretchTest(Base):
    """Models whose state stretches the export: each exports, its files complete."""

    def _graph(self, prefix, which):
        with open(self.path(f"{prefix}.{which}.json")) as f:
            return json.load(f)

    def test_weight_norm(self):
        # Its computed `weight` has autograd's graph attached (deepcopy refuses it): the
        # float64 reference, the gradient check and the training copy all copy the model.
        r = export([MODELS + ":weight_normed", "--input", "4x4", "--aot", "--loss", "ce",
                    "-o", "m", "--weights", "w.safetensors", "--reference",
                    "--train-data", "t.safetensors", "--train-steps", "2"], self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        keys = _safetensors_keys(self.path("w.safetensors"))
        for name in ("fc1.weight_g", "fc1.weight_v", "fc2.weight_g", "fc2.weight_v"):
            self.assertIn("ref/grad/" + name, keys)
            self.assertIn("ref64/grad/" + name, keys)
        self.assertIn("ref64/param/fc1.weight_v", _safetensors_keys(self.path("t.safetensors")))
        # The fused pair and the whole-tensor norm are written in ops the executor runs.
        targets = {n.get("target") for w in ("forward", "backward")
                   for n in self._graph("m", w)["nodes"]}
        self.assertIn("aten.norm.ScalarOpt_dim", targets)
        for fused in ("aten._weight_norm_interface.default",
                      "aten._weight_norm_interface_backward.default", "aten.norm.Scalar"):
            self.assertNotIn(fused, targets)

    def test_backward_constants_are_bound(self):
        r = export([MODELS + ":label_smoothing", "--input", "2x4", "--aot", "-o", "m",
                    "--weights", "w.safetensors"], self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        fw, bw = self._graph("m", "forward"), self._graph("m", "backward")
        # Which torch captured the pair, and how (docs/format.md's `producer`).
        for doc in (fw, bw):
            self.assertEqual(doc["producer"]["capture"], "aot_autograd")
            self.assertRegex(doc["producer"]["torch"], r"^\d+\.\d+\.\d+")
        self.assertFalse([n["name"] for n in fw["nodes"] + bw["nodes"] if n["op"] == "get_attr"])
        constants = {n["name"]: n["meta"]["constant"] for n in fw["nodes"]
                     if "constant" in n.get("meta", {})}
        keys = _safetensors_keys(self.path("w.safetensors"))
        for key in constants.values():
            self.assertIn("constant/" + key, keys)
        # The backward reads its constants as saved values: forward outputs after the loss,
        # backward placeholders of the same names, before the tangent. torch 1.13 saves the
        # smoothing's two weights themselves, torch 2.x their lift_fresh_copy.
        fw_saved = [a[1:] for a in next(n for n in fw["nodes"] if n["op"] == "output")["args"][0]]
        bw_inputs = [n["name"] for n in bw["nodes"] if n["op"] == "placeholder"]
        lifted = {n["name"] for n in fw["nodes"] if n.get("target") == "aten.lift_fresh_copy.default"
                  and n["args"] and n["args"][0][1:] in constants}
        read = [name for name in bw_inputs if name in constants or name in lifted]
        self.assertGreaterEqual(len(read), 1, bw_inputs)
        for name in read:
            self.assertIn(name, fw_saved)
            self.assertLess(bw_inputs.index(name), bw_inputs.index("tangents_1"))
        bw_out = next(n for n in bw["nodes"] if n["op"] == "output")["args"][0]
        self.assertEqual(len(bw_out), len([n for n in fw["nodes"] if n["op"] == "placeholder"]))

    def export_references(self, model):
        """Exports tiny_models' `model` with --reference and two steps of --train-data (w.
        and t.safetensors); asserts it exits 0 without a traceback."""
        r = export([MODELS + ":" + model, "--input", "4x4", "--aot", "--loss", "mse",
                    "-o", "m", "--weights", "w.safetensors", "--reference",
                    "--train-data", "t.safetensors", "--train-steps", "2"], self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        return r

    def test_float32_inside(self):
        # The model casts to float32 (`x.float()`) inside: its float64 copy computes those
        # ops in float64 (as `exec --double` does), says so once, and writes ref64/ and the
        # nudged run's ref64p/ in float64. Without the substitution the copy's first layer
        # would meet a float32 input against float64 weights and fail.
        r = self.export_references("float32_inside")
        notes = lines(r.stderr)
        self.assertEqual(len(notes), 1, r.stderr)
        self.assertIn("reference: the model asks for float32 (or float16 / bfloat16) results "
                      "inside", notes[0])
        self.assertIn("its float64 reference computes them in float64", notes[0])
        from overlap_export import compare as cmp
        for f, key in (("w.safetensors", "loss"), ("t.safetensors", "loss/1")):
            ref = cmp.read(self.path(f))
            for prefix in ("ref", "ref64", "ref64p"):
                self.assertIn(f"{prefix}/{key}", ref, f)
            self.assertEqual(ref[f"ref64/{key}"].dtype, np.float64, f)
            self.assertEqual(ref[f"ref/{key}"].dtype, np.float32, f)
            # float64 and float32 agree to float32's rounding, and the nudge moves the
            # float64 loss by about its own size (1e-15 relative), not float32's.
            wide, nudged = float(ref[f"ref64/{key}"]), float(ref[f"ref64p/{key}"])
            self.assertAlmostEqual(float(ref[f"ref/{key}"]) / wide, 1.0, delta=1e-5)
            self.assertLess(abs(nudged - wide), 1e-12 * abs(wide), f)


    def test_float64_copy_fails(self):
        # A model that refuses float64 inputs: a note naming the construct, no ref64/ (nor
        # ref64p/), and the rest written.
        r = self.export_references("float32_only")
        notes = [n for n in lines(r.stderr) if "float64" in n]  # fx's trace notes aside
        self.assertEqual([n.split(":")[1].strip() for n in notes], ["reference", "train"],
                         r.stderr)
        for note in notes:
            self.assertIn("the model's float64 copy fails, so no float64 reference (ref64/) "
                          "is written", note)
            self.assertIn("TypeError: Float32Only takes float32 inputs, not torch.float64", note)
        for f in ("w.safetensors", "t.safetensors"):
            keys = _safetensors_keys(self.path(f))
            self.assertFalse([k for k in keys if k.startswith(("ref64/", "ref64p/"))], f)
            self.assertTrue([k for k in keys if k.startswith("ref/")], f)


class RefusedTest(Base):
    """What the exporter refuses is one line naming the model's module, its method and the
    construct: exit 1, no traceback, no file."""

    def test_data_dependent_control_flow(self):
        construct = ("model.blocks.1 (Router.forward): data-dependent control flow "
                     "(`if x.sum() > 0:`) cannot be traced")
        r = export([MODELS + ":routed", "--input", "2x4", "-o", "m"], self.dir)
        self.assertOneLineError(r, 1, "overlap_export: trace: torch.fx cannot trace it "
                                      "symbolically: " + construct, "torch.where")
        # With --aot: torch.fx's note, then the AOT trace's error.
        r = export([MODELS + ":routed", "--input", "2x4", "--aot", "-o", "m"], self.dir)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertEqual(len(lines(r.stderr)), 2, r.stderr)
        self.assertIn("taking the AOT path only", lines(r.stderr)[0])
        self.assertIn("overlap_export: aot: " + construct, lines(r.stderr)[1])
        self.assertEqual(self.files(), [])

    def test_item(self):
        r = export([MODELS + ":item_scale", "--input", "2x4", "--aot", "-o", "m"], self.dir)
        self.assertOneLineError(r, 1, "overlap_export: aot: model (ItemScale.forward): "
                                      "`.item()` (`scale = y.abs().max().item()`) reads a "
                                      "tensor's value into Python")
        self.assertEqual(self.files(), [])

    def test_cached_tensor(self):
        # A tensor cached from an earlier call in a dict attribute: refused naming the module
        # and attribute, with the remedy; in training mode the model computes it, and exports.
        r = export([MODELS + ":cached_bias", "--input", "2x4", "--aot", "--loss", "ce", "-o",
                    "m"], self.dir)
        self.assertOneLineError(r, 1, "overlap_export: aot: the forward reads a tensor that "
                                      "module 'the model' keeps in its attribute 'cache'",
                                "(--train)")
        r = export([MODELS + ":cached_bias", "--input", "2x4", "--aot", "--loss", "ce", "-o",
                    "m", "--train"], self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unexpected_error(self):
        # An output the loss cannot take: no step expects it, so the top level names the
        # exporter's function and the exception, in one line.
        args = [MODELS + ":dict_output", "--input", "2x4", "--aot", "--loss", "ce", "-o", "m"]
        r = export(args, self.dir)
        self.assertOneLineError(r, 1, f"overlap_export: {MODELS}:dict_output: unexpected "
                                      "error in loss_target (export.py:",
                                "AttributeError: 'dict' object has no attribute 'shape'",
                                "--debug shows the traceback")
        self.assertEqual(self.files(), [])
        # For developers: the traceback, then the same line.
        for extra, env in (["--debug"], None), ([], {"OVERLAP_EXPORT_DEBUG": "1"}):
            with self.subTest(extra=extra, env=env):
                r = export(args + extra, self.dir, env)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn("Traceback (most recent call last)", r.stderr)
                self.assertIn("unexpected error in loss_target", lines(r.stderr)[-1])
        r = export([MODELS + ":item_scale", "--input", "2x4", "--aot", "-o", "m", "--debug"],
                   self.dir)
        self.assertIn("Traceback (most recent call last)", r.stderr)
        self.assertIn("overlap_export: aot: model (ItemScale.forward)", lines(r.stderr)[-1])


class OutputPathTest(Base):
    """Findings 2 and 3: output paths checked before the model is loaded (ExitInConstructor
    would exit 1 if it were), all files written or none."""

    BOOBY = f"{MODELS}:ExitInConstructor"

    def test_empty_prefix(self):
        r = export([self.BOOBY, "--input", "2x4", "-o", ""], self.dir)
        self.assertUsageError(r, "-o ''", "it is empty")
        self.assertEqual(self.files(), [])

    def test_prefix_naming_a_folder(self):
        os.mkdir(self.path("out"))
        for prefix in ("out/", "out" + os.sep + os.sep, "out", "."):
            with self.subTest(prefix=prefix):
                r = export([self.BOOBY, "--input", "2x4", "-o", prefix], self.dir)
                self.assertUsageError(r, f"-o '{prefix}'", "prefix")
                self.assertEqual(self.files(), [])

    def test_adamw_data_needs_train_data(self):
        r = export([self.BOOBY, "--input", "2x4", "-o", "m", "--adamw-data", "a.safetensors"],
                   self.dir)
        self.assertUsageError(r, "--adamw-data needs --train-data")
        r = export([self.BOOBY, "--input", "2x4", "-o", "m", "--train-data", "t.safetensors",
                    "--adamw-data", "t.safetensors"], self.dir)
        self.assertUsageError(r, "--adamw-data 't.safetensors'", "same file")
        self.assertEqual(self.files(), [])

    def test_missing_folders(self):
        cases = [
            (["-o", "m", "--aot", "--weights", "nowhere/w.safetensors"], "--weights",
             "nowhere does not exist"),
            (["-o", "m", "--aot", "--train-data", "nowhere/t.safetensors"], "--train-data",
             "nowhere does not exist"),
            (["-o", "nowhere/m"], "-o", "nowhere does not exist"),
            (["-o", "m", "--weights", "plain/w.safetensors"], "--weights",
             "plain is not a folder"),
        ]
        with open(self.path("plain"), "w"):
            pass
        for args, flag, why in cases:
            with self.subTest(args=args):
                r = export([self.BOOBY, "--input", "2x4"] + args, self.dir)
                self.assertUsageError(r, flag, why)
                self.assertEqual(self.files(), ["plain"])
        # With a model that loads, still nothing: before, the graph files were written and
        # the weights' write failed.
        r = export([TINY, "--input", "2x4", "--aot", "-o", "m", "--weights",
                    "nowhere/w.safetensors"], self.dir)
        self.assertUsageError(r, "--weights", "nowhere does not exist")
        self.assertEqual(self.files(), ["plain"])

    def test_outputs_that_are_folders(self):
        os.mkdir(self.path("d"))
        os.mkdir(self.path("m.forward.json"))
        os.symlink("d", self.path("link"))
        cases = [(["--weights", "d"], "--weights 'd'"),
                 (["--train-data", "d"], "--train-data 'd'"),
                 (["--weights", "link"], "--weights 'link'"),
                 (["--aot"], "-o 'm.forward.json'")]
        for args, needle in cases:
            with self.subTest(args=args):
                r = export([TINY, "--input", "2x4", "-o", "m"] + args, self.dir)
                self.assertUsageError(r, needle, "folder")
                self.assertEqual(self.files(), [])

    def test_two_outputs_one_file(self):
        r = export([self.BOOBY, "--input", "2x4", "--aot", "-o", "m", "--weights", "m.json"],
                   self.dir)
        self.assertUsageError(r, "--weights 'm.json'", "same file")
        r = export([self.BOOBY, "--input", "2x4", "-o", "m", "--weights", "w",
                    "--train-data", "./w"], self.dir)
        self.assertUsageError(r, "--train-data './w'", "same file")
        self.assertEqual(self.files(), [])

    def test_export_writes_every_file_and_replaces_links(self):
        os.mkdir(self.path("real"))
        with open(self.path("real", "fw.json"), "w") as f:
            f.write("old\n")
        os.symlink(os.path.join("real", "fw.json"), self.path("m.forward.json"))
        os.symlink(os.path.join("real", "w.safetensors"), self.path("w.safetensors"))  # dangling
        r = export([TINY, "--input", "2x4", "--aot", "--weights", "w.safetensors",
                    "--reference", "--train-data", "t.safetensors", "--train-steps", "2",
                    "-o", "m"], self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote m.json, m.forward.json, m.backward.json, w.safetensors, "
                      "t.safetensors", r.stdout)
        self.assertEqual(self.files(), sorted([
            "m.json", "m.forward.json", "m.backward.json", "w.safetensors", "t.safetensors",
            os.path.join("real", "fw.json")]))
        for name in ("m.json", "m.forward.json", "m.backward.json"):
            with open(self.path(name)) as f:
                self.assertEqual(json.load(f)["format"], "overlap-graph")
        # The links gave way to the new files; what they pointed at is untouched (another
        # user's link planted at an output path never redirects the write).
        self.assertFalse(os.path.islink(self.path("m.forward.json")))
        self.assertFalse(os.path.islink(self.path("w.safetensors")))
        with open(self.path("m.forward.json")) as f:
            self.assertIn("aten.", f.read())
        with open(self.path("real", "fw.json")) as f:
            self.assertEqual(f.read(), "old\n")
        self.assertFalse(os.path.exists(self.path("real", "w.safetensors")))
        keys = _safetensors_keys(self.path("w.safetensors"))
        self.assertIn("ref/loss", keys)
        self.assertIn("ref/grad/fc1.weight", keys)
        self.assertIn("ref/param/fc2.bias", _safetensors_keys(self.path("t.safetensors")))

    def test_fifo_written_in_place(self):
        fifo = self.path("weights.fifo")
        os.mkfifo(fifo)
        with open(self.path("got"), "wb") as out:
            reader = subprocess.Popen(["cat", fifo], stdout=out)
        try:
            r = export([TINY, "--input", "2x4", "--aot", "--weights", fifo, "-o", "m"],
                       self.dir)
            try:
                reader.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass  # never opened for writing
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced")
        self.assertIn("param/fc1.weight", _safetensors_keys(self.path("got")))

    def test_devices_written_in_place_and_a_failed_write_leaves_nothing(self):
        null, full = self.path("null"), self.path("full")
        try:  # /dev/null's and /dev/full's twins, so that no real device is at risk
            os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except (PermissionError, OSError) as e:
            self.skipTest(f"cannot make device nodes here: {e}")
        r = export([TINY, "--input", "2x4", "--aot", "--weights", null, "-o", "m"],
                    self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(stat.S_ISCHR(os.lstat(null).st_mode), "the device was replaced")
        for name in ("m.json", "m.forward.json", "m.backward.json"):
            os.unlink(self.path(name))
        with open(self.path("q.json"), "w") as f:
            f.write("old\n")
        # Writing /dev/full fails (ENOSPC): no graph file of the run is left, the earlier
        # q.json is untouched, no temporary file remains.
        r = export([TINY, "--input", "2x4", "--aot", "--weights", full, "-o", "q"],
                    self.dir)
        self.assertOneLineError(r, 1, "overlap_export: write:", full)
        self.assertTrue(stat.S_ISCHR(os.lstat(full).st_mode), "the device was replaced")
        self.assertEqual(self.files(), ["full", "null", "q.json"])
        with open(self.path("q.json")) as f:
            self.assertEqual(f.read(), "old\n")

    def test_write_files_none_on_a_failed_write(self):
        from overlap_export import files as ex
        from overlap_export.errors import ExportError
        with open(self.path("a"), "w") as f:
            f.write("old a\n")
        # The second file's folder is gone: nothing is written, the first keeps its bytes.
        with self.assertRaises(ExportError) as cm:
            ex.write_files([(self.path("a"), b"new a\n"), (self.path("b"), b"b\n"),
                            (self.path("gone", "c"), b"c\n")])
        self.assertIn("gone", str(cm.exception))
        self.assertEqual(self.files(), ["a"])
        with open(self.path("a")) as f:
            self.assertEqual(f.read(), "old a\n")
        ex.write_files([(self.path("a"), b"new a\n"), (self.path("b"), b"b\n")])
        self.assertEqual(self.files(), ["a", "b"])
        with open(self.path("a")) as f:
            self.assertEqual(f.read(), "new a\n")

    def test_outputs_left_uncommitted_leave_nothing(self):
        """A run that fails after staging its first files (the model's training raising
        after its graphs were complete): every path keeps its old bytes, no temporary."""
        from overlap_export import files as ex
        with open(self.path("a"), "w") as f:
            f.write("old a\n")
        with self.assertRaises(RuntimeError):
            with ex.Outputs() as out:
                out.add_bytes(self.path("a"), b"new a\n")
                out.add(self.path("b"), lambda f: f.write(b"b\n"))
                raise RuntimeError("the training failed")
        self.assertEqual(self.files(), ["a"])
        with open(self.path("a")) as f:
            self.assertEqual(f.read(), "old a\n")

    def test_spill_reads_as_to_bytes(self):
        """A Spill's file holds what to_bytes writes (dtypes, shapes, values, metadata), in
        the order added; rollback drops the later tensors and their bytes; a name added
        again is overwritten in place, or refused when its size differs; a pipe gets the
        same bytes as a file."""
        import torch
        from overlap_export import compare as cmp
        from overlap_export import safetensors as st
        tensors = {"b": torch.arange(6, dtype=torch.float64).reshape(2, 3),
                   "a": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
                   "c": torch.ones(3, 4).t(),  # not contiguous
                   "d": torch.tensor([True, False])}
        with open(self.path("whole"), "wb") as f:
            f.write(st.to_bytes(tensors, {"k": "v"}))
        with st.Spill(self.dir) as spill:
            spill.update(tensors)
            mark = spill.mark()
            spill["late"] = torch.zeros(1000)
            spill.rollback(mark)
            spill["b"] = torch.arange(6, 12, dtype=torch.float64).reshape(2, 3)
            with self.assertRaises(st.Unwritable):
                spill["b"] = torch.zeros(7, dtype=torch.float64)
            with self.assertRaises(st.Unwritable):
                spill["z"] = torch.zeros(2, dtype=torch.complex64)
            with open(self.path("spilled"), "wb") as f:
                spill.write_to(f, {"k": "v"})
            r, w = os.pipe()
            with os.fdopen(r, "rb") as src, open(self.path("piped"), "wb") as dst:
                drain = threading.Thread(target=shutil.copyfileobj, args=(src, dst))
                drain.start()
                with os.fdopen(w, "wb") as out:
                    spill.write_to(out, {"k": "v"})
                drain.join()
        self.assertEqual(sorted(f for f in self.files() if f.startswith(".")), [],
                         "the spill's temporary file is removed")
        whole, spilled = cmp.read(self.path("whole")), cmp.read(self.path("spilled"))
        self.assertEqual(sorted(spilled), ["a", "b", "c", "d"])
        for name in "acd":
            np.testing.assert_array_equal(spilled[name], whole[name])
        np.testing.assert_array_equal(spilled["b"], np.arange(6, 12.0).reshape(2, 3))
        with open(self.path("spilled"), "rb") as f:
            spilled_bytes = f.read()
        with open(self.path("piped"), "rb") as f:
            self.assertEqual(f.read(), spilled_bytes)
        n = struct.unpack("<Q", spilled_bytes[:8])[0]
        header = json.loads(spilled_bytes[8:8 + n])
        self.assertEqual(header["__metadata__"], {"k": "v"})
        ends = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
        self.assertEqual(ends[0][0], 0)
        for (_, end), (begin, _) in zip(ends, ends[1:]):
            self.assertEqual(end, begin, "the data is gapless")
        self.assertEqual(ends[-1][1], len(spilled_bytes) - 8 - n)

    def test_a_failed_rename_removes_no_file(self):
        """A rename that fails after another succeeded: the renamed file stays (new), the
        other keeps its old bytes; none is removed (the rollback once unlinked them)."""
        from unittest import mock
        from overlap_export import files as ex
        from overlap_export.errors import ExportError
        for name in ("a", "b"):
            with open(self.path(name), "w") as f:
                f.write(f"old {name}\n")
        real_replace = os.replace
        calls = []

        def replace_once(src, dst):
            calls.append(dst)
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
            real_replace(src, dst)

        with mock.patch.object(ex.os, "replace", replace_once):
            with self.assertRaises(ExportError):
                ex.write_files([(self.path("a"), b"new a\n"), (self.path("b"), b"new b\n")])
        self.assertEqual(self.files(), ["a", "b"])  # and no temporary left
        with open(self.path("a")) as f:
            self.assertEqual(f.read(), "new a\n")
        with open(self.path("b")) as f:
            self.assertEqual(f.read(), "old b\n")


class UsageTest(Base):
    """Finding 4: bad --input and --kwargs are usage errors naming them; finding 6: --help
    says what each loss computes."""

    def test_bad_input_specs(self):
        for spec in ("2xfoo", "2x3:float99", "-1x3", "", "2x3:int64:abc", "2x3:Tensor",
                     "2x3:float32:5", "2x3:int8:1000", "2x3:int64:5:7", "2x"):
            with self.subTest(spec=spec):
                r = export([f"{MODELS}:ExitInConstructor", f"--input={spec}", "-o", "m"],
                           self.dir)
                self.assertUsageError(r, f"--input '{spec}':")
                self.assertEqual(self.files(), [])

    def test_good_input_specs(self):
        r = export([TINY, "--input", "3x4:float64", "-o", "m"], self.dir)
        # float64 into float32 weights
        self.assertOneLineError(r, 1, "overlap_export: forward: model.fc1 (Linear.forward): "
                                      "RuntimeError")
        r = export([TINY, "--input=2x4", "-o", "m"], self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_kwargs_not_an_object(self):
        for kwargs in ("[1]", "3", '"x"', "null"):
            with self.subTest(kwargs=kwargs):
                r = export([f"{MODELS}:ExitInConstructor", "--kwargs", kwargs, "--input",
                            "2x4", "-o", "m"], self.dir)
                self.assertUsageError(r, "--kwargs", "JSON object")
        r = export([TINY, "--kwargs", "{oops", "--input", "2x4", "-o", "m"], self.dir)
        self.assertUsageError(r, "--kwargs is not JSON")
        self.assertEqual(self.files(), [])

    def test_loss_help_says_what_each_loss_computes(self):
        r = export(["--help"], self.dir)
        self.assertEqual(r.returncode, 0)
        text = " ".join(r.stdout.split())
        for needle in ("sum: the sum of all the output's elements", "aten.sum.default",
                       "mse: the mean squared error", "ce: cross-entropy", "none: no loss",
                       "default sum"):
            self.assertIn(needle, text)
        # One loss a line, as the help formatter keeps them.
        starts = [line.strip().split(":")[0] for line in r.stdout.splitlines()]
        for loss in ("sum", "mse", "ce", "none"):
            self.assertIn(loss, starts)
        r = export([f"{MODELS}:ExitInConstructor", "--loss", "l1", "--input", "2x4", "-o",
                    "m"], self.dir)
        self.assertUsageError(r, "--loss", "l1")


class CompareTest(Base):
    """Finding 5: compare's files, missing or malformed, are one-line errors naming them."""

    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="overlap_export_cli_test.")
        r = export([TINY, "--input", "2x4", "--aot", "--weights", "w.safetensors",
                    "--reference", "-o", "m"], cls.shared)
        if r.returncode != 0:
            raise RuntimeError(f"the tiny export failed: {r.stderr}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared, ignore_errors=True)

    def copy(self, name):
        shutil.copy(os.path.join(self.shared, name), self.path(name))

    def write_out(self):
        """The executor's output as `overlap exec --save` would write it: torch's own
        numbers (the loss under the forward's output node, grad:<name>)."""
        import torch
        from overlap_export import compare as cmp, safetensors
        with open(self.path("m.forward.json")) as f:
            graph = json.load(f)
        out = next(n for n in graph["nodes"] if n["op"] == "output")["args"][0]
        ref = cmp.read(self.path("w.safetensors"))
        tensors = {out[0][1:]: torch.tensor(ref["ref/loss"])}
        tensors.update({"grad:" + k[len("ref/grad/"):]: torch.tensor(v.copy())
                        for k, v in ref.items() if k.startswith("ref/grad/")})
        # A bfloat16 tensor (not compared), as the exporter's writer can write: compare
        # reads it (it failed on the dtype code BF16 before).
        tensors["extra"] = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
        with open(self.path("out.safetensors"), "wb") as f:
            f.write(safetensors.to_bytes(tensors))
        self.assertEqual(cmp.read(self.path("out.safetensors"))["extra"].tolist(),
                         [1.5, -2.0, 3.0])

    def test_matching_numbers_pass(self):
        self.copy("m.forward.json")
        self.copy("w.safetensors")
        self.write_out()
        r = compare(["m.forward.json", "w.safetensors", "out.safetensors"], self.dir)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("compare: 5 of 5 tensors within", r.stdout)

    def test_missing_files(self):
        self.copy("m.forward.json")
        self.copy("w.safetensors")
        for args, name in (
                (["m.forward.json", "w.safetensors", "nope.safetensors"], "nope.safetensors"),
                (["nope.json", "w.safetensors", "w.safetensors"], "nope.json"),
                (["--trained", "w.safetensors", "nope.safetensors"], "nope.safetensors"),
                (["--trained", "w.safetensors", "w.safetensors", "--losses", "nope.log"],
                 "nope.log")):
            with self.subTest(args=args):
                r = compare(args, self.dir)
                self.assertOneLineError(r, 1, f"compare: {name}:", "No such file")

    def test_malformed_files(self):
        self.copy("m.forward.json")
        self.copy("w.safetensors")
        with open(self.path("w.safetensors"), "rb") as f:
            good = f.read()
        header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 80]}})
        bad = {
            "empty": b"",
            "short": b"\x01\x02",
            "truncated": good[:40],
            "text": b"this is not a safetensors file at all",
            "offsets": struct.pack("<Q", len(header)) + header.encode() + b"\0" * 8,
            "graph.json": b"{not json",
            "nodes.json": b'{"nodes": []}',
        }
        for name, data in bad.items():
            with open(self.path(name), "wb") as f:
                f.write(data)
        os.mkdir(self.path("folder"))
        for name in ("empty", "short", "truncated", "text", "offsets", "folder"):
            with self.subTest(name=name):
                r = compare(["m.forward.json", "w.safetensors", name], self.dir)
                self.assertOneLineError(r, 1, f"compare: {name}:")
        for name in ("graph.json", "nodes.json", "w.safetensors"):
            with self.subTest(name=name):
                r = compare([name, "w.safetensors", "w.safetensors"], self.dir)
                self.assertOneLineError(r, 1, f"compare: {name}:")
        r = compare(["--trained", "w.safetensors"], self.dir)
        self.assertUsageError(r, "--trained takes DATA OUT")


class SpreadTest(Base):
    """compare --float64's spread clause: a tensor further than the tolerance from torch's
    float64 result passes when it is within ten times torch's own float64 spread (ref64p/,
    the run on nudged inputs), and fails without ref64p/ or beyond ten times it."""

    def write(self, name, tensors):
        import torch
        from overlap_export import safetensors
        with open(self.path(name), "wb") as f:
            f.write(safetensors.to_bytes({k: torch.tensor(v, dtype=torch.float64)
                                          for k, v in tensors.items()}))

    def run_case(self, ours_w, nudged_w):
        data = {"param/v": [0.0, 0.0], "param/w": [0.0, 0.0],
                "ref/param/v": [1.0, -1.0], "ref/param/w": [1e-3, 0.0],
                "ref64/param/v": [1.0, -1.0], "ref64/param/w": [1e-3, 0.0]}
        if nudged_w is not None:
            data.update({"ref64p/param/v": [1.0, -1.0], "ref64p/param/w": [nudged_w, 0.0]})
        self.write("d.safetensors", data)
        self.write("o.safetensors", {"v": [1.0, -1.0], "w": [ours_w, 0.0]})
        return compare(["--trained", "d.safetensors", "o.safetensors", "--float64",
                        "--tolerance", "1e-6"], self.dir)

    def test_within_ten_spreads_passes(self):
        r = self.run_case(1e-3 + 5e-6, 1e-3 + 1e-6)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("compare: w (change): 5e-06 off, but torch's float64 moves it 1e-06 "
                      "when its inputs move by a rounding", r.stdout)
        self.assertIn("2 of 2 tensors within 1e-06", r.stdout)
        self.assertIn("1 by float64's spread", r.stdout)

    def test_beyond_ten_spreads_fails(self):
        r = self.run_case(1e-3 + 2e-5, 1e-3 + 1e-6)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("compare: w (change): max|a-b| / the model-wide scale = 2e-05 > 1e-06",
                      r.stdout)

    def test_without_the_nudged_run_fails(self):
        r = self.run_case(1e-3 + 5e-6, None)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("1 of 2 tensors within 1e-06", r.stdout)


def _safetensors_keys(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return set(json.loads(data[8:8 + n]))


if __name__ == "__main__":
    unittest.main()
