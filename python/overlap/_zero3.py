"""ZeRO-3 on torch's own graphs and kernels (docs/torch.md, "ZeRO-3 on torch's graphs").

    z = overlap.torch.zero3(model, [example_batch], target, loss="ce")
    opt = torch.optim.SGD(z.parameters(), lr=0.1)
    for batch, target in data:
        loss = z.step([batch], target)   # forward and backward; the shards' .grad set
        opt.step(); opt.zero_grad()

The model's forward and backward are captured once by AOTAutograd (the exporter's capture,
tools/overlap_export: the pair torch.compile hands a backend), ZeRO-3's gathers, releases
and reduce-scatters are inserted and ordered by overlap's step plan (a scheduler of the
registry, ours by default, under a memory budget with its recompute and offload levers),
and each step runs the two planned graphs op by op on torch's ATen kernels, the
collectives on torch.distributed (gloo on CPUs, NCCL on GPUs: the same calls).

Each parameter lives as one flat shard per rank (padded with zeros to a multiple of the
world size, rank r keeping elements [r s, (r + 1) s), as FSDP2 and DeepSpeed shard); the
gradients are reduce-scattered and averaged over the ranks, so an optimizer on the shards
trains as data-parallel training on the ranks' batches together does.
"""

import bisect
import json
import math
import operator

import torch
import torch.distributed as dist

from . import _overlap


def _exporter():
    from .fx import _exporter as load
    return load()


_ENUMS = {}


def _enum(text):
    """A dtype, layout or memory format written as torch prints it, or None."""
    if not _ENUMS:
        for name in dir(torch):
            v = getattr(torch, name)
            if isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
                _ENUMS[str(v)] = v
    return _ENUMS.get(text)


def _target(name):
    """The callable of a graph file's target: ATen's overloads (`aten.mm.default`), custom
    ops by namespace (`transformers.grouped_mm_fallback.default`), `operator.*`."""
    if name.startswith("operator."):
        return getattr(operator, name.split(".", 1)[1])
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


