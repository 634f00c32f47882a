"""overlap's Python package: each binding on graphs torch gives, errors as exceptions, the
stubs against the module. Run by python_test.sh (bazel test //python:python_test)."""

import ast
import json
import os
import threading
import unittest
import warnings

import torch

import overlap
from overlap import _overlap
from overlap_export import export


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(6))
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def dynamo_graph(model, inputs):
    """The graph torch.compile hands a backend, converted by overlap.from_fx."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(overlap.from_fx(gm, example_inputs, model, name="mlp"))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=backend, fullgraph=True, dynamic=False)(*inputs)
    torch._dynamo.reset()
    return graphs[0]


def aot_pair(model, inputs):
    target = torch.randint(0, 10, (inputs[0].shape[0],))
    fw, bw, _, _ = export.export_aot(model, inputs, "ce", target, "mlp")
    return (overlap.Graph.from_json(json.dumps(fw)), overlap.Graph.from_json(json.dumps(bw)))


def compiled_with(model, rewrite):
    """`model` compiled by AOTAutograd (default partition, graphs run as written) with
    `rewrite(fw, bw, num_fwd_outputs)` run on each partitioned pair; returns the compiled
    model and a list that gets (rewrite's result, fw) per pair."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.partitioners import default_partition
    pairs = []

    def partition(joint, inputs, **kwargs):
        fw, bw = default_partition(joint, inputs, **kwargs)
        pairs.append((rewrite(fw, bw, kwargs["num_fwd_outputs"]), fw))
        return fw, bw

    torch._dynamo.reset()
    return torch.compile(model, backend=aot_autograd(
        fw_compiler=boxed_nop, bw_compiler=boxed_nop, partition_fn=partition,
        keep_inference_input_mutations=True)), pairs


class PythonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.model = Mlp()
        cls.inputs = [torch.randn(4, 64)]
        cls.graph = dynamo_graph(cls.model, cls.inputs)

    def test_from_fx_lifts_parameters(self):
        g = self.graph
        overlap.verify(g)
        self.assertEqual(g.param_names(), [n for n, _ in self.model.named_parameters()])
        self.assertEqual(g.node_names()[-1], "output")
        self.assertIn("<overlap.Graph \"mlp\"", repr(g))
        # The document survives the C++ round trip.
        again = overlap.Graph.from_json(g.to_json())
        self.assertEqual(again.to_json(), g.to_json())

    def test_partition_covers_every_parameter_once(self):
        param_bytes = {n: p.numel() * 4 for n, p in self.model.named_parameters()}
        # torch 1.13's rules ("reference") count module-owned parameters only: a dynamo
        # graph's lifted ones are torch 2.x's ("reference-2x").
        self.assertEqual([p for b in overlap.partition(self.graph, mode="reference")
                          for p in b["params"]], [])
        for mode in ["default", "reference-2x"]:
            buckets = overlap.partition(self.graph, bucket_cap_bytes=40_000,
                                        first_bucket_cap_bytes=20_000, mode=mode)
            seen = [p for b in buckets for p in b["params"]]
            self.assertEqual(sorted(seen), sorted(param_bytes), mode)
            for b in buckets:
                self.assertEqual(b["size_bytes"], sum(param_bytes[p] for p in b["params"]))
            self.assertGreater(len(buckets), 1, mode)
            self.assertEqual([b["index"] for b in buckets], list(range(len(buckets))))

    def test_every_scheduler_orders_the_graph(self):
        names = [s["name"] for s in overlap.schedulers()]
        for expected in ["lookahead", "fast_free", "list", "simple_prefetch"]:
            self.assertIn(expected, names)
        for name in names:
            g = self.graph.copy()
            self.assertTrue(overlap.insert_zero3(g, kind="forward"))
            report = overlap.schedule(g, algorithm=name)
            self.assertEqual(report["algorithm"], name)
            self.assertEqual(report["order"], g.node_names())
            overlap.verify(g)
            # A second simulation of the final graph agrees with the scheduler's report.
            self.assertEqual(overlap.simulate(g), report["simulation"], name)
        self.assertEqual(len(self.graph.copy()), len(self.graph))

    def test_plan_under_a_budget(self):
        fw, bw = aot_pair(self.model, self.inputs)
        for g in (fw, bw):
            overlap.annotate(g)
        overlap.insert_zero3(fw, kind="forward")
        overlap.insert_zero3(bw, kind="backward")
        free = overlap.plan(fw.copy(), bw.copy())
        self.assertTrue(free["fits"])
        budget = free["figures"]["peak_memory_bytes"] - 1
        tight = overlap.plan(fw, bw, budget_bytes=budget)
        if tight["fits"]:
            self.assertLessEqual(tight["figures"]["peak_memory_bytes"], budget)
        else:
            self.assertGreater(tight["min_feasible_bytes"], budget)
        overlap.verify(fw)
        overlap.verify(bw)

    def test_bucket_cap_follows_the_link(self):
        wide = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(8)])
        g = dynamo_graph(wide, [torch.randn(32, 512)])
        total = sum(p.numel() * 4 for p in wide.parameters())
        # Compute-bound everywhere (memory free): device time scales as 1 / peak FLOP/s.
        slow = overlap.annotate(g, overwrite=True, peak_flops_32bit=1e9,
                                memory_bandwidth=1e18)["total_device_time"]
        fast = overlap.annotate(g, overwrite=True, peak_flops_32bit=2e9,
                                memory_bandwidth=1e18)["total_device_time"]
        self.assertAlmostEqual(slow / fast, 2.0, delta=0.01)
        overlap.annotate(g, overwrite=True, peak_flops_32bit=1e9, memory_bandwidth=1e10)

        def choose(latency_s, bandwidth):
            return overlap.choose_bucket_cap(g, world_size=2, latency_s=latency_s,
                                             bandwidth_bytes_per_s=bandwidth)
        thin = choose(0.0, 1e7)  # a layer's all-reduce 0.1 s, its backward 33 ms
        caps = [c["cap_bytes"] for c in thin["candidates"]]
        self.assertEqual(caps, sorted(caps))
        self.assertIn(thin["cap_bytes"], caps)
        best = min(c["exposed_s"] for c in thin["candidates"])
        self.assertEqual(next(c for c in thin["candidates"]
                              if c["cap_bytes"] == thin["cap_bytes"])["exposed_s"], best)
        self.assertLess(thin["cap_bytes"], total)  # buckets that start while backward runs
        # Latency dominates: one all-reduce of everything (the largest useful cap).
        slow_start = choose(10.0, 1e12)
        self.assertGreaterEqual(slow_start["cap_bytes"], total)
        self.assertEqual(slow_start["cap_bytes"], max(caps))
        with self.assertRaises(overlap.InvalidArgumentError):
            choose(0.0, 0.0)
        with self.assertRaisesRegex(overlap.InvalidArgumentError, "peak_flops_32bit"):
            overlap.annotate(g, peak_flops_32bit=-1.0)
        import overlap.torch as overlap_torch
        with self.assertRaisesRegex(ValueError, "split=False"):
            overlap_torch.ddp(bucket_cap_bytes="auto")
        with self.assertRaisesRegex(ValueError, "byte count"):
            overlap_torch.ddp(bucket_cap_bytes="big", split=False)
        with self.assertRaisesRegex(ValueError, "latency_s"):
            overlap_torch.ddp(bucket_cap_bytes="auto", split=False, link=(-1.0, 1e9))

    def test_forward_times_leave_the_module_as_it_was(self):
        from overlap import torch as overlap_torch
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                                  torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Flatten(),
                                  torch.nn.Linear(288, 4))
        seen = []

        def backend(gm, example_inputs):
            seen.append((gm, example_inputs))
            return gm.forward

        torch._dynamo.reset()
        torch.compile(net, backend=backend, dynamic=False)(torch.randn(2, 3, 8, 8))
        torch._dynamo.reset()
        gm, example_inputs = seen[0]
        before = {k: v.clone() for k, v in net.state_dict().items()}
        rng = torch.get_rng_state()
        times = overlap_torch._forward_times(gm, example_inputs, torch.device("cpu"))
        self.assertTrue(torch.equal(torch.get_rng_state(), rng))
        # Batch norm's running statistics (updated in place by a training forward) are as
        # they were: the timed runs read clones; dropout's draws left the stream as it was.
        for k, v in net.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)
        calls = [n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
        self.assertEqual(sorted(times), sorted(calls))
        self.assertTrue(all(t > 0 for t in times.values()))
        g = overlap_torch._with_device_times(overlap.from_fx(gm, example_inputs, net), times)
        doc = json.loads(g.to_json())
        timed = {n["name"]: n["meta"]["device_time"] for n in doc["nodes"]}
        for name in calls:
            self.assertEqual(timed[name], times[name])

    def test_forward_times_write_no_parameter(self):
        from overlap import torch as overlap_torch

        def scaled(w, x):
            w.mul_(2.0)  # a graph that writes a parameter in place
            return torch.relu(x @ w)

        gm = torch.fx.symbolic_trace(scaled)
        w = torch.nn.Parameter(torch.ones(4, 4))
        self.assertTrue(any(overlap_torch._mutates(n) for n in gm.graph.nodes))
        self.assertFalse(overlap_torch._has_collectives(gm))
        overlap_torch._forward_times(gm, [w, torch.randn(2, 4)], torch.device("cpu"))
        self.assertTrue(torch.equal(w.detach(), torch.ones(4, 4)))  # timed on a clone

        def reduced(x):
            return torch.ops._c10d_functional.all_reduce(x, "sum", "0")

        self.assertTrue(overlap_torch._has_collectives(torch.fx.symbolic_trace(reduced)))

    def test_errors_are_exceptions_with_the_status(self):
        with self.assertRaises(overlap.InvalidArgumentError) as e:
            overlap.Graph.from_json("{")
        self.assertIsInstance(e.exception, ValueError)
        self.assertIsInstance(e.exception, overlap.Error)
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
        self.assertTrue(str(e.exception))
        with self.assertRaises(overlap.NotFoundError) as e:
            overlap.schedule(self.graph.copy(), algorithm="no_such_scheduler")
        self.assertIsInstance(e.exception, LookupError)
        self.assertIn("lookahead", str(e.exception))  # the message lists the names
        with self.assertRaisesRegex(ValueError, "mode"):
            overlap.partition(self.graph, mode="bogus")
        with self.assertRaisesRegex(ValueError, "world_size"):
            overlap.simulate(self.graph, world_size=0)
        with self.assertRaisesRegex(ValueError, "kind"):
            overlap.insert_zero3(self.graph.copy(), kind="sideways")
        # A graph the verifier refuses names the node.
        doc = json.loads(self.graph.to_json())
        doc["nodes"][1]["args"] = ["%nowhere"]
        with self.assertRaisesRegex(overlap.InvalidArgumentError, doc["nodes"][1]["name"]):
            overlap.Graph.from_json(json.dumps(doc))

    def test_passes_release_the_gil(self):
        # A pass on one thread while another runs Python: both finish, with equal results.
        results = []
        g = self.graph.copy()
        overlap.insert_zero3(g, kind="forward")
        threads = [threading.Thread(target=lambda: results.append(
            overlap.schedule(g.copy())["order"])) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 4)
        self.assertTrue(all(r == results[0] for r in results))

    def test_ddp_backend_compiles_whole_what_it_cannot_convert(self):
        import warnings

        import overlap.torch as overlap_torch
        from overlap_export.errors import ExportError

        def refuse(*args, **kwargs):
            raise ExportError("arguments", "an argument of type Weird")

        saved = overlap_torch.from_fx
        overlap_torch.from_fx = refuse
        try:
            backend = overlap_torch.ddp("reference", backend="eager")
            torch._dynamo.reset()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = torch.compile(self.model, backend=backend)(*self.inputs)
            torch._dynamo.reset()
        finally:
            overlap_torch.from_fx = saved
            torch._dynamo.config.optimize_ddp = True
        self.assertEqual(backend.splits, [None])
        self.assertTrue(any("compiled whole" in str(w.message) and "Weird" in str(w.message)
                            for w in caught))
        self.assertTrue(torch.allclose(out, self.model(*self.inputs)))

    def test_insert_allreduces_flattens_each_bucket(self):
        """A bucket of one dtype becomes its gradients copied into its kept buffer, each right
        after the node that computes it (and scaled on the way), and one in-place
        all_reduce_ of the filled buffer, which the outputs view; a bucket of two dtypes one
        buffer each. Run on a one-rank gloo group with
        world_size 2: each output is its gradient / 2; with world_size 3 each is its
        gradient times 1 / 3 to the bit, DDP's reducer's arithmetic (a division by 3
        differs in the last bit for some values)."""
        import torch.distributed as dist
        from torch.fx.experimental.proxy_tensor import make_fx

        import overlap.torch as overlap_torch

        def grads(a, b, c):
            return a * 2, b + 1, c.double() * 3, (a + 1).t()

        args = [torch.randn(3, 4), torch.randn(5), torch.randn(2, 2)]
        expected = grads(*args)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            group = dist.group.WORLD.group_name
            for buckets, reduces, cats in (([[0, 1, 3]], 1, 1), ([[1, 0], [3, 2]], 3, 1)):
                gm = make_fx(grads)(*args)
                issued = overlap_torch.insert_allreduces(gm, buckets, group, 2)
                self.assertEqual(issued, reduces)
                targets = [n.target for n in gm.graph.nodes]
                self.assertEqual(targets.count(torch.ops._c10d_functional.all_reduce_.default),
                                 reduces)
                self.assertEqual(targets.count(overlap_torch._filled), cats)
                for n in gm.graph.nodes:
                    if n.target is overlap_torch._place:  # right after its gradient
                        self.assertIs(n.prev, n.args[4])
                got = gm(*args)
                bucketed = {i for b in buckets for i in b}
                for i, (g, e) in enumerate(zip(got, expected)):
                    self.assertEqual(g.shape, e.shape)
                    self.assertEqual(g.dtype, e.dtype)
                    torch.testing.assert_close(g, e / 2 if i in bucketed else e)
            # A bucket's buffer is kept across steps while nothing else holds it; a step
            # whose gradients are still held (a .grad kept) gets a new one.
            gm = make_fx(grads)(*args)
            overlap_torch.insert_allreduces(gm, [[0, 1, 3]], group, 2)
            first = gm(*args)
            kept = first[0].untyped_storage().data_ptr()
            second = gm(*args)
            again = second[0].untyped_storage().data_ptr()
            self.assertNotEqual(again, kept)
            torch.testing.assert_close(first[0], expected[0] / 2)
            del first, second
            third = gm(*args)
            self.assertEqual(third[0].untyped_storage().data_ptr(), again)  # reused
            self.assertEqual(len(gm.bucket_buffers.buffers), 1)
            torch.testing.assert_close(third[1], expected[1] / 2)
            # Two parameters whose gradients are one node (a graph output twice).
            def shared(a, b):
                t = a * 2
                return t, b + 1, t
            sgm = make_fx(shared)(args[0], args[1])
            overlap_torch.insert_allreduces(sgm, [[0, 2, 1]], group, 2)
            for g, e in zip(sgm(args[0], args[1]), shared(args[0], args[1])):
                torch.testing.assert_close(g, e / 2, rtol=0, atol=0)
            # A step that failed midway (one gradient placed) leaves a partial fill: the
            # next step starts a new one, and decides afresh whether the buffer is free (a
            # view of it held since: a new buffer); an all-reduce of a partial fill is
            # refused.
            del third
            pool = gm.bucket_buffers
            pool.place("0", 1, ((3, 4), (5,), (4, 3)), torch.zeros(5), 0.5)
            held = pool.buffers["0"][0][:1]
            fourth = gm(*args)
            self.assertNotEqual(fourth[0].untyped_storage().data_ptr(),
                                held.untyped_storage().data_ptr())
            torch.testing.assert_close(fourth[1], expected[1] / 2)
            pool.place("0", 1, ((3, 4), (5,), (4, 3)), torch.zeros(5), 0.5)
            with self.assertRaisesRegex(RuntimeError, "bucket 0: 1 of 3 gradients placed"):
                pool.filled("0", 3)

            # Graph inputs returned as gradients (tangents), two dtype groups whose
            # bucket's last gradient is in the group placed second, and a gradient of no
            # static shape (its own all-reduce): every output its gradient / 2.
            def mixed(t, u, a, c):
                return t, a * 2, c.double() * 3, u, a + 1, a.sum()

            mixed_args = [torch.randn(3), torch.randn(2), torch.randn(4), torch.randn(2)]
            mgm = make_fx(mixed)(*mixed_args)
            for n in mgm.graph.nodes:  # the sum's shape unknown, as a symbolic one would be
                if n.target == torch.ops.aten.sum.default:
                    del n.meta["val"]
            overlap_torch.insert_allreduces(mgm, [[0, 1, 3, 4, 5, 2]], group, 2)
            for g, e in zip(mgm(*mixed_args), mixed(*mixed_args)):
                torch.testing.assert_close(g, e / 2, rtol=0, atol=0)
            gm = make_fx(grads)(*args)
            overlap_torch.insert_allreduces(gm, [[0, 1, 3], [2]], group, 3)
            aten = torch.ops.aten
            self.assertFalse(any(n.target in (aten.div.Scalar, aten.div_.Scalar, aten.cat.default)
                                 for n in gm.graph.nodes))
            for g, e in zip(gm(*args), expected):
                torch.testing.assert_close(g, e * (1 / 3), rtol=0, atol=0)
            self.assertFalse(all(torch.equal(e * (1 / 3), e / 3) for e in expected))
        finally:
            dist.destroy_process_group()

    def test_contention_is_measured_and_survives_a_failed_run(self):
        """_contention (auto's compute_slowdown) on a one-rank gloo group leaves the
        module's buffers as they were; a run that fails anywhere (the warm-up, a run beside
        the all-reduces, a later run alone) warns, counts 0, and the rank still issues as
        many all-reduces as a rank whose runs succeed (the other ranks' count: no hang)."""
        import torch.distributed as dist

        import overlap.torch as overlap_torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).train()
        seen = []

        def backend(gm, example_inputs):
            seen.append((gm, example_inputs))
            return gm.forward

        torch._dynamo.reset()
        torch.compile(model, backend=backend, dynamic=False)(torch.randn(4, 8))
        torch._dynamo.reset()
        gm, example_inputs = seen[0]
        before = model[1].running_mean.clone()
        issued = []
        saved_reduce, saved_run = dist.all_reduce, overlap_torch._Outside.run

        def counted(*args, **kwargs):
            issued.append(kwargs.get("async_op", False))
            return saved_reduce(*args, **kwargs)

        def measure(fail_at=None):
            runs = []

            def run(self, *args):
                runs.append(1)
                if len(runs) - 1 == fail_at:
                    raise ValueError("broken forward")
                return saved_run(self, *args)
            issued.clear()
            overlap_torch._Outside.run = run
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    s = overlap_torch._contention(gm, example_inputs, group,
                                                  torch.device("cpu"), (1e-5, 1e9), 1e-3)
            finally:
                overlap_torch._Outside.run = saved_run
            return s, sum(issued), [str(w.message) for w in caught]

        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        dist.all_reduce = counted
        try:
            group = dist.group.WORLD
            s, count, _ = measure()
            self.assertGreater(count, 0)
            self.assertTrue(torch.equal(model[1].running_mean, before))
            for fail_at in (0, 2, 5):  # warm-up; beside, round 1; alone, round 3
                s, failed_count, messages = measure(fail_at)
                self.assertEqual(s, 0.0)
                self.assertEqual(failed_count, count, fail_at)
                self.assertTrue(any("broken forward" in m for m in messages))
        finally:
            dist.all_reduce = saved_reduce
            dist.destroy_process_group()

    def test_one_graph_compiles_without_aot_autograds_cache(self):
        """AOTAutograd's cache keys on dynamo's graph, not on the backward's rewrite: the one
        graph compiles with it off (both inner backends), and leaves it as it was."""
        import torch.distributed as dist
        import torch._inductor.compile_fx as cfx
        import torch._dynamo.backends.common as common
        from torch._functorch import config as functorch_config

        import overlap.torch as overlap_torch
        seen, captured = {}, []

        def capture(gm, example_inputs):
            captured.append((gm, example_inputs))
            return gm.forward

        torch._dynamo.reset()
        torch.compile(torch.nn.Linear(4, 4), backend=capture)(torch.randn(2, 4))
        torch._dynamo.reset()
        gm, example_inputs = captured[0]

        def fake_compile_fx(gm, inputs, inner_compile=None):
            seen["inductor"] = functorch_config.enable_autograd_cache
            return gm.forward

        def fake_aot_autograd(**kwargs):
            def compile_with(gm, inputs):
                seen["aot_eager"] = functorch_config.enable_autograd_cache
                return gm.forward
            return compile_with

        before = functorch_config.enable_autograd_cache
        saved = cfx.compile_fx, common.aot_autograd
        cfx.compile_fx, common.aot_autograd = fake_compile_fx, fake_aot_autograd
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            for backend in ("inductor", "aot_eager"):
                overlap_torch.ddp(split=False, backend=backend)(gm, example_inputs)
        finally:
            cfx.compile_fx, common.aot_autograd = saved
            dist.destroy_process_group()
            torch._dynamo.config.optimize_ddp = True
        self.assertEqual(seen, {"inductor": False, "aot_eager": False})
        self.assertEqual(functorch_config.enable_autograd_cache, before)

    def test_insert_allreduces_divides_the_tangents(self):
        """divide="tangents": a backward that returns only bucketed gradients gets its
        tangent divided (one division in the graph, no scaling per bucket); a lone gradient
        that aliases a value later nodes read is copied before the in-place reduction. A
        gradient outside the buckets turns it back to a scaling per bucket. One-rank gloo
        group, world_size 2."""
        import torch.distributed as dist
        from torch.fx.experimental.proxy_tensor import make_fx

        import overlap.torch as overlap_torch

        def backward(w, tangents):
            # tangents (the bias's gradient) is read again after it is returned.
            return tangents, (tangents * w).sum(0), (tangents * 3).t()

        args = [torch.randn(4, 3), torch.randn(4, 3)]
        expected = backward(*args)
        aten = torch.ops.aten
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            group = dist.group.WORLD.group_name
            for buckets, divisions in (([[0], [1, 2]], 1), ([[0], [1]], 2)):
                gm = make_fx(backward)(*args)
                self.assertTrue(any(str(n.target).startswith("tangents")
                                    for n in gm.graph.nodes if n.op == "placeholder"))
                overlap_torch.insert_allreduces(gm, buckets, group, 2, divide="tangents")
                nodes = list(gm.graph.nodes)
                scaled = {n.args[1] for n in nodes
                          if n.target is overlap_torch._place and n.args[5] is not None}
                self.assertEqual(len(scaled) + sum(
                    n.target == aten.div.Scalar
                    or n.target == aten.mul.Tensor and n.args[1] == 0.5 for n in nodes),
                    divisions)
                got = gm(*args)
                bucketed = {i for b in buckets for i in b}
                for i, (g, e) in enumerate(zip(got, expected)):
                    torch.testing.assert_close(g, e / 2 if i in bucketed else e, rtol=0,
                                               atol=0)
        finally:
            dist.destroy_process_group()

    def test_update_buffers_in_place(self):
        # Batch norm's running statistics and batch counter updated in place in the AOT
        # forward: the same buffers, outputs and gradients as eager, to the bit, over steps
        # (a second step reads what the first wrote), and with two forwards before one
        # backward (nothing saved that the second forward writes). A buffer the model also
        # reads elsewhere is left to AOTAutograd's copy.
        import copy

        import overlap.torch as overlap_torch

        class Peeks(torch.nn.Module):  # reads its norm's running mean after the update
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)
                self.bn = torch.nn.BatchNorm2d(4)

            def forward(self, x):
                y = self.bn(self.conv(x))
                return y + self.bn.running_mean.view(1, -1, 1, 1)

        def net():
            return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                       torch.nn.ReLU6(inplace=True), torch.nn.Conv2d(4, 4, 1),
                                       torch.nn.BatchNorm2d(4), torch.nn.Flatten())

        for make, expected in ((net, 6), (Peeks, 1)):
            torch.manual_seed(0)
            model = make()
            reference = copy.deepcopy(model)
            compiled, pairs = compiled_with(model, overlap_torch.update_buffers_in_place)
            for step in range(4):
                x = torch.randn(2, 3, 8, 8)
                got, want = compiled(x), reference(x)
                self.assertTrue(torch.equal(got, want))
                if step == 3:  # a second forward before the backward
                    x = torch.randn(2, 3, 8, 8)
                    got, want = got + compiled(x), want + reference(x)
                    self.assertTrue(torch.equal(got, want))
                got.square().sum().backward()
                want.square().sum().backward()
            self.assertEqual([n for n, _ in pairs], [expected], make.__name__)
            for (name, a), b in zip(model.state_dict().items(),
                                    reference.state_dict().values()):
                self.assertTrue(torch.equal(a, b), name)
            for a, b in zip(model.parameters(), reference.parameters()):
                self.assertTrue(torch.equal(a.grad, b.grad))
        torch._dynamo.reset()

    def test_save_results_of_hardtanh(self):
        # An in-place ReLU6 saves its result instead of a copy of its input, and writes in
        # place again: the same outputs and gradients as eager, to the bit (values beyond
        # both bounds). An in-place SiLU, whose backward needs its input, keeps the copy; a
        # ReLU6 whose input is read again loses the copy but is not written in place.
        class ReadsInput(torch.nn.Module):
            def __init__(self, inplace=True):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)
                self.act = torch.nn.ReLU6(inplace=inplace)

            def forward(self, x):
                y = self.conv(x)
                twice = y * 2
                return self.act(y) + twice

        import copy

        import overlap.torch as overlap_torch

        aten = torch.ops.aten

        def chain(act):
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), act(inplace=True),
                torch.nn.Conv2d(4, 4, 1), act(inplace=True), torch.nn.Conv2d(4, 4, 1))

        for make, expected, inplace in ((lambda: chain(torch.nn.ReLU6), 2, 2),
                                        (lambda: chain(torch.nn.SiLU), 0, 0),
                                        (ReadsInput, 1, 0)):
            torch.manual_seed(0)
            model = make()
            reference = copy.deepcopy(model)
            compiled, pairs = compiled_with(model, overlap_torch.save_results_of_hardtanh)
            for _ in range(3):
                x = torch.randn(2, 3, 8, 8) * 8
                got, want = compiled(x), reference(x)
                self.assertTrue(torch.equal(got, want))
                got.square().sum().backward()
                want.square().sum().backward()
            for a, b in zip(model.parameters(), reference.parameters()):
                self.assertTrue(torch.equal(a.grad, b.grad))
            (removed, fw), = pairs
            self.assertEqual(removed, expected)
            targets = [n.target for n in fw.graph.nodes]
            self.assertEqual(targets.count(aten.hardtanh_.default), inplace)
            self.assertEqual(targets.count(aten.clone.default),
                             0 if make is ReadsInput else 2 - expected)
        torch._dynamo.reset()

    def test_keep_freed_memory(self):
        # Each case in a fresh interpreter: the setting is process-wide and sticks. Three
        # 30 MiB blocks, written and freed: kept, the process stays resident with them; with
        # glibc's defaults they are given back whatever its dynamic thresholds reached (each
        # block mapped on its own, or 90 MiB free at the heap's top, above the trim
        # threshold's largest dynamic value, 64 MiB).
        child = """
import ctypes, json, os, sys
import torch
from overlap import _memory
page = os.sysconf("SC_PAGE_SIZE")
def resident():
    return int(open("/proc/self/statm").read().split()[1]) * page
kept = {"cpu": lambda: _memory.keep_for([1, torch.zeros(1)]),
        "none": lambda: _memory.keep_for([1, "x", torch.zeros(1, device="meta")]),
        "call": _memory.keep_freed_memory}[sys.argv[1]]()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
n = 30 << 20
blocks = [libc.malloc(n) for _ in range(3)]
for b in blocks:
    ctypes.memset(b, 1, n)
before = resident()
for b in blocks:
    libc.free(b)
print(json.dumps({"kept": kept, "given_back": before - resident()}))
"""
        import subprocess
        import sys

        def run(case, **env):
            base = {k: v for k, v in os.environ.items()
                    if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
            out = subprocess.run([sys.executable, "-c", child, case], env={**base, **env},
                                 capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout.strip().splitlines()[-1])

        for case in ("cpu", "call"):
            got = run(case)
            self.assertTrue(got["kept"], case)
            self.assertLess(got["given_back"], 8 << 20, case)
        got = run("none")  # no CPU tensor: the allocator as it comes
        self.assertFalse(got["kept"])
        self.assertGreater(got["given_back"], 60 << 20)
        # The user's own settings win, and are not overridden.
        got = run("call", MALLOC_TOP_PAD_="0")
        self.assertFalse(got["kept"])
        self.assertGreater(got["given_back"], 60 << 20)
        self.assertFalse(run("call", GLIBC_TUNABLES="glibc.malloc.trim_threshold=0")["kept"])
        self.assertFalse(run("call", LD_PRELOAD="libjemalloc.so.2")["kept"])

    def test_stubs_match_the_module(self):
        stub = os.path.join(os.path.dirname(overlap.__file__), "_overlap.pyi")
        tree = ast.parse(open(stub).read())
        typed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        dicts = {n.name for n in tree.body if isinstance(n, ast.ClassDef)
                 and any(getattr(b, "id", "") == "TypedDict" for b in n.bases)}
        public = {n for n in dir(_overlap) if not n.startswith("_")}
        self.assertEqual(typed - dicts, public)
        for name in public:
            self.assertIn(name, overlap.__all__)


if __name__ == "__main__":
    unittest.main(verbosity=2)
