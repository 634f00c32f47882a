"""overlap inside torch.compile (docs/torch.md).

    model = DistributedDataParallel(net)
    compiled = torch.compile(model, backend=overlap.torch.ddp(mode="reference"))

`ddp()` is a torch.compile backend that takes DDPOptimizer's place: it splits the graph
dynamo captured at gradient-bucket boundaries chosen by overlap's partitioner and compiles
each piece with an inner backend, so that DDP's reducer can all-reduce a bucket's gradients
while the backward of the pieces before it still runs.
"""

import math
import operator
import time
import warnings

import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from . import _overlap
from ._memory import keep_for, keep_freed_memory  # noqa: F401 - keep_freed_memory: public
from .fx import from_fx

MODES = {"reference": "reference-2x", "default": "default"}
_DEFAULT_BUCKET_CAP_BYTES = 25 * 1024 * 1024  # DistributedDataParallel's bucket_cap_mb=25


def _exporter_error():
    """overlap_export's ExportError (what from_fx raises for a graph it cannot write)."""
    from .fx import _exporter
    _exporter()
    from overlap_export.errors import ExportError
    return ExportError


def _inner(backend):
    """The callable of a torch.compile backend given by name ("inductor", "aot_eager",
    "eager", ...) or as a callable."""
    if callable(backend):
        return backend
    from torch._dynamo.backends.registry import lookup_backend
    return lookup_backend(backend)


class _LazyPiece(torch.nn.Module):
    """One piece of the split graph, compiled by the inner backend on its first call, with
    that call's (real) arguments as the example inputs: the pieces' inputs are only known
    once the pieces before them ran. Later calls run the compiled code."""

    def __init__(self, piece, compile_fn):
        super().__init__()
        # Backends built on AOTAutograd take graphs that return a tuple; split_module's
        # pieces return a lone value bare.
        out = next(n for n in reversed(piece.graph.nodes) if n.op == "output")
        self.single = not isinstance(out.args[0], (tuple, list))
        if self.single:
            out.args = ((out.args[0],),)
            piece.recompile()
        self.piece = piece
        self.compile_fn = compile_fn
        self.compiled = None

    def forward(self, *args):
        if self.compiled is None:
            self.compiled = self.compile_fn(self.piece, list(args))
        result = self.compiled(*args)
        return result[0] if self.single else result