class _Interpreter:
    """Runs one planned graph document (docs/format.md) on torch's kernels, in its node
    order, dropping each value after its last reader (as the simulator frees it) and
    counting the bytes of the live storages it holds: the measured peak."""

    def __init__(self, doc, zero3, returns_gradients):
        self.doc = doc
        self.z = zero3
        self.nodes = doc["nodes"]
        self.fns = {}
        last = {}
        for i, n in enumerate(self.nodes):
            if n["op"] == "output" and returns_gradients:
                # The simulator's rule: the backward's output does not hold a gradient (its
                # reduce-scatter does, and the shard it lands in is state).
                continue
            for ref in self._refs(n.get("args", [])) + self._refs(n.get("kwargs", {})):
                last[ref] = i
        self.dies_after = {}
        for name, i in last.items():
            self.dies_after.setdefault(i, []).append(name)
        for n in self.nodes:
            t = n.get("target", "")
            if n["op"] == "call_function" and not t.startswith("dc."):
                try:
                    self.fns[n["name"]] = _target(t)
                except (AttributeError, ValueError) as e:
                    raise ValueError(f"overlap.torch.zero3: node '{n['name']}': no torch op "
                                     f"for target '{t}': {e}") from None
        # Each node once, its arguments decoded ahead: a step only looks references up.
        self.steps = []
        for i, n in enumerate(self.nodes):
            args = [self._spec(a) for a in n.get("args", [])]
            kwargs = {k: self._spec(v) for k, v in n.get("kwargs", {}).items()}
            self.steps.append((n["name"], n["op"], n.get("target", ""), self.fns.get(n["name"]),
                               args, kwargs, self.dies_after.get(i, ())))

    _CONST, _REF, _NESTED = 0, 1, 2

    def _spec(self, v):
        """(kind, value): a constant decoded now, a reference's name, or a nested value
        holding references (decoded at each step)."""
        if not self._refs(v):
            return self._CONST, self._value(v, {})
        if isinstance(v, str):
            return self._REF, v[1:]
        return self._NESTED, v

    @staticmethod
    def _refs(v):
        if isinstance(v, str):
            return [v[1:]] if v.startswith("%") and not v.startswith("%%") else []
        if isinstance(v, list):
            return [r for x in v for r in _Interpreter._refs(x)]
        if isinstance(v, dict):
            if "$slice" in v:
                return _Interpreter._refs(v["$slice"])
            return [r for x in v.values() for r in _Interpreter._refs(x)]
        return []

    def _value(self, v, env):
        if isinstance(v, str):
            if v.startswith("%%"):
                return v[1:]
            if v.startswith("%"):
                return env[v[1:]]
            if v == "...":
                return Ellipsis
            e = _enum(v)
            return e if e is not None else v
        if isinstance(v, list):
            return [self._value(x, env) for x in v]
        if isinstance(v, dict):
            if "$float" in v:
                return float(v["$float"])
            if "$slice" in v:
                return slice(*[self._value(x, env) for x in v["$slice"]])
            return {k: self._value(x, env) for k, x in v.items()}
        return v

    def _arg(self, spec, env):
        kind, v = spec
        if kind == self._CONST:
            return v
        return env[v] if kind == self._REF else self._value(v, env)

    def run(self, feeds):
        """The output node's value; `feeds(node)` gives each placeholder's value."""
        env = {}
        z = self.z
        arg = self._arg
        for i, (name, op, target, fn, args, kwargs, dies) in enumerate(self.steps):
            if op == "placeholder":
                env[name] = feeds(self.nodes[i])
                z.ledger.hold(env[name])
            elif op == "output":
                return self._value(self.nodes[i]["args"][0], _Defaulting(env))
            elif op == "call_function":
                a = [arg(x, env) for x in args]
                k = {key: arg(x, env) for key, x in kwargs.items()}
                z._node = name
                try:
                    env[name] = fn(*a, **k) if fn is not None else z.dc(target, a, k)
                except RuntimeError as e:  # a kernel's, or a collective's (a lost rank)
                    raise _failed(z, name, target, e) from e
                z.ledger.hold(env[name])  # before its reading frees its inputs
            else:
                raise ValueError(f"overlap.torch.zero3: node '{name}': op '{op}' is not run")
            for dead in dies:
                z.ledger.drop(env.pop(dead, None))
            if z.pending:
                try:
                    z.settle(i)
                except RuntimeError as e:
                    raise _failed(z, name, "a reduce-scatter completed here", e) from e
        raise ValueError("overlap.torch.zero3: a graph without an output node")


def _failed(z, node, what, error):
    """The error of a failed step, naming the node, what it ran and the rank: a collective
    fails when a rank is lost (gloo: its connection closed, or the process group's
    timeout passed), a kernel on bad values."""
    message = (f"overlap.torch.zero3: rank {z.rank} of {z.world}, {z._graph} node "
               f"'{node}' ({what}): {error}")
    try:
        return type(error)(message)  # torch's kind kept (DistBackendError, ...)
    except Exception:  # noqa: BLE001 - a kind that takes other arguments
        return RuntimeError(message)


class _Ledger:
    """The bytes of the storages a graph's run holds, by reference count per storage (views
    share theirs), and their peak: O(1) per value held or dropped. Parameter shards are
    per-rank state and never counted."""

    def __init__(self, shards, held=()):
        self.skip = {shard.untyped_storage().data_ptr() for shard in shards}
        self.refs = {}
        self.live = self.peak = 0
        for t in held:
            self.hold(t)

    def _tensors(self, v):
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (tuple, list)):
            for x in v:
                yield from self._tensors(x)

    def hold(self, v):
        for t in self._tensors(v):
            s = t.untyped_storage()
            ptr = s.data_ptr()
            if ptr in self.skip:
                continue
            held = self.refs.get(ptr)
            if held is None:
                held = self.refs[ptr] = [0, s.nbytes()]
                self.live += held[1]
                self.peak = max(self.peak, self.live)
            held[0] += 1

    def drop(self, v):
        for t in self._tensors(v):
            ptr = t.untyped_storage().data_ptr()
            held = self.refs.get(ptr)
            if held is None:
                continue
            held[0] -= 1
            if held[0] == 0:
                self.live -= held[1]
                del self.refs[ptr]


class _Defaulting(dict):
    """The environment as the output node reads it: None for a value already dropped (a
    reduced gradient)."""

    def __missing__(self, key):
        return None


class Zero3:
    """A model trained with ZeRO-3 by overlap's plan on torch's kernels (`zero3()`)."""

    def __init__(self, model, inputs, target, loss, group, algorithm, budget_bytes,
                 recompute, offload):
        export = _exporter()
        self.group = group
        self.world = dist.get_world_size(group) if dist.is_initialized() else 1
        self.rank = dist.get_rank(group) if dist.is_initialized() else 0
        fw_doc, bw_doc, tensors, _ = export.export_aot(model, list(inputs), loss, target,
                                                       type(model).__name__)
        self.constants = tensors
        fw = _overlap.Graph.from_json(json.dumps(fw_doc, allow_nan=False))
        bw = _overlap.Graph.from_json(json.dumps(bw_doc, allow_nan=False))
        _overlap.annotate(fw)
        _overlap.annotate(bw)
        _overlap.insert_zero3(fw, kind="forward")
        _overlap.insert_zero3(bw, kind="backward")
        options = {"algorithm": algorithm} if algorithm else {}
        self.plan = _overlap.plan(fw, bw, budget_bytes=budget_bytes, recompute=recompute,
                                  offload=offload, world_size=self.world, **options)
        self.forward_doc = json.loads(fw.to_json())
        self.backward_doc = json.loads(bw.to_json())
        self.release_after = _reduce_releases(bw, self.backward_doc["nodes"], self.world)
        self.table = self.forward_doc["params"]
        self.ds_of = {e["name"]: i for i, e in enumerate(self.table)}
        # The backward's placeholders for the values the forward saves, in order; and the
        # buffers the forward's last outputs update (after the loss and the saved values; an
        # update may also be saved, earlier in the list).
        self.saved_names = [n["name"] for n in self.backward_doc["nodes"]
                            if n["op"] == "placeholder" and "param" not in n.get("meta", {})
                            and not n["name"].startswith("tangents")]
        fw_nodes = {n["name"]: n for n in self.forward_doc["nodes"]}
        fw_out = self.forward_doc["nodes"][-1]["args"][0]
        self.buffer_updates = [fw_nodes[r[1:]]["meta"]["updates_buffer"]
                               for r in fw_out[1 + len(self.saved_names):]]
        named = dict(export.all_named_parameters(model))  # tied names included
        self.buffers = dict(model.named_buffers())
        # One shard per storage: tied entries (GPT-2's lm_head and wte) share it, and each
        # entry's reduced gradient adds to it.
        self.shards, by_storage = [], {}
        for entry in self.table:
            key = entry.get("storage", entry["name"])
            if key not in by_storage:
                p = named[entry["name"]].detach()
                s = math.ceil(p.numel() / self.world)
                flat = torch.zeros(s * self.world, dtype=p.dtype, device=p.device)
                flat[:p.numel()] = p.reshape(-1)
                by_storage[key] = torch.nn.Parameter(
                    flat[self.rank * s:(self.rank + 1) * s].clone(),
                    requires_grad=p.requires_grad)
            self.shards.append(by_storage[key])
        self.unique_shards = list(by_storage.values())
        self.shapes = [tuple(e["shape"]) for e in self.table]
        # A world of one reduces nothing: its gradients go to the shards as they are.
        self.buckets, self.slot = (_reduce_buckets(self.backward_doc["nodes"], self.shards,
                                                   self.world) if self.world > 1 else ([], {}))
        self._forward = _Interpreter(self.forward_doc, self, returns_gradients=False)
        self._backward = _Interpreter(self.backward_doc, self, returns_gradients=True)
        self.gathered = {}  # ds_id -> [the gathered flat buffer, releases seen]
        self.ledger = _Ledger(self.unique_shards)
        self.resident = {}  # ds_id -> the gathered flat buffer kept across steps
        self._graph = "forward"
        self.peak_bytes = {"forward": 0, "backward": 0}

    def parameters(self):
        """The local shards (flat, padded; one per storage): what the optimizer steps."""
        return iter(self.unique_shards)

    def full_parameters(self):
        """{name: the whole parameter}, gathered from every rank (for checks)."""
        out = {}
        for entry, shard, shape in zip(self.table, self.shards, self.shapes):
            _, flat = self._gather(shard.detach())
            out[entry["name"]] = flat[:math.prod(shape)].view(shape).clone()
        return out

    def _gather(self, shard, async_op=False):
        """(work or None, the P s flat buffer all ranks' shards land in)."""
        if self.world == 1:
            return None, shard
        flat = torch.empty(shard.numel() * self.world, dtype=shard.dtype, device=shard.device)
        work = dist.all_gather_into_tensor(flat, shard.detach(), group=self.group,
                                           async_op=async_op)
        return (work if async_op else None), flat

    # The dc ops (docs/deepcompile.md), on torch.distributed.
    def dc(self, target, args, kwargs):
        ds = args[2] if len(args) > 2 else None
        if target == "dc.allgather_param":
            shard = args[0]
            if self.world == 1:
                return self._gather(shard)
            if kwargs.get("persistent"):
                # A resident: the forward refreshes its one gathered copy (the shards moved
                # in the optimizer step), the backward reads it as it is; no release frees it.
                if self._graph == "backward" and ds in self.resident:
                    return (None, self.resident[ds])
                _, flat = self._gather(shard)
                self.ledger.drop(self.resident.get(ds))
                self.resident[ds] = flat
                self.ledger.hold(flat)
                return (None, flat)
            return self._gather(shard, async_op=True)
        if target == "dc.wait_allgather":
            work, flat = args[0]
            if work is not None:
                work.wait()
            if ds not in self.resident:
                self.gathered[ds] = [flat, 0]
                self.ledger.hold(flat)
            shape = self.shapes[ds]
            return flat[:math.prod(shape)].view(shape)
        if target == "dc.release_param":
            # The release that completes n_users frees the gathered buffer.
            held = self.gathered.get(ds)
            if held is not None:
                held[1] += 1
                if held[1] >= args[3]:
                    self.ledger.drop(self.gathered.pop(ds)[0])
            return args[0]
        if target == "dc.reduce_grad":
            g = args[0]
            if self.world == 1:
                self._accumulate(ds, g.reshape(-1).clone())
                return None
            bucket = self.buckets[self.slot[self._node][0]]
            bucket.add(self.slot[self._node][1], g)
            self.ledger.hold(g)  # until the simulated completion of its bucket
            if bucket.arrived == len(bucket.members):
                work = dist.reduce_scatter_tensor(bucket.out, bucket.inp, group=self.group,
                                                  async_op=True)
                self.pending.append((work, bucket, bucket.take(),
                                     self.release_after.get(self._node, -1)))
            return None
        if target == "dc.wait_reduce":
            still = []
            for item in self.pending:
                if any(m.ds == ds for m in item[1].members):
                    self._complete(item)
                else:
                    still.append(item)
            self.pending = still
            return None
        if target in ("dc.offload_tensor", "dc.reload_tensor", "dc.wait_reload",
                      "dc.wait_offload"):
            return args[0]  # host memory is this memory on a CPU
        raise ValueError(f"overlap.torch.zero3: unknown ZeRO-3 op {target}")

    def _accumulate(self, ds, reduced):
        """Adds a reduced gradient (this rank's shard of the sum over the ranks, or the
        whole gradient in a world of one: a tensor of its own) to its shard's .grad,
        averaged over the ranks."""
        shard = self.shards[ds]
        if self.world > 1:
            reduced = reduced / self.world  # out of the bucket's buffer, kept across steps
        if shard.grad is None:
            shard.grad = reduced
        else:
            shard.grad.add_(reduced)

    def _complete(self, item):
        """Waits for a bucket's reduce-scatter, hands each member its shard and drops the
        members' gradients."""
        work, bucket, held, _ = item
        work.wait()
        for m in bucket.members:
            self._accumulate(m.ds, bucket.out[m.offset:m.offset + m.shard])
        for g in held:
            self.ledger.drop(g)

    def settle(self, position=None):
        """Hands each reduce-scatter's shard to its gradient and drops its input once
        compute has passed the position where the simulated schedule completes it (all,
        with no position), waiting there for one still running: the simulator's rule for
        reduced storages, so the measured peak does not depend on how fast the network was
        (as runtime/train/zero3.h does)."""
        still = []
        for item in self.pending:
            if position is None or position >= item[3]:
                self._complete(item)
            else:
                still.append(item)
        self.pending = still

    def step(self, inputs, target=None):
        """One forward and backward on this rank's batch: the loss (a 0-d tensor); each
        shard's .grad gets its averaged gradient (added to what is there)."""
        inputs = list(inputs)
        self.pending = []
        for bucket in self.buckets:  # a step that failed part way left gradients in some
            bucket.take()

        def forward_feed(n):
            meta = n.get("meta", {})
            if "param" in meta:
                return self.shards[self.ds_of[meta["param"]]].detach()
            if "buffer" in meta:
                return self.buffers[meta["buffer"]]
            if "constant" in meta:
                return self.constants[f"constant/{meta['constant']}"]
            key = meta.get("input", "")
            if key == "target":
                return target
            if key.startswith("input/"):
                return inputs[int(key.split("/")[1])]
            raise ValueError(f"overlap.torch.zero3: forward placeholder '{n['name']}' has "
                             "no value")

        with torch.no_grad():
            self.gathered, self._graph = {}, "forward"
            self.ledger = _Ledger(self.unique_shards, self.resident.values())
            out = self._forward.run(forward_feed)
            self.peak_bytes["forward"] = self.ledger.peak
            loss = out[0]
            # The forward returns its outputs, then the values the backward saves, in the
            # order of the backward's placeholders for them (docs/format.md's AOT pairs):
            # by position, as a release inserted after a saved value renames it; then the
            # buffers' updates (meta.updates_buffer: batch norm's running statistics).
            updates, names = self.buffer_updates, self.saved_names
            for name, value in zip(updates, out[len(out) - len(updates):]):
                self.buffers[name].copy_(value)
            end = len(out) - len(updates)
            saved = dict(zip(names, out[end - len(names):end]))
            del out  # each saved value lives in `saved` until the backward takes it

            def backward_feed(n):
                meta = n.get("meta", {})
                if "param" in meta:
                    return self.shards[self.ds_of[meta["param"]]].detach()
                if n["name"].startswith("tangents"):
                    return torch.ones_like(loss)
                # Taken, not looked up: the backward drops the value after its last reader,
                # as the plan does, and no other reference keeps it alive.
                return saved.pop(n["name"])

            self._graph = "backward"
            self.ledger = _Ledger(self.unique_shards, self.resident.values())
            for flat, _ in self.gathered.values():  # what the forward left gathered
                self.ledger.hold(flat)
            self._backward.run(backward_feed)
            self.peak_bytes["backward"] = self.ledger.peak
            try:
                self.settle()
            except RuntimeError as e:
                raise _failed(self, "output", "the step's last reduce-scatters", e) from e
            self.gathered = {}
        return loss