class DdpBackend:
    """The backend `ddp()` returns. `splits` records, per graph compiled, the parameters of
    each piece in order (placeholder names, as DDPOptimizer records them): what tests and
    users inspect."""

    def __init__(self, mode, backend, bucket_cap_bytes, first_bucket_cap_bytes, link=None,
                 keep_memory=True):
        if mode not in MODES:
            raise ValueError(f"overlap.torch.ddp: mode {mode!r} is not one of "
                             f"{', '.join(MODES)}")
        if isinstance(bucket_cap_bytes, str) and bucket_cap_bytes != "auto":
            raise ValueError(f"overlap.torch.ddp: bucket_cap_bytes is a byte count or "
                             f"\"auto\", not {bucket_cap_bytes!r}")
        if link is not None:
            if len(link) != 2 or not link[0] >= 0 or not link[1] > 0:
                raise ValueError(f"overlap.torch.ddp: link is (latency_s >= 0, "
                                 f"bandwidth_bytes_per_s > 0), not {link!r}")
            link = (float(link[0]), float(link[1]))
        self.mode = mode
        self.backend = backend
        self.compile_fn = _inner(backend)
        self.bucket_cap_bytes = bucket_cap_bytes
        self.first_bucket_cap_bytes = first_bucket_cap_bytes
        self.link = link
        self.keep_memory = keep_memory
        self.splits = []
        self.cap_choices = []  # per graph whose cap the model chose (auto_cap)
        self._links = {}  # (group, device): the all-reduce's (latency, bandwidth) agreed
        self._agreed = {}  # (group, parameter names and shapes): the cap agreed for them

    def caps(self):
        """(cap, first cap) in bytes: the ones given, else the active DDP module's cap and
        c10d's first-bucket default, as DDPOptimizer takes them; 25 MiB without DDP."""
        cap, first = self.bucket_cap_bytes, self.first_bucket_cap_bytes
        if cap is None or cap == "auto":  # auto: where the model is not asked (auto_cap)
            from torch.nn.parallel import DistributedDataParallel
            active = DistributedDataParallel._get_active_ddp_module()
            cap = active.bucket_bytes_cap if active is not None else _DEFAULT_BUCKET_CAP_BYTES
        return cap, first if first is not None else min(cap, _first_bucket_default())

    def auto_cap(self, gm, graph, example_inputs, group):
        """The cap overlap's model picks for dynamo's graph `gm` (`graph` converted)
        (bucket_cap_bytes="auto"): each forward node timed on this device (_forward_times),
        the group's all-reduce measured once (_measure_link, or the `link` given), how much
        slower the forward runs beside all-reduces (_contention), and the cap whose
        backward and exposed all-reduce time end first (_overlap.choose_bucket_cap:
        backward = 2 x forward). Every rank measures and takes the slowest rank's figures,
        so all ranks choose the same cap. Recorded in `cap_choices`.

        Collectives run only for the first graph of each set of parameters (their names
        and shapes) that needs gradients; a recompile of the same parameters (another batch
        size, a guard that failed on one rank) reuses the cap agreed for them, and a graph
        without gradients (evaluation, which one rank may run alone) takes DDP's cap. So
        what every rank must do is compile the first training graph of each parameter set,
        as the backward's own all-reduces need anyway. A world of one (nothing to reduce)
        takes DDP's cap without measuring."""
        import torch.distributed as dist
        world = dist.get_world_size(group) if dist.is_initialized() else 1
        tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
        if (world <= 1 or not torch.is_grad_enabled()
                or not any(t.requires_grad for t in tensors)):
            return self.caps()[0]
        params = [(str(n.target), tuple(t.shape)) for n, t in zip(
            (n for n in gm.graph.nodes if n.op == "placeholder"), example_inputs)
            if isinstance(t, torch.nn.Parameter)]
        agreed_key = (getattr(group, "group_name", None), tuple(params))
        if agreed_key in self._agreed:
            return self._agreed[agreed_key]
        # The device the group's collectives take: the parameters' (a CPU tensor placed
        # first among a GPU model's inputs must not send NCCL a CPU tensor).
        device = next((t.device for t in tensors if isinstance(t, torch.nn.Parameter)),
                      tensors[0].device if tensors else torch.device("cpu"))
        key = (getattr(group, "group_name", None), str(device))
        if key not in self._links:
            self._links[key] = (self.link if self.link is not None
                                else _measure_link(group, device))
        calls = [n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
        timed = {}
        if _has_collectives(gm):
            # Timing would issue them on this rank alone; the same on every rank.
            warnings.warn("overlap.torch.ddp: bucket_cap_bytes=\"auto\": this graph's "
                          "forward holds collectives and is not timed; its compute counts "
                          "as 0", stacklevel=2)
        else:
            try:
                timed = _forward_times(gm, example_inputs, device)
            except Exception as e:  # noqa: BLE001: any failure of a run outside the step
                # Every rank still joins the agreement below (a rank that left it would
                # hang the others); the ranks that timed the graph give its times.
                warnings.warn(f"overlap.torch.ddp: bucket_cap_bytes=\"auto\" could not time "
                              f"this graph's forward on rank {dist.get_rank(group)} "
                              f"({type(e).__name__}: {e}); its times count as 0 here",
                              stacklevel=2)
        agreed = _slowest({name: timed.get(name, 0.0) for name in calls},
                          self._links[key], group, device)
        if agreed is None:  # the ranks hold different graphs: no model to agree on
            warnings.warn("overlap.torch.ddp: bucket_cap_bytes=\"auto\": the ranks compiled "
                          "different graphs; DDP's cap is used", stacklevel=2)
            cap = self.caps()[0]
        else:
            times, link = agreed
            self._links[key] = link
            forward_s = sum(times.values())
            # A forward holding collectives is not run outside the step (above).
            slowdown = (0.0 if _has_collectives(gm) else
                        _contention(gm, example_inputs, group, device, link, forward_s))
            choice = _overlap.choose_bucket_cap(
                _with_device_times(graph, times), mode=MODES[self.mode], world_size=world,
                latency_s=link[0], bandwidth_bytes_per_s=link[1],
                first_bucket_cap_bytes=self.first_cap(), compute_slowdown=slowdown)
            self.cap_choices.append(dict(choice, forward_s=forward_s, latency_s=link[0],
                                         bandwidth_bytes_per_s=link[1],
                                         compute_slowdown=slowdown))
            cap = choice["cap_bytes"]
        self._agreed[agreed_key] = cap
        return cap

    def first_cap(self):
        """The first bucket's cap before the min with the cap: the one given, else c10d's."""
        if self.first_bucket_cap_bytes is not None:
            return self.first_bucket_cap_bytes
        return _first_bucket_default()

    def buckets(self, gm, example_inputs, group=None):
        """overlap's buckets of dynamo's graph, or None (with a warning naming why) when the
        graph cannot be converted: symbolic sizes (dynamo marks a dimension dynamic after
        it saw two sizes of it), an argument the format has no spelling for. `group`: the
        process group the buckets are reduced over (for a cap chosen by the model)."""
        try:
            graph = from_fx(gm, example_inputs, name="dynamo")
            if self.bucket_cap_bytes == "auto":
                cap = self.auto_cap(gm, graph, example_inputs, group)
                first = min(cap, self.first_cap())
            else:
                cap, first = self.caps()
            buckets = _overlap.partition(graph, bucket_cap_bytes=cap,
                                         first_bucket_cap_bytes=first, mode=MODES[self.mode])
        except (_overlap.Error, _exporter_error()) as e:
            warnings.warn(f"overlap.torch.ddp: this graph is compiled whole, without "
                          f"overlap's buckets: {e} (static shapes: torch.compile(..., "
                          f"dynamic=False))", stacklevel=2)
            self.splits.append(None)
            return None
        self.splits.append([b["params"] for b in buckets])
        return buckets

    def keep(self, example_inputs):
        """keep_freed_memory() for a graph on the CPU, unless keep_memory=False."""
        if self.keep_memory:
            keep_for(example_inputs)

    def __call__(self, gm, example_inputs):
        self.keep(example_inputs)
        buckets = self.buckets(gm, example_inputs)
        if buckets is None or len(buckets) <= 1:
            return self.compile_fn(gm, example_inputs)
        piece_of = {name: b["index"] for b in buckets for name in b["nodes"]}
        # Every node but placeholders and the output is in exactly one bucket (the
        # partitioner's contract); split_module places placeholders itself.
        split = split_module(gm, None, lambda node: piece_of[node.name],
                             keep_original_order=True)
        for name, child in list(split.named_children()):
            if name.startswith("submod_"):
                setattr(split, name, _LazyPiece(child, self.compile_fn))
        return split


def _first_bucket_default():
    """c10d's first-bucket size (1 MiB in torch 2.x)."""
    return getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", 1024 * 1024)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_seconds(fn, device, repeats=5):
    """The median of `repeats` timed calls of fn after one untimed call."""
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


class _Outside(torch.fx.Interpreter):
    """Runs dynamo's graph outside the step, node by node: dynamo's _set_grad_enabled nodes
    are skipped (the runs stay without autograd), and the autocast regions the graph
    entered are recorded so that a run that fails inside one leaves it (close()).
    `on_node(node, seconds)`, when given, gets each call's time on `device`."""

    def __init__(self, gm, device, on_node=None):
        super().__init__(gm)
        self.device, self.on_node, self.entered = device, on_node, []

    def run_node(self, n):
        if n.op in ("placeholder", "output"):
            return super().run_node(n)
        if n.target is torch._C._set_grad_enabled:
            return None
        if self.on_node is not None:
            _sync(self.device)
            start = time.perf_counter()
        result = super().run_node(n)
        if self.on_node is not None:
            _sync(self.device)
            self.on_node(n, time.perf_counter() - start)
        if n.target is torch.amp._enter_autocast:
            self.entered.append(result)
        elif n.target is torch.amp._exit_autocast and self.entered:
            self.entered.pop()
        return result

    def close(self):
        while self.entered:
            torch.amp._exit_autocast(self.entered.pop())


def _forward_times(gm, example_inputs, device, repeats=3):
    """Seconds each node of dynamo's graph `gm` takes on this device, run node by node on
    `example_inputs` (the real tensors a backend gets) without autograd: the median of
    `repeats` runs after one untimed run. Inputs that are not parameters (the batch, and
    buffers such as batch norm's running statistics, which the forward updates in place)
    are cloned first, and the random streams restored after, so the module's state and
    the step's draws are as before. About (1 + repeats) forward passes."""
    inputs = _isolated_inputs(gm, example_inputs)
    runs = []
    runner = _Outside(gm, device, lambda n, seconds: runs[-1].__setitem__(n.name, seconds))
    # The random streams as they were after: the step's dropout draws what it would have.
    with torch.no_grad(), torch.random.fork_rng(
            devices=[device] if device.type == "cuda" else []):
        try:
            for _ in range(1 + repeats):
                runs.append({})
                runner.run(*inputs)
        finally:  # a run that failed inside an autocast region leaves it
            runner.close()
    return {name: sorted(r[name] for r in runs[1:])[repeats // 2] for name in runs[-1]}


def _isolated_inputs(gm, example_inputs):
    """`example_inputs` with the batch and every input the graph writes (batch norm's
    running statistics) cloned: runs outside the step leave the module as it was."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = {a for n in gm.graph.nodes if _mutates(n) for a in _flat_nodes(n.args)
               if a.op == "placeholder"}
    return [t.detach().clone() if isinstance(t, torch.Tensor)
            and (not isinstance(t, torch.nn.Parameter) or p in written) else t
            for p, t in zip(placeholders, example_inputs)]


def _contention(gm, example_inputs, group, device, link, forward_s, repeats=3):
    """The cost model's compute_slowdown for this device and group: how much longer dynamo's
    graph `gm` runs its forward (node by node without autograd, as _forward_times runs it,
    untimed per node) while all-reduces are in flight than alone, the median of `repeats` of
    each, taken in turn, the largest over the ranks. On a CPU the communication's copies
    and the transport's threads take the cores the kernels run on; on a GPU the
    collectives' kernels take some of its multiprocessors (the runs are timed on the
    current stream only, not on the collectives'). The all-reduces are of the largest
    parameter's size (256 KiB to 16 MiB), as many as `link` (the agreed fit) says last
    twice `forward_s` (the agreed forward time), so every rank issues the same count
    whatever happens on it: a rank whose run fails warns, counts 0 and still issues and
    drains its remaining rounds. Every rank of the group must call it. 1 + 2 x repeats
    forward passes."""
    import statistics
    import torch.distributed as dist
    world = dist.get_world_size(group)
    largest = max((t.numel() * t.element_size() for t in example_inputs
                   if isinstance(t, torch.nn.Parameter)), default=0)
    size = min(max(largest, 256 << 10), 16 << 20) // 4
    each = max(link[0] + 2 * (world - 1) / world * size * 4 / link[1], 1e-6)
    count = min(2000, int(2 * forward_s / each) + 1)
    buffer, runner, rounds = None, None, 0
    alone, beside, ratio = [], [], 0.0

    def stream_sync():  # not _sync: a device-wide one would wait for the collectives too
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()

    def run():
        stream_sync()
        start = time.perf_counter()
        runner.run(*inputs)
        stream_sync()
        return time.perf_counter() - start

    def issue():
        nonlocal rounds
        rounds += 1
        return [dist.all_reduce(buffer, group=group, async_op=True) for _ in range(count)]

    try:
        buffer = torch.zeros(size, device=device)  # sums of zeros: no overflow however many
        inputs = _isolated_inputs(gm, example_inputs)
        runner = _Outside(gm, device)
        with torch.no_grad(), torch.random.fork_rng(
                devices=[device] if device.type == "cuda" else []):
            try:
                run()
                for _ in range(repeats):
                    alone.append(run())
                    works = issue()
                    try:
                        beside.append(run())
                    finally:
                        for w in works:
                            w.wait()
            finally:
                runner.close()
        ratio = max(0.0, statistics.median(beside) / statistics.median(alone) - 1)
    except Exception as e:  # noqa: BLE001: a run outside the step; the ranks still agree
        warnings.warn(f"overlap.torch.ddp: bucket_cap_bytes=\"auto\" could not measure "
                      f"the contention on rank {dist.get_rank(group)} "
                      f"({type(e).__name__}: {e}); it counts as 0 here", stacklevel=2)
        if buffer is None:
            buffer = torch.zeros(size, device=device)  # fails again: the others time out
        while rounds < repeats:  # the rounds the other ranks still issue
            for w in issue():
                w.wait()
    agreed = torch.tensor([ratio], dtype=torch.float64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    return agreed.item()


def _flat_nodes(args):
    """The fx nodes among (nested) node arguments."""
    out = []
    torch.fx.node.map_arg(args, out.append)
    return out


def _mutates(node):
    """Whether a node may write one of its arguments: an ATen overload whose schema says so,
    a method or function named with a trailing underscore (add_, copy_), or inplace=True."""
    target = node.target
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return True
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or bool(
        node.kwargs.get("inplace"))


def _has_collectives(gm):
    """Whether dynamo's graph calls torch.distributed (functional collectives included)."""
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        where = f"{getattr(n.target, '__module__', '')} {n.target}"
        if "c10d" in where or "torch.distributed" in where:
            return True
    return False


def _with_device_times(graph, times):
    """`graph` (overlap's, converted from the timed fx graph: the same node names) with
    meta.device_time set from `times` (seconds by node name; 0 for any other node)."""
    import json
    doc = json.loads(graph.to_json())
    for node in doc["nodes"]:
        node.setdefault("meta", {})["device_time"] = times.get(node["name"], 0.0)
    return _overlap.Graph.from_json(json.dumps(doc))


def _measure_link(group, device, sizes=(1 << 20, 8 << 20)):
    """(latency_s, bus bandwidth) of an all-reduce over `group`, fitted to the medians of 5
    all-reduces at each of two sizes (the cost model's ring: t = latency + 2 (p - 1) / p x
    bytes / bandwidth), sizes in the range of bucket caps. Every rank of the group must
    call it (it runs collectives); on 1 Gbit/s links about 0.5 s."""
    import torch.distributed as dist
    world = dist.get_world_size(group)
    times = []
    for size in sizes:
        t = torch.zeros(size // 4, device=device)
        times.append(_median_seconds(lambda: dist.all_reduce(t, group=group), device))
    ring = 2 * (world - 1) / world
    slope = (times[1] - times[0]) / (sizes[1] - sizes[0])
    if not slope > 0:  # the larger took no longer: noise on a link too fast to see
        slope = times[1] / sizes[1]
    return max(0.0, times[0] - slope * sizes[0]), ring / slope


def _slowest(times, link, group, device):
    """The figures every rank of `group` agrees on: the slowest rank's (each node's longest
    time, the highest latency, the lowest bandwidth), so that every rank's model chooses
    the same buckets; None on every rank when the ranks hold different graphs (their node
    names). Two MAX all-reduces: the first of a fixed size, so that ranks with different
    graphs still make the same calls."""
    import zlib
    import torch.distributed as dist
    names = sorted(times)
    digest = float(zlib.crc32("\n".join(names).encode()))
    shape = torch.tensor([len(names), digest, -len(names), -digest], dtype=torch.float64,
                         device=device)
    dist.all_reduce(shape, op=dist.ReduceOp.MAX, group=group)
    most, least = shape.tolist()[:2], [-x for x in shape.tolist()[2:]]
    if most != least:
        return None
    values = torch.tensor([times[k] for k in names] + [link[0], 1 / link[1]],
                          dtype=torch.float64, device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX, group=group)
    v = values.tolist()
    return {k: v[i] for i, k in enumerate(names)}, (v[-2], 1 / v[-1])


def _silence_reducer(module):
    """Turns DDP's reducer off for `module` (require_backward_grad_sync = False, what
    no_sync() sets: no bucket copies, no all-reduce): the compiled backward all-reduces the
    gradients itself. Once per module; a module with a comm hook of its own is refused (the
    hook would never run)."""
    if getattr(module, "_overlap_silenced", False):
        return
    if getattr(module, "_comm_hooks", None) or getattr(module.reducer, "_comm_hook", None):
        raise ValueError("overlap.torch.ddp(split=False): the DDP module has a comm hook "
                         "already; the compiled step all-reduces the gradients itself")
    module.require_backward_grad_sync = False
    module._overlap_silenced = True


def _static_shape(node):
    """The static shape of an FX node's tensor value (meta["val"]), or None."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    if not all(isinstance(d, int) for d in val.shape):
        return None
    return val


def _scalable_tangents(graph, results, bucketed):
    """The backward's tangent placeholders when dividing them by the world size divides every
    gradient the buckets reduce and nothing else (every output the graph returns is a
    bucketed gradient, every tangent a static floating tensor), else None."""
    if any(isinstance(r, torch.fx.Node) and i not in bucketed for i, r in enumerate(results)):
        return None
    tangents = [n for n in graph.nodes if n.op == "placeholder"
                and str(n.target).startswith("tangents")]
    for t in tangents:
        val = _static_shape(t)
        if val is None or not val.is_floating_point():
            return None
    return tangents or None


def _check_divide(divide):
    if divide not in ("gradients", "tangents"):
        raise ValueError(f"overlap.torch: divide must be \"gradients\" or \"tangents\", "
                         f"not {divide!r}")


def _storage_users(t):
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class _BucketBuffers(torch.nn.Module):
    """The flat buffers of one compiled backward's buckets, kept across steps, and filled
    one gradient at a time as each is computed (DDP's reducer copies a gradient into its
    bucket when it is ready, too). A new buffer per step would be fresh memory each time (a
    bucket above glibc's 32 MiB mmap threshold is mapped and unmapped on every step, and its
    page faults cost milliseconds per step on a CPU); a gradient held until its whole bucket
    is ready, then freed with the bucket's others, would free tens of megabytes at once at
    the heap's top, which glibc gives back to the system and the next step faults in again
    (resnet18: 6,880 page faults a step, 2026-12-07). Copied as it is computed, each
    gradient is freed at once and its memory taken by the next one.

    A buffer is reused only when nothing outside holds its storage: the step's gradients
    are views of it, so while a parameter's .grad still is one (gradients kept across
    steps, zero_grad(set_to_none=False)) the bucket gets a new buffer instead."""

    def __init__(self):
        super().__init__()  # a module, so the graph may hold it (get_attr)
        # key: (buffer, its storage's use count when only it and `views` held it, views)
        self.buffers = {}
        self.filling = {}  # key: the positions placed in this step's fill

    def place(self, key, index, shapes, piece, scale=None, start=False):
        """Copies `piece` (a gradient, any strides) into position `index` of the key's
        buffer (pieces of `shapes`, one after another), multiplied by `scale` on the way
        when given: one pass over its bytes, as DDP's reducer's mul_out by 1 / world size,
        into a view of the piece's shape kept with the buffer (no reshape per step: a
        graph op costs microseconds, and a model has hundreds of gradients). `start`: the step's
        first gradient of the bucket, which starts a new fill (whatever a step that failed
        midway left) and decides whether the buffer may be reused."""
        fill = self.filling.get(key)
        if start or fill is None:
            held = self.buffers.get(key)
            if held is None or _storage_users(held[0]) > held[1]:
                sizes = [math.prod(s) for s in shapes]
                buffer = torch.empty(sum(sizes), dtype=piece.dtype, device=piece.device)
                views = [flat.view(s) for flat, s in zip(buffer.split(sizes), shapes)]
                self.buffers[key] = (buffer, _storage_users(buffer), views)
            fill = self.filling[key] = set()
        view = self.buffers[key][2][index]
        if scale is None:
            view.copy_(piece)
        else:
            torch.mul(piece, scale, out=view)
        fill.add(index)

    def filled(self, key, count):
        """The key's buffer once all `count` of its pieces are placed in this step."""
        fill = self.filling.pop(key, None)
        if fill is None or len(fill) != count:
            raise RuntimeError(f"overlap.torch: bucket {key}: {len(fill or ())} of {count} "
                               "gradients placed before its all-reduce")
        return self.buffers[key][0]


def _place(buffers, key, index, shapes, piece, scale=None, start=False):
    """A gradient copied (times `scale`) into its place in its bucket's kept buffer."""
    buffers.place(key, index, shapes, piece, scale, start)


def _filled(buffers, key, placed):
    """The bucket's buffer, all its gradients placed (`placed`: the placing nodes' results,
    one per gradient, so that the graph orders them before it)."""
    return buffers.filled(key, len(placed))


def _later(graph, a, b):
    """Whichever of nodes a and b comes later in `graph`. O(graph size)."""
    for n in graph.nodes:
        if n is a:
            return b
        if n is b:
            return a
    raise ValueError("overlap.torch: node not in the graph")


def insert_allreduces(bw, buckets, group_name, world_size, *, op_by_op=True,
                      divide="gradients"):
    """Rewrites an AOT backward graph `bw` so that it returns all-reduced gradients: for each
    bucket (a list of the graph's output positions: the gradients of the bucket's
    parameters), the gradients are flattened into one buffer (with `op_by_op`, each copied
    into it right after the node that computes it; else one aten.cat after the last), and
    right after the last of them the buffer is summed over `group_name` in place (torch's
    functional `all_reduce_`); just before the output, one wait_tensor, and each gradient is
    a view of the reduced buffer. A bucket holding several dtypes gets one buffer per dtype (gloo
    reduces one dtype at a time); a gradient without a static floating shape its own
    out-of-place all_reduce.

    DDP divides each gradient by the world size before it sums (its reducer multiplies by
    1 / world size while copying into the bucket): `divide="gradients"` does the same, with
    the same arithmetic, so with `op_by_op` the bits equal DDP's at any world size
    (inductor's fused kernels may round otherwise). `divide="tangents"` divides the backward's
    tangents instead when the graph returns only bucketed gradients (a pass over the
    forward's outputs, not over the parameters): right when every gradient is linear in
    the tangents, as ATen's own backward formulas are, and wrong for a custom
    autograd.Function whose backward adds a term that does not scale with its incoming
    gradient (an auxiliary-loss scaler that returns a constant); so it is asked for, not
    the default. Equal to dividing the gradients exactly when the world size is a power of
    two and no value falls below the normal range, within round-off otherwise.

    `op_by_op`: the graph runs as written (aot_eager), so each bucket's gradients are
    multiplied into its buffer in one pass (no cat, then a division) and the buffer is
    kept across steps (_BucketBuffers, a `bucket_buffers` attribute of
    `bw`); else (inductor) pure ATen ops for the compiler to fuse and plan. Returns the
    number of collectives inserted. O(buckets x graph size)."""
    graph = bw.graph
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    results = list(output.args[0])
    bucketed = {i for positions in buckets for i in positions}
    aten, c10d = torch.ops.aten, torch.ops._c10d_functional
    _check_divide(divide)
    tangents = _scalable_tangents(graph, results, bucketed) if divide == "tangents" else None
    for t in tangents or ():
        users = list(t.users)
        with graph.inserting_after(t):
            scaled = graph.call_function(aten.div.Scalar, (t, world_size))
        for user in users:
            user.replace_input_with(t, scaled)
    results = list(output.args[0])  # a returned tangent is now its division
    position = {n: i for i, n in enumerate(graph.nodes)}
    if op_by_op:
        bw.add_module("bucket_buffers", _BucketBuffers())
    pool = None  # the graph's get_attr of bucket_buffers, made at its first use
    issued = 0
    for positions in buckets:
        grads = [(i, results[i]) for i in positions if isinstance(results[i], torch.fx.Node)]
        if not grads:
            continue
        anchor = max((g for _, g in grads), key=position.__getitem__)

        def after(target, args):
            nonlocal anchor
            with graph.inserting_after(anchor):
                anchor = graph.call_function(target, args)
            return anchor

        groups, alone = {}, []  # dtype: [(output position, node, value)]; [(position, node)]
        for i, g in grads:
            val = _static_shape(g)
            if val is not None and val.is_floating_point():
                groups.setdefault(val.dtype, []).append((i, g, val))
            else:
                alone.append((i, g))
        for members in groups.values():
            if op_by_op and len(members) > 1:
                # Each gradient copied into the bucket's buffer right where it is computed.
                if pool is None:
                    first = next(n for n in graph.nodes if n.op != "placeholder")
                    with graph.inserting_before(first):
                        pool = graph.get_attr("bucket_buffers")
                key, shapes = f"{issued}", tuple(tuple(v.shape) for _, _, v in members)
                scale = None if tangents else 1.0 / world_size
                tail = {}  # where a gradient's next placing goes: after its last one
                placed = []
                for k, (_, g, _) in enumerate(members):
                    # Right after the gradient; a graph input (a tangent returned as a
                    # gradient) after the buffers' get_attr, which follows the inputs.
                    where = tail.get(g) or (tail.get(pool, pool) if g.op == "placeholder"
                                            else g)
                    with graph.inserting_after(where):
                        node = graph.call_function(_place, (pool, key, k, shapes, g, scale))
                    tail[g] = node
                    if g.op == "placeholder":
                        tail[pool] = node  # the next graph input's placing goes after it
                    placed.append(node)
                # The first placing the graph runs starts the step's fill; the last one is
                # where the bucket is complete.
                mine = set(placed)
                ordered = [n for n in graph.nodes if n in mine]
                ordered[0].args = ordered[0].args + (True,)
                anchor = _later(graph, anchor, ordered[-1])
                buffer = after(_filled, (pool, key, tuple(placed)))
            else:
                pieces = [after(aten.reshape.default, (g, [-1])) for _, g, _ in members]
                if len(pieces) > 1:
                    buffer = after(aten.cat.default, (pieces,))
                    if tangents is None:
                        buffer = after(aten.mul.Tensor, (buffer, 1.0 / world_size))
                elif tangents is None:
                    buffer = after(aten.mul.Tensor, (pieces[0], 1.0 / world_size))
                else:
                    # The reduction writes its buffer: never the gradient itself, which
                    # later nodes may read (a bias's gradient is its output's).
                    buffer = after(aten.clone.default, (pieces[0],))
            reduced = after(c10d.all_reduce_.default, (buffer, "sum", group_name))
            with graph.inserting_before(output):
                done = graph.call_function(c10d.wait_tensor.default, (reduced,))
                sizes = [v.numel() for _, _, v in members]
                parts = graph.call_function(aten.split_with_sizes.default, (done, sizes))
                for k, (i, _, v) in enumerate(members):
                    item = graph.call_function(operator.getitem, (parts, k))
                    results[i] = graph.call_function(aten.view.default, (item, list(v.shape)))
            issued += 1
        for i, g in alone:
            scaled = (g if tangents is not None
                      else after(aten.mul.Tensor, (g, 1.0 / world_size)))
            reduced = after(c10d.all_reduce.default, (scaled, "sum", group_name))
            with graph.inserting_before(output):
                results[i] = graph.call_function(c10d.wait_tensor.default, (reduced,))
            issued += 1
    output.args = (type(output.args[0])(results),)
    graph.lint()
    bw.recompile()
    return issued


def _only_users(node, allowed):
    """Whether every user of `node` is in `allowed`."""
    return all(u in allowed for u in node.users)


def _placeholders(bw):
    """The backward's placeholders by name (the partitioners name each saved value's
    placeholder as the forward value)."""
    return {n.name: n for n in bw.graph.nodes if n.op == "placeholder"}


def _saved_value(placeholders, output, num_fwd_outputs, value):
    """The backward's placeholder for forward value `value` when the forward saves it,
    None when it does not; False when it is also a user output or saved twice (not to be
    touched). O(the forward's outputs)."""
    outs = list(output.args[0])
    if value in outs[:num_fwd_outputs] or outs[num_fwd_outputs:].count(value) > 1:
        return False
    if value not in outs[num_fwd_outputs:]:
        return None
    return placeholders.get(value.name, False)


def _drop_saved(bw, output, value, placeholder):
    """Removes saved `value` from the forward's outputs and its `placeholder` from the
    backward (the two lists stay in step: AOTAutograd pairs them by position)."""
    output.args = (tuple(r for r in output.args[0] if r is not value),)
    bw.graph.erase_node(placeholder)


def update_buffers_in_place(fw, bw, num_fwd_outputs):
    """Rewrites a partitioned AOT pair (forward `fw`, backward `bw`, the forward's first
    `num_fwd_outputs` outputs the user's, as AOTAutograd's partitioners return them) so
    that batch norm updates its running statistics in place, as eager mode does:
    AOTAutograd's functional graph computes them into new tensors
    (`_native_batch_norm_legit_functional`, which clones both statistics) and copies them
    back into the buffers at the end (`copy_`), and counts the batches into a new tensor
    copied back too. Run op by op (aot_eager) that is five extra ops per batch norm layer.
    Rewritten only where the buffer is read by nothing but the update and its copy, and the
    new value by nothing but the copy and, saved for the backward, batch norm's backward in
    training, which takes the statistics and does not read them: there it gets None and
    nothing is saved (saving the buffer itself would fail a second forward before the
    backward, which writes it again). Returns how many buffers it updates in place (two
    per batch norm layer, one per batch counter). O(graph size + batch norm layers x the
    forward's outputs); must run before
    AOTAutograd reads the pair (a partition_fn)."""
    aten = torch.ops.aten
    graph = fw.graph
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    placeholders = _placeholders(bw)
    updated = 0

    def copy_back(buffer, value):
        """The copy_(buffer, value) node when it is the buffer's update, else None."""
        if buffer.op != "placeholder":
            return None
        copies = [u for u in value.users if u.target is aten.copy_.default
                  and u.args[0] is buffer and u.args[1] is value]
        if len(copies) != 1 or not _only_users(value, {copies[0], output}):
            return None
        return copies[0]

    def unread(value, slot):
        """Whether every backward use of saved `value` is batch norm's backward in
        training taking it as statistic `slot` (3: mean, 4: variance), which it ignores;
        the placeholder (None if not saved), or False."""
        saved = _saved_value(placeholders, output, num_fwd_outputs, value)
        if saved is None or saved is False:
            return saved
        for u in saved.users:
            if (u.target is not aten.native_batch_norm_backward.default or u.args[7] is not True
                    or u.args[slot] is not saved
                    or any(a is saved for k, a in enumerate(u.args) if k != slot)):
                return False
        return saved

    for n in list(graph.nodes):
        if n.target is aten._native_batch_norm_legit_functional.default and n.args[5] is True:
            items = {u.args[1]: u for u in n.users if u.target is operator.getitem}
            if len(items) != len(n.users) or 3 not in items or 4 not in items:
                continue
            mean, var = n.args[3], n.args[4]
            copies = [copy_back(mean, items[3]), copy_back(var, items[4])]
            saved = [unread(items[3], 3), unread(items[4], 4)]
            if None in copies or False in saved or not _only_users(mean, {n, copies[0]}) \
                    or not _only_users(var, {n, copies[1]}):
                continue
            with graph.inserting_before(n):
                legit = graph.call_function(aten._native_batch_norm_legit.default, n.args,
                                            n.kwargs)
            if isinstance(n.meta.get("val"), (tuple, list)):
                legit.meta["val"] = tuple(n.meta["val"][:3])
            for i in (0, 1, 2):
                if i in items:
                    items[i].args = (legit, i)
            for i, copy, placeholder in ((3, copies[0], saved[0]), (4, copies[1], saved[1])):
                if placeholder is not None:
                    for u in list(placeholder.users):
                        u.args = tuple(None if a is placeholder else a for a in u.args)
                    _drop_saved(bw, output, items[i], placeholder)
                graph.erase_node(copy)
                graph.erase_node(items[i])
            graph.erase_node(n)
            updated += 2
        elif n.target is aten.add.Tensor and isinstance(n.args[0], torch.fx.Node):
            buffer = n.args[0]
            copy = copy_back(buffer, n)
            if copy is None or len(n.users) != 1 or not _only_users(buffer, {n, copy}):
                continue
            with graph.inserting_before(n):
                inplace = graph.call_function(aten.add_.Tensor, n.args, n.kwargs)
            inplace.meta = dict(n.meta)
            graph.erase_node(copy)
            graph.erase_node(n)
            updated += 1
    if updated:
        for g in (fw, bw):
            g.graph.lint()
            g.recompile()
    return updated


def _shares_storage(graph, x):
    """Whether another node's value (meta["val"]) may share storage with node x's: a view
    or an op that returns its input's memory (`_unsafe_view` is not marked a view)."""
    from torch.multiprocessing.reductions import StorageWeakRef
    ref = StorageWeakRef(x.meta["val"].untyped_storage())
    producer = x.args[0] if x.target is operator.getitem else None  # holds x's value too
    for n in graph.nodes:
        if n is producer:
            continue
        vals = n.meta.get("val")
        for v in vals if isinstance(vals, (tuple, list)) else (vals,):
            if n is not x and isinstance(v, torch.Tensor) \
                    and StorageWeakRef(v.untyped_storage()) == ref:
                return True
    return False


def save_results_of_hardtanh(fw, bw, num_fwd_outputs):
    """Rewrites a partitioned AOT pair (forward `fw`, backward `bw`, the forward's first
    `num_fwd_outputs` outputs the user's, as AOTAutograd's partitioners return them: the
    backward's placeholders named as the forward values they receive) so that an in-place hardtanh (ReLU6(inplace=True), MobileNet's
    activation) saves its result, as eager autograd does, instead of a copy of its input.
    Functionalized, `hardtanh_(x)` becomes `clone(x)` (the input before the write, saved
    for the backward) and an out-of-place `hardtanh(x)`: one more activation-sized copy
    and one more saved tensor per layer. hardtanh_backward(grad, v, lo, hi) passes grad
    where lo < v < hi, which holds for the result exactly where it holds for the input
    (the result is the input clamped to [lo, hi]), so the backward may read the result;
    and when nothing else reads the input, the forward writes it in place again. Rewritten
    only where the copy is read by nothing but the backward's hardtanh_backward with the
    forward's bounds, and written in place only where no other value may share the input's
    memory. Returns how many copies it removed. O(graph size) per copy; must run before
    AOTAutograd reads the pair (a partition_fn)."""
    aten = torch.ops.aten
    output = next(n for n in reversed(fw.graph.nodes) if n.op == "output")
    placeholders = _placeholders(bw)
    removed = 0
    for c in list(fw.graph.nodes):
        if c.target is not aten.clone.default or c.kwargs or not _only_users(c, {output}):
            continue
        x = c.args[0]
        clamps = [u for u in x.users if u.target is aten.hardtanh.default]
        saved = _saved_value(placeholders, output, num_fwd_outputs, c)
        if len(clamps) != 1 or not saved:
            continue
        h = clamps[0]
        bounds = tuple(h.args[1:]) or (-1.0, 1.0)
        if not saved.users or any(u.target is not aten.hardtanh_backward.default
                                  or u.args[1] is not saved or tuple(u.args[2:]) != bounds
                                  for u in saved.users):
            continue
        outs = list(output.args[0])  # the copy is saved, never the user's (_saved_value)
        output.args = (tuple(outs[:num_fwd_outputs]
                             + [h if r is c else r for r in outs[num_fwd_outputs:]]),)
        fw.graph.erase_node(c)
        removed += 1
        val = x.meta.get("val")
        if (x.op == "call_function" and isinstance(val, torch.Tensor) and not val._is_view()
                and _only_users(x, {h}) and not _shares_storage(fw.graph, x)):
            with fw.graph.inserting_before(h):
                inplace = fw.graph.call_function(aten.hardtanh_.default, h.args, h.kwargs)
            inplace.meta = dict(h.meta)
            h.replace_all_uses_with(inplace)
            fw.graph.erase_node(h)
    if removed:
        fw.graph.lint()
        fw.recompile()
    return removed


class OneGraphBackend(DdpBackend):
    """The backend `ddp(split=False)` returns: the step as one graph, its backward reducing
    the gradients by overlap's buckets. `collectives` records how many all-reduces each
    compiled backward holds."""

    def __init__(self, mode, backend, bucket_cap_bytes, first_bucket_cap_bytes,
                 divide="gradients", link=None, keep_memory=True):
        _check_divide(divide)
        self.divide = divide
        if backend == "eager":
            backend = "aot_eager"  # the backward must be an AOT graph to rewrite
        if backend not in ("aot_eager", "inductor"):
            raise ValueError("overlap.torch.ddp(split=False): backend must be \"aot_eager\" "
                             f"or \"inductor\", not {backend!r}")
        super().__init__(mode, backend, bucket_cap_bytes, first_bucket_cap_bytes, link,
                         keep_memory)
        self.collectives = []

    def __call__(self, gm, example_inputs):
        import torch.distributed as dist
        from torch._dynamo.backends.common import aot_autograd
        from torch.nn.parallel import DistributedDataParallel

        self.keep(example_inputs)
        active = DistributedDataParallel._get_active_ddp_module()
        group = active.process_group if active is not None else dist.group.WORLD
        world = dist.get_world_size(group)
        buckets = self.buckets(gm, example_inputs, group)
        if buckets is None:
            if active is not None and getattr(active, "_overlap_silenced", False):
                # DDP's reducer no longer reduces: a graph without the all-reduces would
                # train each rank on its own gradients.
                raise RuntimeError("overlap.torch.ddp(split=False): a later graph of this "
                                   "model cannot be converted (see the warning); its "
                                   "gradients would not be all-reduced")
            return self.compile_fn(gm, example_inputs)  # DDP's reducer reduces, as eager
        # Parameters are named by their placeholders' targets (from_fx without a model).
        index = {str(n.target): i for i, n in enumerate(n for n in gm.graph.nodes
                                                        if n.op == "placeholder")}
        # Backward's outputs follow the forward's inputs; the last bucket's gradients come
        # first in the backward, and its all-reduce is issued first.
        by_position = [[index[p] for p in b["params"]] for b in reversed(buckets)]
        if active is not None and world > 1:
            _silence_reducer(active)

        def rewrite(bw):
            # aot_eager runs each op as written; inductor fuses and plans its own.
            self.collectives.append(
                insert_allreduces(bw, by_position, group.group_name, world,
                                  op_by_op=self.backend == "aot_eager",
                                  divide=self.divide) if world > 1 else 0)

        from torch._functorch import config as functorch_config
        if self.backend == "aot_eager":
            # torch's aot_eager (input mutations kept in the graph, boxed calls that free
            # each input once read), with the backward rewritten first. Partitioned as
            # eager autograd saves (default_partition: the forward's values the backward
            # reads, nothing recomputed): the min-cut partitioner aot_eager takes recomputes
            # pointwise ops in the backward, which pays only where a compiler fuses them
            # (2% of the GPT's step on one CPU rank, 2026-12-07).
            from torch._dynamo.backends.debugging import boxed_nop
            from torch._functorch.partitioners import default_partition

            def bw_compiler(bw, inputs):
                rewrite(bw)
                return boxed_nop(bw, inputs)

            # The cache off as for inductor (below); torch 2.14 caches no aot_eager
            # compile unless forced, so here it guards against that setting.
            def partition(joint, inputs, **kwargs):
                # The forward as eager keeps its memory, before AOTAutograd reads which
                # values the pair saves (docs/torch.md).
                fw, bw = default_partition(joint, inputs, **kwargs)
                update_buffers_in_place(fw, bw, kwargs["num_fwd_outputs"])
                save_results_of_hardtanh(fw, bw, kwargs["num_fwd_outputs"])
                return fw, bw

            with functorch_config.patch(enable_autograd_cache=False):
                return aot_autograd(fw_compiler=boxed_nop, bw_compiler=bw_compiler,
                                    partition_fn=partition,
                                    keep_inference_input_mutations=True)(gm, example_inputs)
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        def inner_compile(g, inputs, **kwargs):
            if kwargs.get("is_backward"):
                rewrite(g)
            return compile_fx_inner(g, inputs, **kwargs)

        # AOTAutograd's cache keys on dynamo's graph, not on the rewrite: a hit would skip
        # inner_compile and load whichever backward an earlier process compiled for this
        # graph (another world size or bucket cap, or none of the all-reduces). Inductor's
        # own cache keys on the rewritten backward and stays on.
        with functorch_config.patch(enable_autograd_cache=False):
            return compile_fx(gm, example_inputs, inner_compile=inner_compile)


def ddp(mode="default", *, backend="inductor", bucket_cap_bytes=None,
        first_bucket_cap_bytes=None, split=True, divide="gradients", link=None,
        keep_memory=True):
    """A torch.compile backend for DistributedDataParallel models in DDPOptimizer's place.

    mode "reference" splits where torch 2.x's DDPOptimizer does (overlap's partitioner,
    `--mode reference-2x`: docs/ddp-optimizer.md); "default" where overlap's own rules do
    (docs/partition.md). Each piece is compiled by `backend` (a registered name or a
    callable). The caps default to DDP's own (the wrapped module's bucket_cap_mb, c10d's
    first-bucket size, as DDPOptimizer takes them). Turns DDPOptimizer off for the process
    (torch._dynamo.config.optimize_ddp = False): the two would split the same graph twice.
    DDP's reducer all-reduces the gradients, as with DDPOptimizer.

    split=False compiles the step as one graph instead (no graph breaks): AOTAutograd's
    backward gets the buckets' all-reduces (torch's functional collectives) where the
    buckets' gradients are ready, and DDP's reducer is turned off for the module (as under
    no_sync()). `backend` is then "aot_eager" or "inductor".

    divide (split=False): "gradients" divides each bucket's gradients by the world size, as
    DDP does; "tangents" divides the backward's tangents instead (one pass over the
    forward's outputs rather than over the gradients), for models whose gradients are all
    linear in the tangents: not one with a custom autograd.Function whose backward adds a
    term that ignores its incoming gradient (insert_allreduces).

    bucket_cap_bytes="auto" (split=False): overlap's model picks the cap per graph, the one
    whose backward and exposed all-reduce time end first, from this device's
    compute (each forward node timed, and slowed beside all-reduces) and the group's
    all-reduce, measured when the first
    training graph of each set of parameters compiles (every rank compiles it, and they
    agree on the slowest rank's figures), or from
    `link=(latency_s, bus bandwidth in bytes/s)` when given (OneGraphBackend.auto_cap;
    docs/torch.md). Not with split=True: there DDP's reducer keeps the buckets it built
    when it was constructed, and a cap chosen at compile time would move only the graph
    breaks.

    keep_memory: a graph on the CPU sets glibc's allocator to keep the memory a step frees
    for the next (keep_freed_memory(), process-wide, unless the environment sets glibc's
    thresholds itself), as CUDA's caching allocator keeps it: else a step can fault its
    freed memory in again each time (docs/torch.md, "Memory on CPUs")."""
    torch._dynamo.config.optimize_ddp = False
    if not split:
        return OneGraphBackend(mode, backend, bucket_cap_bytes, first_bucket_cap_bytes,
                               divide, link, keep_memory)
    if bucket_cap_bytes == "auto":
        raise ValueError("overlap.torch.ddp: bucket_cap_bytes=\"auto\" needs split=False "
                         "(with split=True DDP's reducer keeps the buckets it was built with)")
    return DdpBackend(mode, backend, bucket_cap_bytes, first_bucket_cap_bytes, link,
                      keep_memory)



def zero3(model, example_inputs, target=None, *, loss="ce", group=None, algorithm=None,
          budget_bytes=None, recompute=True, offload=True, keep_memory=True):
    """ZeRO-3 on torch's own graphs and kernels (docs/torch.md, "ZeRO-3 on torch's graphs").

    `model`'s step is captured on `example_inputs` (a list of tensors) and `target` with
    `loss` ("ce", "mse", "sum": the exporter's losses) by AOTAutograd; ZeRO-3's gathers,
    releases and reduce-scatters are inserted and ordered by overlap's step plan
    (`algorithm`, ours by default, under `budget_bytes` with the recompute and offload
    levers, as `overlap plan`), and each step runs the planned graphs on ATen's kernels,
    the collectives on torch.distributed over `group` (the default process group).
    Returns a Zero3: `step(inputs, target)` runs one forward and backward and sets the
    shards' gradients (averaged over the ranks); `parameters()` are this rank's flat
    shards, for any torch optimizer. Static shapes: every batch has the example's.
    keep_memory: as ddp()'s, for a model on the CPU."""
    from ._zero3 import zero3 as impl
    if keep_memory:
        keep_for(list(example_inputs) + list(model.parameters()))
    return impl(model, example_inputs, target, loss=loss, group=group, algorithm=algorithm,
                budget_bytes=budget_bytes, recompute=recompute, offload=offload)


def LiveBytes():  # noqa: N802 - a class to its users
    """A counting allocator for CPU steps (torch keeps no allocator statistics there): a
    context manager whose `peak` and `transient_peak` are the bytes of ATen's results
    alive at once inside it (overlap._zero3.LiveBytes)."""
    from ._zero3 import LiveBytes as impl
    return impl()