class _Member:
    """A reduce_grad in its bucket: the parameter (ds), its shard's size and its offset in
    the bucket's per-rank segment."""

    def __init__(self, ds, shard, offset):
        self.ds, self.shard, self.offset = ds, shard, offset


class _ScatterBucket:
    """One reduce-scatter: its members' gradients, as in the C++ executor
    (runtime/train/zero3.h), laid out in `inp` as P segments, one per rank, each the
    members' shard-sized slices in bucket order, so the reduce-scatter leaves each rank
    exactly its shards in `out`. Both buffers are communication buffers kept across steps,
    not the step's memory (the simulator counts the gradients, held until the bucket's
    reduce-scatter completes)."""

    def __init__(self, world):
        self.world = world
        self.members = []
        self.segment = 0
        self.dtype = None
        self.inp = self.out = None
        self.arrived = 0
        self.held = []

    def add(self, k, g):
        """Member k's gradient, copied into its slices (its padding written as zeros)."""
        m = self.members[k]
        flat = g.reshape(-1)
        if flat.numel() != m.shard * self.world:
            flat = torch.cat([flat, flat.new_zeros(m.shard * self.world - flat.numel())])
        rows = self.inp.view(self.world, self.segment)[:, m.offset:m.offset + m.shard]
        rows.copy_(flat.view(self.world, m.shard))
        self.arrived += 1
        self.held.append(g)

    def take(self):
        """The members' gradients, held until the reduce-scatter completes; the bucket is
        ready for the next step."""
        held, self.held, self.arrived = self.held, [], 0
        return held


def _reduce_buckets(nodes, shards, world):
    """([_ScatterBucket], {reduce_grad node: (bucket, member)}): the backward's reduce_grads
    grouped by their `bucket` kwargs (the plan's reduce-scatter bucketing; one each
    without), in the backward's order."""
    buckets, slot, of_kwarg = [], {}, {}
    for n in nodes:
        if n.get("target") != "dc.reduce_grad":
            continue
        ds = n["args"][2]
        kw = n.get("kwargs", {}).get("bucket")
        if kw is not None and kw in of_kwarg:
            b = of_kwarg[kw]
        else:
            b = len(buckets)
            buckets.append(_ScatterBucket(world))
            if kw is not None:
                of_kwarg[kw] = b
        bucket, shard = buckets[b], shards[ds]
        if bucket.dtype is not None and bucket.dtype != shard.dtype:
            raise ValueError(f"overlap.torch.zero3: node '{n['name']}': its bucket mixes "
                             f"dtypes ({bucket.dtype}, {shard.dtype}): one flat buffer per "
                             "bucket")
        bucket.dtype = shard.dtype
        slot[n["name"]] = (b, len(bucket.members))
        bucket.members.append(_Member(ds, shard.numel(), bucket.segment))
        bucket.segment += shard.numel()
    for bucket in buckets:
        device = shards[bucket.members[0].ds].device
        bucket.inp = torch.zeros(world * bucket.segment, dtype=bucket.dtype, device=device)
        bucket.out = torch.empty(bucket.segment, dtype=bucket.dtype, device=device)
    return buckets, slot


def _reduce_releases(backward, nodes, world):
    """{reduce_grad node: the last position before the simulated schedule completes its
    reduce-scatter}: the plan's backward (`nodes`, its document's) simulated at this world
    size with its trace (the bucket's completion for a bucketed reduce)."""
    sim = _overlap.simulate(backward, world_size=world, trace=True)
    position = {n["name"]: i for i, n in enumerate(nodes)}
    end = {}
    for name, stream, _, finish in sim["events"]:
        if stream == 1:
            end[name] = max(end.get(name, 0.0), finish)
    bucket_end = {}
    for n in nodes:
        b = n.get("kwargs", {}).get("bucket")
        if n.get("target") == "dc.reduce_grad" and b is not None and n["name"] in end:
            bucket_end[b] = max(bucket_end.get(b, 0.0), end[n["name"]])
    out = {}
    for n in nodes:
        if n.get("target") != "dc.reduce_grad":
            continue
        b = n.get("kwargs", {}).get("bucket")
        t = bucket_end.get(b, end.get(n["name"])) if b is not None else end.get(n["name"])
        if t is None:
            out[n["name"]] = position[n["name"]]
            continue
        last = bisect.bisect_left(sim["reached_s"], t) - 1
        out[n["name"]] = max(position[n["name"]], last)
    return out


def zero3(model, example_inputs, target=None, *, loss="ce", group=None, algorithm=None,
          budget_bytes=None, recompute=True, offload=True):
    """`model` trained with ZeRO-3 over `group` (the default process group; one process
    without torch.distributed): its step captured on `example_inputs` (a list of tensors)
    and `target` with `loss` ("ce", "mse", "sum": the exporter's losses), planned by
    scheduler `algorithm` (ours by default) under `budget_bytes` (none: no limit), with the
    recompute and offload levers as `overlap plan` takes them. Static shapes: every step's
    batch has the example's shapes. Returns a Zero3 whose parameters() are this rank's
    shards. Cost: one capture and one plan (seconds), then per step the graphs' ops."""
    return Zero3(model, example_inputs, target, loss, group, algorithm, budget_bytes,
                 recompute, offload)


class LiveBytes:
    """A counting allocator for CPU runs, where torch keeps no allocator statistics: while
    active (a context manager), every tensor an ATen op returns is counted by its storage
    until the last tensor on that storage is freed; `peak` is the most bytes alive at once.
    Storages that existed before (parameters, shards, optimizer state) are not counted,
    whatever returns them. Measures torch's own steps (FSDP2's) and ours alike."""

    def __init__(self):
        self.live = 0
        self.peak = 0
        self._refs = {}  # address: [tensors alive on it, bytes, allocation number]
        self._events = []  # (allocation number, +bytes or -bytes) in order

    @property
    def transient_peak(self):
        """The peak of what the step allocated and freed again: without the storages still
        alive at the end (gradient shards, resident copies, optimizer state: per-rank
        state, as the simulator leaves it out). By allocation, not address: a storage
        freed mid-step whose address a lasting one takes later is counted."""
        lasting = {held[2] for held in self._refs.values()}
        live = peak = 0
        for allocation, delta in self._events:
            if allocation in lasting:
                continue
            live += delta
            peak = max(peak, live)
        return peak

    def __enter__(self):
        import gc
        import weakref

        from torch.utils._python_dispatch import TorchDispatchMode

        from torch.multiprocessing.reductions import StorageWeakRef

        gc.collect()
        owner = self
        # The storages alive before, by address, each with a weak reference: an address
        # whose storage has died since is a new storage (the allocator hands a freed
        # resident's address to its refreshed copy), and is counted.
        before = {}
        for obj in gc.get_objects():
            if type(obj) in (torch.Tensor, torch.nn.Parameter) and not obj.is_meta:
                try:
                    s = obj.untyped_storage()
                    before[s.data_ptr()] = StorageWeakRef(s)
                except RuntimeError:
                    pass

        def release(ptr):
            held = owner._refs.get(ptr)
            if held is None:
                return
            held[0] -= 1
            if held[0] == 0:
                owner.live -= held[1]
                owner._events.append((held[2], -held[1]))
                del owner._refs[ptr]

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in torch.utils._pytree.tree_leaves(out):
                    if not isinstance(t, torch.Tensor) or type(t) is not torch.Tensor:
                        continue
                    s = t.untyped_storage()
                    ptr = s.data_ptr()
                    if ptr == 0:
                        continue
                    old = before.get(ptr)
                    if old is not None:
                        if not old.expired():
                            continue
                        del before[ptr]
                    held = owner._refs.get(ptr)
                    if held is None:
                        held = owner._refs[ptr] = [0, s.nbytes(), len(owner._events)]
                        owner.live += held[1]
                        owner._events.append((held[2], held[1]))
                        owner.peak = max(owner.peak, owner.live)
                    held[0] += 1
                    weakref.finalize(t, release, ptr)
                return out

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False
