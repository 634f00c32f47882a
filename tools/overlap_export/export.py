"""Exports a PyTorch model as overlap graphs: the module-style torch.fx forward (for the DDP
partitioner) and the AOT forward / backward pair in ATen ops (for ZeRO-3 and the executor),
following docs/format.md and docs/ops.md's calling convention of AOT pairs.
"""

import contextlib
import copy
import functools
import gc
import importlib
import math
import operator

import torch
import torch.fx
import torch.utils._pytree
import torch.utils._python_dispatch
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from . import graph_json, safetensors
from .diagnose import describe
from .errors import ExportError, note
from .inputs import input_spec

# ---- the user's code ----


def _exit_call(e):
    """How the code that raised SystemExit `e` called it: sys.exit(3), sys.exit()."""
    return "sys.exit()" if e.code is None else f"sys.exit({e.code!r})"


@contextlib.contextmanager
def user_code(step, who, model=None):
    """Runs the model's own code (its module's import, its constructor, its forward) as
    export step `step`: any exception it raises becomes ExportError(step) describing it in
    one sentence (diagnose.describe: the module of `model` whose code raised it, the
    construct or the exception, the model's source line), and a SystemExit (sys.exit) a
    fatal one saying that `who` called it. The exporter's own ExportErrors and
    KeyboardInterrupt pass through unchanged."""
    try:
        yield
    except ExportError:
        raise
    except SystemExit as e:
        raise ExportError(step, f"{who} called {_exit_call(e)}", fatal=True) from None
    except Exception as e:  # noqa: BLE001 - every failure is reported with its step
        raise ExportError(step, describe(e, model)) from e


def _trace_leftover(t):
    """Whether `t` is a tensor a torch 2.x trace left behind (a FunctionalTensor or
    FakeTensor stored in a module attribute by a forward pre-hook): it has no data."""
    try:
        t.data_ptr()
        return False
    except RuntimeError:
        return True


def copy_model(model):
    """copy.deepcopy(model), except that a tensor deepcopy refuses, one computed from the
    parameters with autograd's graph attached (nn.utils.weight_norm's and spectral_norm's
    `weight`, which their forward pre-hooks recompute from the parameters on every call),
    is copied as a detached clone. Such tensors are found in the modules' attributes and
    the lists, tuples and dicts those hold."""
    memo, seen = {}, set()

    def visit(value):
        if isinstance(value, torch.Tensor):
            if id(value) in memo:
                pass
            elif _trace_leftover(value):
                # What a torch 2.x trace left in the attribute (a FunctionalTensor, which has
                # no value outside the trace): the hook recomputes it on every call.
                memo[id(value)] = None
            elif not value.is_leaf:
                memo[id(value)] = value.detach().clone()
        elif isinstance(value, (list, tuple, dict, set)) and id(value) not in seen:
            seen.add(id(value))
            for v in value.values() if isinstance(value, dict) else value:
                visit(v)
    for m in model.modules():
        visit(vars(m))
    return copy.deepcopy(model, memo)


# ---- loading ----


def load_model(spec, kwargs=None):
    """`pkg.mod:fn` called with `kwargs`: the model (an nn.Module)."""
    if ":" not in spec:
        raise ExportError("import", f"'{spec}' is not of the form pkg.module:constructor")
    module_name, attr = spec.split(":", 1)
    with user_code("import", f"importing {module_name}"):
        module = importlib.import_module(module_name)
    with user_code("import", f"{spec}'s lookup"):
        fn = module
        for part in attr.split("."):
            fn = getattr(fn, part)
    with user_code("import", "the model's constructor"):
        model = fn(**(kwargs or {}))
    if not isinstance(model, torch.nn.Module):
        raise ExportError("import", f"{spec} returned a {type(model).__name__}, not a Module")
    return model


def parse_input(spec, seed):
    """`2x3x32x32` (float32), `2x3x32x32:float64`, or `4x16:int64:50` (integers in [0, 50);
    [0, 2) without a bound)."""
    try:
        shape, dtype_name, high = input_spec(spec)
        dtype = getattr(torch, dtype_name)
        g = torch.Generator().manual_seed(seed)
        if high is None:
            return torch.randn(shape, dtype=dtype, generator=g)
        return torch.randint(0, high, shape, dtype=dtype, generator=g)
    except (ValueError, RuntimeError) as e:
        raise ExportError("inputs", f"bad input spec '{spec}': {e}") from e


def _storage(t):
    # 2.x: untyped_storage() (storage() warns there, as TypedStorage is deprecated); 1.13.
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def _storage_key(t):
    return _storage(t).data_ptr()


def _storage_bytes(t):
    return int(_storage(t).nbytes())


def _param_entry(name, owner, p, storage):
    e = {
        "name": name,
        "owner": owner,
        "shape": [int(d) for d in p.shape],
        "dtype": graph_json.dtype_name(p.dtype),
        "bytes": _storage_bytes(p),
    }
    if not p.requires_grad:
        e["requires_grad"] = False
    if storage != name:
        e["storage"] = storage
    return e


def plain_tensors_as_buffers(model):
    """Registers each tensor a module keeps as a plain attribute (VideoMAE's sinusoidal
    position table) as a non-persistent buffer of that module, and returns their names.
    torch 2.x's fake-tensor trace refuses a real tensor it meets; as a buffer it is a
    placeholder like any other, written to the weights file, and the module-style graph
    reads it as it reads a buffer. Left alone: parameters, buffers, and tensors with
    autograd history or a trace's leftovers (weight_norm's `weight`, which a hook
    recomputes from the parameters on every call)."""
    lifted = []
    for prefix, m in model.named_modules():
        for attr, value in list(vars(m).items()):
            if (not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter)
                    or value.requires_grad or not value.is_leaf or _trace_leftover(value)):
                continue
            delattr(m, attr)
            m.register_buffer(attr, value, persistent=False)
            lifted.append(f"{prefix}.{attr}" if prefix else attr)
    return lifted


def all_named_parameters(module, prefix=""):
    """(name, parameter) for every path to a parameter, tied ones and shared modules included
    (what named_parameters(remove_duplicate=False) gives in later versions; 1.13 lacks it)."""
    for n, p in module._parameters.items():
        if p is not None:
            yield prefix + n, p
    for n, child in module._modules.items():
        if child is not None:
            yield from all_named_parameters(child, prefix + n + ".")


def unique_parameter_storages(model):
    """(storages, elements) over the model's parameters, each storage once."""
    seen = {}
    for p in model.parameters():
        seen.setdefault(_storage_key(p), p.numel())
    return len(seen), sum(seen.values())


@contextlib.contextmanager
def buffers_kept(model):
    """Restores the model's buffers on exit: a forward in training mode updates batch norm's
    running statistics, and only a training step may (the exporter's probing forwards, the
    loss target's, the reference's, must leave the weights as the files state them)."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, value in saved:
                b.copy_(value)


# ---- module style (torch.fx) ----


class _Recorder(torch.fx.Interpreter):
    """Runs a traced module, recording each node's tensor metadata and whether its result
    shares storage with its first tensor input (aliases_input)."""

    def __init__(self, gm):
        super().__init__(gm)
        self.aliases = {}
        self.draws = {}  # a random op's result (torch's own mask), by node name

    def run_node(self, n):
        result = super().run_node(n)
        if _is_random(n) and isinstance(result, torch.Tensor):
            self.draws[n.name] = result.detach().clone()
        if isinstance(result, torch.Tensor):
            n.meta["tensor_meta"] = _extract_tensor_metadata(result)
            for i in n.all_input_nodes:
                v = self.env.get(i)
                if isinstance(v, torch.Tensor):
                    if result.numel() > 0 and _storage_key(v) == _storage_key(result):
                        self.aliases[n.name] = True
                    break
        elif isinstance(result, (tuple, list)) and result and all(
                r is None or isinstance(r, torch.Tensor) for r in result):
            n.meta["tensor_meta"] = [
                None if r is None else _extract_tensor_metadata(r) for r in result]
        return result


def _is_random(node):
    """Whether `node` calls an ATen op that draws random numbers: its schema declares a
    `Generator? generator` (bernoulli_, the dropout torch 1.13 decomposes into)."""
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return schema is not None and any(a.name == "generator" for a in schema.arguments)


@contextlib.contextmanager
def _containers_kept(model):
    """Restores the dicts and lists the model's modules hold as attributes: a forward that
    caches a value in one (timm's attention_bias_cache) would keep torch.fx's proxy there
    after the symbolic trace, for every later call to read."""
    saved = []
    for m in model.modules():
        for value in vars(m).values():
            if type(value) in (dict, list):
                saved.append((value, value.copy()))
    try:
        yield
    finally:
        for value, copy_ in saved:
            value.clear()
            if isinstance(value, dict):
                value.update(copy_)
            else:
                value.extend(copy_)


def export_module_style(model, inputs, name):
    """The forward as torch.fx traces it (call_module / get_attr), with the parameter table
    by owner. ExportError("trace") when torch.fx cannot trace the model symbolically."""
    with user_code("trace", "the model's forward"), _containers_kept(model):
        try:  # user_code: sys.exit is fatal, not untraceable
            gm = torch.fx.symbolic_trace(model)
        except Exception as e:  # noqa: BLE001
            raise ExportError("trace", "torch.fx cannot trace it symbolically: "
                              + describe(e, model)) from e
    rec = _Recorder(gm)
    # The traced forward on the example inputs (wrong input shapes fail here): not a
    # tracing failure, so not one the AOT path would get past.
    with torch.no_grad(), buffers_kept(model), \
            user_code("forward", "the model's forward", model):
        rec.run(*inputs)
    first = {}
    for n, p in all_named_parameters(model):
        first.setdefault(_storage_key(p), n)
    params, seen = [], set()
    for node in gm.graph.nodes:
        owned = []
        if node.op == "call_module":
            mod = gm.get_submodule(node.target)
            owned = [(f"{node.target}.{n}", p) for n, p in all_named_parameters(mod)]
        elif node.op == "get_attr":
            obj = gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, torch.nn.Parameter):
                owned = [(node.target, obj)]
        for pname, p in owned:
            if (node.target, pname) in seen:
                continue
            seen.add((node.target, pname))
            params.append(_param_entry(pname, node.target, p, first[_storage_key(p)]))
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    extra = {n.name: {"input": f"input/{i}"} for i, n in enumerate(phs)}
    # The module's class, by which `overlap annotate` picks a cost formula
    # (docs/cost-model.md): a call_module node's target is only its path in the model.
    for node in gm.graph.nodes:
        if node.op == "call_module":
            cls = type(gm.get_submodule(node.target))
            extra[node.name] = {"module": f"{cls.__module__}.{cls.__qualname__}"}
    return graph_json.graph_json(name, gm.graph, params, extra, aliases=rec.aliases,
                                 capture="torch.fx")


def export_dynamo(model, inputs, name):
    """The forward as torch.compile hands it to a backend: dynamo's FX graph in torch's own
    functions, every parameter and buffer a graph input (meta.param names a parameter's),
    with the parameter table. What a DDP backend (DDPOptimizer's place) partitions.
    ExportError("dynamo") when torch.compile cannot capture the forward as one graph."""
    import torch._dynamo

    captured = []

    def backend(gm, example_inputs):
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    # With gradients on, as a training step runs it (modules take other paths without).
    with user_code("dynamo", "the model's forward", model), buffers_kept(model):
        try:
            torch.compile(model, backend=backend, fullgraph=True, dynamic=False)(*inputs)
        except Exception as e:  # noqa: BLE001
            raise ExportError("dynamo", "torch.compile cannot capture it as one graph: "
                              + describe(e, model)) from e
        finally:
            torch._dynamo.reset()
    gm, examples = captured[0]
    return dynamo_graph_json(gm, examples, model, name)


def dynamo_graph_json(gm, examples, model, name):
    """The document of a graph torch.compile handed a backend (`gm`, its `examples`): a
    placeholder whose example is one of `model`'s parameters gets the table's entry and
    meta.param, a buffer meta.buffer, anything else meta.input ("input/<k>"); shapes and
    dtypes from dynamo's fake values (node.meta["example_value"]). What export_dynamo writes
    and overlap.from_fx converts in memory. With `model` None, a placeholder whose example is
    a torch.nn.Parameter is a parameter named by the placeholder's target (dynamo's
    `L_self_modules_fc_parameters_weight_`, as DDPOptimizer names it), and there are no
    buffers."""
    first, by_id = {}, {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if model is not None:
        named = all_named_parameters(model)
        buffers = {id(b): n for n, b in model.named_buffers()}
    else:
        named = [(str(node.target), v) for node, v in zip(placeholders, examples)
                 if isinstance(v, torch.nn.Parameter)]
        buffers = {}
    for n, p in named:
        first.setdefault(_storage_key(p), n)
        by_id.setdefault(id(p), n)
    params, extra, k = [], {}, 0
    for node, value in zip(placeholders, examples):
        if id(value) in by_id:
            pname = by_id[id(value)]
            params.append(_param_entry(pname, node.name, value, first[_storage_key(value)]))
            extra[node.name] = {"param": pname}
        elif id(value) in buffers:
            extra[node.name] = {"buffer": buffers[id(value)]}
        else:
            extra[node.name] = {"input": f"input/{k}"}
            k += 1
    # Shapes from dynamo's fake values, as graph_json reads them (node.meta["tensor_meta"]),
    # put back afterwards: the graph may go on to a backend that reads torch's own.
    saved = {node: node.meta.get("tensor_meta", _ABSENT) for node in gm.graph.nodes}
    try:
        for node in gm.graph.nodes:
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor):
                node.meta["tensor_meta"] = value
            elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor)
                                                          for v in value):
                node.meta["tensor_meta"] = [v if isinstance(v, torch.Tensor) else None
                                            for v in value]
        return graph_json.graph_json(name, gm.graph, params, extra, capture="dynamo")
    finally:
        for node, old in saved.items():
            if old is _ABSENT:
                node.meta.pop("tensor_meta", None)
            else:
                node.meta["tensor_meta"] = old


_ABSENT = object()  # a meta key that was not there


def exported_module(model, inputs):
    """torch.export's capture of the forward (its training IR), as a module that keeps the
    model's parameter and buffer names, for AOTAutograd to split into the pair. Shapes are
    static: every dimension is the example inputs' own (no dynamic_shapes are given, so
    torch.export specialises a symbolic size to its example value). ExportError("export")
    when torch.export cannot capture the forward (data-dependent control flow, ...)."""
    with user_code("export", "the model's forward", model), buffers_kept(model):
        try:
            program = torch.export.export(model, tuple(inputs))
        except Exception as e:  # noqa: BLE001
            raise ExportError("export", "torch.export cannot capture it: "
                              + describe(e, model)) from e
    module = program.module()
    # torch.export checks its specialisation at run time (the inputs' dtype and shape, its
    # assumed ranges): nodes that compute nothing and that the static pair does not need.
    checks = {getattr(torch.ops.aten, n).default for n in
              ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size",
               "_assert_async") if hasattr(torch.ops.aten, n)}
    for node in list(module.graph.nodes):
        if node.op == "call_function" and node.target in checks and not node.users:
            module.graph.erase_node(node)
    module.recompile()
    return module


# ---- AOT (functorch) ----


def _schema_aliases(node):
    t = node.target
    if node.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
        return False
    returns = t._schema.returns
    return bool(returns) and returns[0].alias_info is not None


def _loss_fn(kind, out, target):
    if kind == "none":
        return out
    if kind == "sum":
        return out.sum()
    if kind == "mse":
        return torch.nn.functional.mse_loss(out, target)
    if kind == "ce":
        if out.dim() == 3:  # language models: [batch, seq, vocab]
            return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                     target.reshape(-1))
        return torch.nn.functional.cross_entropy(out, target)
    raise ExportError("loss", f"unknown loss '{kind}' (none, sum, mse, ce)")


def loss_target(kind, model, inputs, seed):
    """The labels a loss needs (None for none / sum): MSE's target of the output's shape,
    cross-entropy's class indices over the output's last dimension."""
    if kind in ("none", "sum"):
        return None
    with torch.no_grad(), buffers_kept(model), user_code("loss", "the model's forward", model):
        out = model(*inputs)
    g = torch.Generator().manual_seed(seed)
    if kind == "mse":
        return torch.randn(out.shape, dtype=out.dtype, generator=g)
    if kind == "ce":
        return torch.randint(0, out.shape[-1], out.shape[:-1], generator=g)
    raise ExportError("loss", f"unknown loss '{kind}' (none, sum, mse, ce)")


def aot_api():
    """(aot_function, make_boxed_func, default_partition): PyTorch 2.x's torch._functorch
    when present, else 1.13's functorch.compile (which 2.x keeps as a deprecated re-export).
    Only the 1.13 path is tested here (docs/interop.md, "PyTorch 2.x")."""
    try:
        from torch._functorch.aot_autograd import aot_function, make_boxed_func
        from torch._functorch.partitioners import default_partition
        return aot_function, make_boxed_func, default_partition
    except ImportError:
        pass
    try:
        from functorch.compile import aot_function, make_boxed_func, default_partition
    except ImportError as e:
        raise ExportError("aot", f"functorch is not importable: {e}") from e
    return aot_function, make_boxed_func, default_partition


def functional_call_api():
    """torch.func.functional_call (2.x) when present, else 1.13's
    torch.nn.utils.stateless.functional_call (deprecated in 2.x)."""
    func = getattr(torch, "func", None)
    if func is not None and hasattr(func, "functional_call"):
        # The caller names every tied path itself, one per (module, attribute) slot
        # (_one_path_per_slot): torch's own tying would swap a shared module's slot once
        # per path and restore the trace's tensor into the model.
        return functools.partial(func.functional_call, tie_weights=False)
    return torch.nn.utils.stateless.functional_call


def export_aot(model, inputs, loss, target, name):
    """The AOT pair (functorch's aot_function, default partition, torch 1.13) rewritten to
    docs/ops.md's convention. Returns (forward_doc, backward_doc, constants, reference):
    constants maps constant/<name> to the value of each tensor constant the pair reads
    (docs/interop.md), and random/<node> to torch's own draw of each random op (dropout's
    mask); reference, for a pair with random ops, is torch's loss and gradients from the
    pair's own run on those draws (ref/loss, ref/grad/<name>: what the executor, fed the
    same draws, must give), else empty.
    ExportError when the pair reads a tensor that has no value, reads a parameter or buffer
    as a constant, or leaves a parameter without the gradient torch gives it."""
    aot_function, make_boxed_func, default_partition = aot_api()
    functional_call = functional_call_api()
    named = list(model.named_parameters())  # one per storage (tied weights once)
    buffers = list(model.named_buffers())
    aliases = {}  # every parameter name -> the name its storage is lifted as
    first_by_storage = {_storage_key(p): n for n, p in named}
    for n, p in all_named_parameters(model):
        aliases[n] = first_by_storage[_storage_key(p)]
    swapped = _one_path_per_slot(model, [n for n, _ in named], aliases)
    state_names = [n for n, _ in named] + [n for n, _ in buffers]
    k = len(state_names)
    n_in = len(inputs)
    captured = {}
    rnns = [(prefix, m) for prefix, m in model.named_modules()
            if isinstance(m, torch.nn.RNNBase)]

    def fw_compiler(gm, _):
        captured["fw"] = gm
        return make_boxed_func(gm.forward)

    def bw_compiler(gm, _):
        captured["bw"] = gm
        return make_boxed_func(gm.forward)

    def step(*args):
        state = dict(zip(state_names, args[:k]))
        for alias in swapped:
            state[alias] = state[aliases[alias]]
        with _rnn_weights_from(rnns, state):
            out = functional_call(model, state, tuple(args[k:k + n_in]))
        return (_loss_fn(loss, out, args[k + n_in] if target is not None else None),)

    args = [p.detach().requires_grad_(p.requires_grad) for _, p in named]
    # Copies of the buffers: torch 1.13's AOT forward runs native_batch_norm, which updates
    # the running statistics it is given in place.
    args += [b.detach().clone() for _, b in buffers] + list(inputs)
    if target is not None:
        args.append(target)
    buffer_args = args[len(named):len(named) + len(buffers)]
    before = [b.clone() for b in buffer_args]
    with user_code("aot", "the model's forward", model), _math_attention(), _as_compiling():
        compiled = aot_function(step, fw_compiler, bw_compiler, partition_fn=default_partition,
                                decompositions=_decompositions())
        try:
            outputs = compiled(*args)
            result = outputs[0]
        except Exception as e:  # noqa: BLE001 - re-raised unless it is the case below
            owner = _real_state_in_trace(model, e)
            if owner is None:
                raise
            if owner[0] == "cached":
                raise ExportError(
                    "aot", f"the forward reads a tensor that module '{owner[1] or 'the model'}' "
                           f"keeps in its attribute '{owner[2]}', a value an earlier call "
                           "cached (LeViT's and EfficientFormer's attention-bias caches in "
                           "evaluation mode, in timm and transformers): the "
                           "trace cannot read it and its parameters would get no gradient "
                           "through it; export in training mode (--train)") from None
            raise _read_as_constant("forward", *owner) from None
        if result.requires_grad:
            result.sum().backward()
    n_user = len(torch.utils._pytree.tree_flatten(outputs)[0])
    # The buffers the step changed (torch 2.x returns their new values as forward outputs,
    # in input order; 1.13 changed them in place through native_batch_norm).
    mutated = [buffers[j][0] for j, b in enumerate(buffer_args) if not torch.equal(b, before[j])]
    if "fw" not in captured or "bw" not in captured:
        raise ExportError("aot", "AOTAutograd produced no backward (no parameter needs a "
                                 "gradient?)")
    # Every value's metadata (tuples included) from a run on the example inputs: the
    # forward on the step's arguments, the backward on its saved values and ones tangents.
    with torch.no_grad():
        forward = _Recorder(captured["fw"])
        fw_out = list(forward.run(*args))
        n_saved = len([n for n in captured["bw"].graph.nodes
                       if n.op == "placeholder" and not n.name.startswith("tangents")])
        # torch 2.x's forward returns the new values of the inputs it mutated (training-mode
        # batch norm's buffers) before the step's outputs; 1.13's returns none.
        n_mutated = len(fw_out) - n_user - n_saved
        if n_mutated not in (0, len(mutated)):
            raise ExportError("aot", f"torch's forward returns {n_mutated} new values of mutated "
                                     f"inputs, but {len(mutated)} buffers changed: "
                                     f"{', '.join(mutated) or 'none'}")
        tangents = [torch.ones_like(o) for o in fw_out[n_mutated:n_mutated + n_user]]
        bw_out = list(_Recorder(captured["bw"]).run(*fw_out[n_mutated + n_user:], *tangents))
    constants = _constants(captured["fw"], "forward", model)
    carried = _constants(captured["bw"], "backward", model)
    fw, bw = captured["fw"].graph, captured["bw"].graph
    fw_doc, bw_doc = _convention(fw, bw, named, buffers, aliases, name, n_in,
                                 target is not None, constants, carried,
                                 dict(model.named_modules()), mutated[:n_mutated])
    _check_gradients(model, inputs, loss, target, fw_doc, bw_doc)
    tensors = {f"constant/{c.key}": c.value for c in constants + carried}
    reference = {}
    if forward.draws:
        names = {n["name"] for n in fw_doc["nodes"]}
        for node_name, draw in forward.draws.items():
            if node_name not in names:
                raise ExportError("aot", f"the random op '{node_name}' is not in the forward "
                                         "graph written")
            tensors[f"random/{node_name}"] = draw
        if loss != "none":
            reference["ref/loss"] = fw_out[n_mutated].detach()
            for i, (n, p) in enumerate(named):
                if p.requires_grad and i < len(bw_out) and bw_out[i] is not None:
                    reference[f"ref/grad/{n}"] = bw_out[i].detach()
    return fw_doc, bw_doc, tensors, reference


def _one_path_per_slot(model, firsts, aliases):
    """The alias names (of `aliases`, beyond `firsts`) the functional call must swap: one
    name per (module, attribute) slot. A module reachable by two paths (CoaT's shared
    convolutional position encodings) has one slot under both names; swapping it twice makes
    torch's functional call restore the swapped-in tensor, leaving a trace's tensor in the
    model."""
    def slot(name):
        owner, _, attr = name.rpartition(".")
        return id(model.get_submodule(owner) if owner else model), attr
    seen = {slot(n) for n in firsts}
    out = []
    for alias in aliases:
        s = slot(alias)
        if s not in seen:
            seen.add(s)
            out.append(alias)
    return out


def _read_as_constant(which, kind, owner, how=None):
    """The refusal of a graph that reads the model's parameter or buffer `owner` as a
    constant (`how`: the node, where the graph has one), which would get no gradient."""
    at = f" ({how})" if how else ""
    return ExportError("aot", f"the {which} graph reads {kind} '{owner}' as a constant{at}: "
                              f"module '{_owner_module(owner)}' keeps its own reference to it, "
                              "which the functional call does not replace, so it would get no "
                              "gradient")


def _real_state_in_trace(model, e):
    """(kind, name) of the model's parameter or buffer that torch 2.x's fake-tensor trace
    met as a real tensor (a reference the functional call did not swap: the case 1.13's
    trace showed as a get_attr constant), found among the locals of the frames `e` passed
    through; None for any other failure."""
    if "FakeTensor" not in str(e):
        return None
    state = {id(p): ("parameter", n) for n, p in model.named_parameters()}
    state.update({id(b): ("buffer", n) for n, b in model.named_buffers()})
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    # Innermost first: the first real tensor met there is the one fake-tensor mode refused
    # (an outer frame's locals hold the model's real parameters for other reasons).
    fake = getattr(getattr(torch, "_subclasses", None), "FakeTensor", ())
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, torch.Tensor) and not isinstance(item, fake):
                    return state.get(id(item)) or _cached_in(model, item)
    return None


def _cached_in(model, tensor):
    """("cached", module name, attribute) of the module attribute (a list, tuple or dict
    of tensors) that holds `tensor`, or None."""
    for prefix, m in model.named_modules():
        for attr, value in vars(m).items():
            items = (value.values() if isinstance(value, dict)
                     else value if isinstance(value, (list, tuple)) else ())
            if any(item is tensor for item in items):
                return "cached", prefix, attr
    return None


def _math_attention():
    """torch 2.x: scaled-dot-product attention traced as its math (matmuls, a softmax, the
    mask's where), forward and backward, instead of the CPU flash kernel pair, which the
    executor does not run; the same formula torch's math backend computes. A no-op on 1.13,
    whose attention is math already."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])


@contextlib.contextmanager
def _as_compiling():
    """torch.compiler.is_compiling() answers True while the AOT pair is traced: the capture is
    the graph torch.compile hands a backend, and models branch on that question to take
    their traceable path (transformers' masks skip a data-dependent packed-sequence check,
    for one). Eager runs (the reference, the loss's target) see False as ever."""
    compiler = getattr(torch, "compiler", None)
    if compiler is None or not hasattr(compiler, "is_compiling"):
        yield
        return
    saved = compiler.is_compiling
    compiler.is_compiling = lambda: True
    try:
        yield
    finally:
        compiler.is_compiling = saved


def _decompositions():
    """ATen ops the AOT pair writes in others (AOTAutograd's decomposition table), ones the
    executor runs. nn.utils.weight_norm's fused pair, which torch 1.13 calls for a norm over
    every dimension but the first or the last, as ATen's WeightNorm.cpp computes it:
    w = v (g / n), n the 2-norm of v over every dimension but `dim`, kept (g's shape); the
    backward, with s = sum(grad_w v) over the same dimensions: grad_v = (g / n) (grad_w -
    v s / n^2), grad_g = s / n. A whole tensor's norm (weight_norm with dim=None) as the norm
    over its every dimension. torch 2.x's whole _embedding_bag_backward and native_dropout
    in the ops 1.13 wrote for them."""
    aten = torch.ops.aten

    def others(v, dim):
        return [d for d in range(v.dim()) if d != dim]

    def weight_norm(v, g, dim=0):
        norms = aten.norm.ScalarOpt_dim(v, 2, others(v, dim), True)
        return aten.mul.Tensor(v, aten.div.Tensor(g, norms)), norms

    def weight_norm_backward(grad_w, v, g, norms, dim):
        sums = aten.sum.dim_IntList(aten.mul.Tensor(grad_w, v), others(v, dim), True)
        projected = aten.mul.Tensor(v, aten.div.Tensor(sums, aten.mul.Tensor(norms, norms)))
        grad_v = aten.mul.Tensor(aten.div.Tensor(g, norms), aten.sub.Tensor(grad_w, projected))
        return grad_v, aten.div.Tensor(sums, norms)

    def norm(x, p=2):
        return aten.norm.ScalarOpt_dim(x, p, list(range(x.dim())), False)

    def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                               num_weights, scale_grad_by_freq, mode, sparse,
                               per_sample_weights, padding_idx=-1):
        # ATen's _embedding_bag_backward (torch 2.x keeps it whole), dense: where the forward
        # left offset2bag empty (sum mode's fast path), index i lies in bag #{j >= 1 :
        # offsets[j] <= i}. (sparse=True gives the same values densely.)
        n = indices.shape[0]
        if n != 0 and offset2bag.numel() == 0:
            later = aten.slice.Tensor(offsets, 0, 1, offsets.shape[0])
            marks = aten.index_add.default(aten.new_zeros.default(offsets, [n + 1]), 0, later,
                                           aten.ones_like.default(later))
            offset2bag = aten.slice.Tensor(aten.cumsum.default(marks, 0), 0, 0, n)
        return aten._embedding_bag_dense_backward.default(
            grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
            scale_grad_by_freq, mode, per_sample_weights, padding_idx)

    def native_dropout(x, p, train):
        # torch 2.x's dropout in training, as 1.13 wrote it: a Bernoulli mask of keep
        # probability 1 - p (bernoulli.p, whose draws the exporter records), the input
        # scaled by 1 / (1 - p) where kept; the mask as bool.
        if not train or p == 0:
            return aten.clone.default(x), aten.ones_like.default(x, dtype=torch.bool)
        if p >= 1:
            return aten.zeros_like.default(x), aten.zeros_like.default(x, dtype=torch.bool)
        keep = aten.bernoulli.p(x, 1.0 - p)
        out = aten.mul.Tensor(aten.mul.Tensor(x, keep), 1.0 / (1.0 - p))
        return out, aten.ne.Scalar(keep, 0)

    def native_dropout_backward(grad, mask, scale):
        return aten.mul.Tensor(aten.mul.Tensor(grad, mask), scale)

    def batch_norm_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
        # torch 2.x's evaluation-mode batch norm: native_batch_norm with training False (the
        # executor's fused kernel), as 1.13 wrote it.
        return aten.native_batch_norm.default(x, weight, bias, running_mean, running_var,
                                              False, momentum, eps)

    def batch_norm_functional(x, weight, bias, running_mean, running_var, training, momentum,
                              eps):
        # torch 2.x's training-mode batch norm, functional: the batch's normalization
        # (native_batch_norm without running statistics, which it would update in place) and
        # the new statistics as ATen computes them: (1 - m) r + m mean, (1 - m) r + m var
        # n / (n - 1), var = invstd^-2 - eps. 2.x returns them as the buffers' new values.
        if not training:
            out, mean, invstd = aten.native_batch_norm.default(
                x, weight, bias, running_mean, running_var, False, momentum, eps)
            return out, mean, invstd, running_mean, running_var
        out, mean, invstd = aten.native_batch_norm.default(x, weight, bias, None, None, True,
                                                           momentum, eps)
        count = x.numel() // x.shape[1]
        var = aten.add.Tensor(aten.pow.Tensor_Scalar(invstd, -2), -eps)
        unbiased = momentum * count / (count - 1) if count > 1 else momentum
        new_mean = aten.add.Tensor(aten.mul.Tensor(running_mean, 1.0 - momentum),
                                   aten.mul.Tensor(mean, momentum))
        new_var = aten.add.Tensor(aten.mul.Tensor(running_var, 1.0 - momentum),
                                  aten.mul.Tensor(var, unbiased))
        return out, mean, invstd, new_mean, new_var

    def batch_norm_no_stats(x, weight, bias, training, momentum, eps):
        # Batch norm without running statistics (NFNet's scaled weight standardization, a
        # norm with track_running_stats=False): native_batch_norm given None for them.
        return aten.native_batch_norm.default(x, weight, bias, None, None, training, momentum,
                                              eps)

    def alias(x):
        # A view of the whole tensor (torch's own decomposition writes prims.view_of).
        return aten.view.default(x, list(x.shape))

    def copy(x, src, non_blocking=False):
        # Functionalized copy_: src broadcast to x's shape, in x's dtype.
        return aten._to_copy.default(aten.expand.default(src, list(x.shape)), dtype=x.dtype)

    table = {}
    # torch 2.x ops that torch's own decompositions write in ops the executor runs: CPU flash
    # attention as its math (softmax(q k^T scale + mask) v; its backward is that math's, and
    # _safe_softmax, zeros for a row masked whole, as softmax and where), _unsafe_index and
    # _unsafe_index_put as index and index_put, linalg_vector_norm as its elementwise form.
    # im2col and col2im (nn.Unfold and nn.Fold: VOLO's outlook attention) as the gather and
    # the accumulating scatter they are (index, index_put) over a padded input; reflection
    # and replication padding (TResNet, HRNet-style heads) as gathers of clamped or
    # reflected indices, reflection's backward likewise; addcmul and addcdiv (ResMLP's
    # affine layers) as their products and sums.
    names = ("_scaled_dot_product_flash_attention_for_cpu", "_safe_softmax", "_unsafe_index",
             "_unsafe_index_put", "linalg_vector_norm", "im2col", "col2im", "addcmul",
             "addcdiv", "reflection_pad1d", "reflection_pad2d", "reflection_pad3d",
             "reflection_pad1d_backward", "reflection_pad2d_backward",
             "reflection_pad3d_backward", "replication_pad1d", "replication_pad2d",
             "replication_pad3d", "_unsafe_masked_index", "_unsafe_masked_index_put_accumulate")
    present = [getattr(aten, n) for n in names if hasattr(aten, n)]
    if present:
        from torch._decomp import get_decompositions
        table.update(get_decompositions(present))
    for name, fn in (("_native_batch_norm_legit_no_training", batch_norm_no_training),
                     ("_native_batch_norm_legit_functional", batch_norm_functional),
                     ("copy", copy), ("alias", alias)):
        if hasattr(aten, name):
            table[getattr(aten, name).default] = fn
    if hasattr(aten, "_native_batch_norm_legit"):
        table[aten._native_batch_norm_legit.no_stats] = batch_norm_no_stats
    return {**table, aten._weight_norm_interface.default: weight_norm,
            aten._weight_norm_interface_backward.default: weight_norm_backward,
            aten.norm.Scalar: norm,
            aten._embedding_bag_backward.default: embedding_bag_backward,
            aten.native_dropout.default: native_dropout,
            aten.native_dropout_backward.default: native_dropout_backward}


@contextlib.contextmanager
def _rnn_weights_from(rnns, state):
    """Points each RNN module's cached weight list at the step's tensors. torch 1.13's
    functional_call swaps a module's parameters, but nn.RNNBase runs on `_flat_weights`, the
    list it cached at construction: without this the AOT graph reads the original weights as
    constants and the backward returns no gradient for them."""
    old = []
    for prefix, m in rnns:
        old.append(m._flat_weights)
        m._flat_weights = [state.get(f"{prefix}.{wn}" if prefix else wn)
                           for wn in m._flat_weights_names]
    try:
        yield
    finally:
        for (_, m), weights in zip(rnns, old):
            m._flat_weights = weights


class _Constant:
    """A tensor an AOT graph reads through get_attr: its node, the weights file's key
    (constant/<key>) and its value."""

    def __init__(self, node, key, value):
        self.node, self.key, self.value = node, key, value


def _owner_module(target):
    return target.rsplit(".", 1)[0] if "." in target else "the traced graph module"


def _constants(gm, which, model):
    """The tensors `gm` (an AOT graph) reads through get_attr. Each must have a value that is
    neither a parameter nor a buffer of the model (those are placeholders: one read as a
    constant would get no gradient, or a stale value); each becomes a forward placeholder
    bound to constant/<name> (docs/interop.md), the backward's passed to it through the
    forward's saved values (_lift_constants). The pair's get_attr targets are one namespace:
    the partitioner copies both graphs' constants from the joint graph's module."""
    params = {_storage_key(p): n for n, p in model.named_parameters()}
    bufs = {_storage_key(b): n for n, b in model.named_buffers()}
    out = []
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        obj = gm
        try:
            for part in node.target.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            raise ExportError("aot", f"the {which} graph's node '{node.name}' reads "
                                     f"'{node.target}' of {_owner_module(node.target)}, which "
                                     "has no value anywhere") from None
        if not isinstance(obj, torch.Tensor):
            raise ExportError("aot", f"the {which} graph's node '{node.name}' reads "
                                     f"'{node.target}', a {type(obj).__name__}, not a tensor")
        key = _storage_key(obj) if obj.numel() > 0 else None
        if key in params or key in bufs:
            kind, owner = ("parameter", params[key]) if key in params else ("buffer", bufs[key])
            raise _read_as_constant(which, kind, owner, f"get_attr '{node.target}'")
        out.append(_Constant(node, node.target, obj.detach().clone()))
    return out


def _check_gradients(model, inputs, loss, target, fw_doc, bw_doc):
    """Refuses a pair whose backward leaves out a gradient torch's own backward gives (a
    parameter the AOT trace read as something else): on a copy of the model, so buffers
    (batch norm's running statistics) are not updated."""
    if loss == "none":
        return
    probe = copy_model(model)
    with user_code("aot", "the model's forward", probe):
        value = _loss_fn(loss, probe(*inputs), target)
        value.backward()
    want = {n for n, p in probe.named_parameters() if p.grad is not None}
    got = {n["meta"]["grad_of"] for n in bw_doc["nodes"]
           if "grad_of" in n.get("meta", {})}
    missing = sorted(want - got)
    if missing:
        raise ExportError("aot", f"the AOT backward gives no gradient for {len(missing)} "
                                 f"parameter(s) torch differentiates: "
                                 f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")


def _primal_chain(node, primal_param):
    """The view ops from a primal placeholder to `node` (first input each, other arguments
    constants), or None when `node` is not a view of a primal."""
    chain = []
    while node.op == "call_function":
        if not _schema_aliases(node) or not node.args or not isinstance(node.args[0],
                                                                        torch.fx.Node):
            return None
        if any(isinstance(a, torch.fx.Node) for a in node.all_input_nodes[1:]):
            return None
        chain.append(node)
        node = node.args[0]
    if node.op == "placeholder" and node.name in primal_param:
        return node, list(reversed(chain))
    return None


def _alias_root(node):
    """(root, chain): the view ops (aliasing ATen ops whose other arguments are constants)
    from the first value that is not such a view to `node`; chain empty when `node` is
    not a view."""
    chain = []
    while (node.op == "call_function" and _schema_aliases(node) and node.args
           and isinstance(node.args[0], torch.fx.Node)
           and not any(isinstance(a, torch.fx.Node) for a in node.all_input_nodes[1:])):
        chain.append(node)
        node = node.args[0]
    return node, list(reversed(chain))


def _lift_constants(fw, constants, carried):
    """Each of the forward's constants (its get_attr) becomes a placeholder after the others,
    marked meta.constant; so does each constant the backward reads (`carried`) that the
    forward does not. Returns ({placeholder name: meta}, {key: the forward placeholder} for
    `carried`), the latter's placeholders to be saved for the backward."""
    extra, by_key = {}, {}
    last = [n for n in fw.nodes if n.op == "placeholder"][-1]
    for c in constants + carried:
        lifted = c.node.graph is fw
        if not lifted and c.key in by_key:
            continue
        with fw.inserting_after(last):
            ph = fw.placeholder(c.node.name + "_value")
        ph.meta = dict(c.node.meta)
        if lifted:
            c.node.replace_all_uses_with(ph)
            fw.erase_node(c.node)
        extra[ph.name] = {"constant": c.key}
        by_key.setdefault(c.key, ph)
        last = ph
    return extra, {c.key: by_key[c.key] for c in carried}


def _running_stat_updates(fw, buffer_of, modules):
    """Training-mode batch norm updates its running statistics in place (ATen's
    native_batch_norm mutates running_mean / running_var; BatchNorm's forward adds 1 to
    num_batches_tracked), which a functional graph cannot state. Each update becomes nodes
    computing the new value, as ATen does: running_mean (1 - m) r + m mean, running_var
    (1 - m) r + m var n / (n - 1) (the unbiased batch variance, from save_invstd:
    invstd^-2 - eps), num_batches_tracked + 1; a module called twice updates twice, the
    second from the first's result. Returns [(node, buffer name)], each buffer's last value,
    to become forward outputs marked meta.updates_buffer (docs/interop.md)."""
    aten = torch.ops.aten
    latest = {}  # buffer name -> the node holding its newest value (a module called twice)
    for n in list(fw.nodes):
        if n.op != "call_function" or n.target is not aten.native_batch_norm.default:
            continue
        x, _, _, rm, rv, training, momentum, eps = n.args
        if not training or rm is None or rv is None:
            continue
        if rm.name not in buffer_of or rv.name not in buffer_of:
            raise ExportError("aot", f"node '{n.name}' updates running statistics that are not "
                                     "buffers of the model")
        mean_name, var_name = buffer_of[rm.name], buffer_of[rv.name]
        prefix = mean_name.rsplit(".", 1)[0] if "." in mean_name else ""
        module = modules.get(prefix)
        if module is not None and getattr(module, "momentum", 0.1) is None:
            raise ExportError("aot", f"batch norm '{prefix}' has momentum None (a cumulative "
                                     "average, its factor 1 / num_batches_tracked changing every "
                                     "step): a graph cannot state it; give it a momentum")
        shape = x.meta["tensor_meta"].shape
        count = math.prod(shape) // shape[1]
        stat_meta = rm.meta["tensor_meta"]
        items = {u.args[1]: u for u in n.users
                 if u.op == "call_function" and u.target is operator.getitem}
        last = max([n] + list(items.values()), key=lambda u: _position(fw, u))

        def emit(target, args, meta=stat_meta):
            nonlocal last
            with fw.inserting_after(last):
                node = fw.call_function(target, args)
            node.meta["tensor_meta"] = meta
            last = node
            return node

        for i in (1, 2):
            if i not in items:
                items[i] = emit(operator.getitem, (n, i), n.meta["tensor_meta"][i])
        rm_now, rv_now = latest.get(mean_name, rm), latest.get(var_name, rv)
        new_mean = emit(aten.add.Tensor, (emit(aten.mul.Tensor, (rm_now, 1.0 - momentum)),
                                          emit(aten.mul.Tensor, (items[1], momentum))))
        var = emit(aten.add.Tensor, (emit(aten.pow.Tensor_Scalar, (items[2], -2)), -eps))
        unbiased = momentum * count / (count - 1) if count > 1 else momentum
        new_var = emit(aten.add.Tensor, (emit(aten.mul.Tensor, (rv_now, 1.0 - momentum)),
                                         emit(aten.mul.Tensor, (var, unbiased))))
        latest[mean_name], latest[var_name] = new_mean, new_var
        counter = f"{prefix}.num_batches_tracked" if prefix else "num_batches_tracked"
        ph = next((p for p, b in buffer_of.items() if b == counter), None)
        if ph is not None:  # one count per call, as BatchNorm's forward adds
            node = latest.get(counter) or next(
                p for p in fw.nodes if p.op == "placeholder" and p.name == ph)
            latest[counter] = emit(aten.add.Tensor, (node, 1), node.meta["tensor_meta"])
    return [(node, name) for name, node in latest.items()]


def _position(graph, node):
    for i, n in enumerate(graph.nodes):
        if n is node:
            return i
    return -1


def _take_mutated_outputs(fw, names):
    """torch 2.x's forward returns the new values of the inputs it mutated first: those of
    the buffers `names` (in input order). Removes them from the outputs and returns [(node,
    buffer name)]: the running statistics' updates, stated as 1.13's are."""
    if not names:
        return []
    fw_out = next(n for n in fw.nodes if n.op == "output")
    taken = list(fw_out.args[0][:len(names)])
    fw_out.args = (tuple(fw_out.args[0][len(names):]),)
    return list(zip(taken, names))


def _convention(fw, bw, named, buffers, aliases, name, n_inputs, has_target, constants, carried,
                modules, mutated=()):
    taken = _take_mutated_outputs(fw, list(mutated))
    extra_constants, carried_ph = _lift_constants(fw, constants, carried)
    fw_phs = [n for n in fw.nodes if n.op == "placeholder"]
    primal_param = {}  # fw placeholder name -> parameter name
    for i, (pname, _) in enumerate(named):
        primal_param[fw_phs[i].name] = pname
    # Buffers (batch norm's running statistics) are inputs, not parameters: nothing buckets,
    # gathers or reduces them (DDP broadcasts them, ZeRO-3 replicates them); their
    # placeholders carry meta.buffer, so a runner can bind them from the weights file.
    buffer_of = {fw_phs[len(named) + j].name: bname for j, (bname, _) in enumerate(buffers)}
    trainable = {fw_phs[i].name for i, (_, p) in enumerate(named) if p.requires_grad}

    # Saved values that are primals or views of primals leave the forward's outputs; the
    # backward reads the primal and recomputes the view.
    fw_out = next(n for n in fw.nodes if n.op == "output")
    outs = list(fw_out.args[0])
    n_outputs = len(outs) - len([n for n in bw.nodes if n.op == "placeholder"
                                 and not n.name.startswith("tangents")])
    kept, recompute = outs[:n_outputs], {}
    for s in outs[n_outputs:]:
        chain = _primal_chain(s, primal_param) if isinstance(s, torch.fx.Node) else None
        if chain is None:
            kept.append(s)
        else:
            recompute[s.name] = chain
    # Saved values that share a storage (AOT's partitioner saves `relu` and `detach(relu)`,
    # or three views of one projection's input) leave the outputs but their root: the
    # backward recomputes each view from the root's placeholder, which is saved in their
    # place if it was not, so that no two placeholders stand for one storage (every memory
    # model here gives each placeholder a storage of its own).
    groups = {}
    for s in kept[n_outputs:]:
        if isinstance(s, torch.fx.Node):
            root, chain = _alias_root(s)
            groups.setdefault(root, []).append((s, chain))
    extra_roots = []
    for root, members in groups.items():
        if len(members) < 2:
            continue  # one storage, one placeholder
        if all(chain for _, chain in members):
            extra_roots.append(root)
        for s, chain in members:
            if chain:
                kept.remove(s)
                recompute[s.name] = (root, chain)
    # torch 1.13's partitioner orders the saved values by a set's iteration (object ids):
    # two exports of one model would differ. Forward order instead, on both sides (the
    # backward's saved placeholders carry the forward values' names).
    fw_pos = {n.name: i for i, n in enumerate(fw.nodes)}
    saved = kept[n_outputs:]
    bw_saved = [n for n in bw.nodes if n.op == "placeholder"
                and not n.name.startswith("tangents") and n.name not in recompute]
    if [s.name for s in saved] == [n.name for n in bw_saved]:
        kept = kept[:n_outputs] + sorted(saved, key=lambda s: fw_pos[s.name])
    kept += extra_roots
    # The backward's constants: forward placeholders, saved last.
    carried_saved = list(dict.fromkeys(carried_ph.values()))
    kept += carried_saved
    updates = _running_stat_updates(fw, buffer_of, modules) + taken
    fw_out.args = (tuple(kept + [u for u, _ in updates]),)
    fw.lint()

    # The backward: primals first (fw order), then the saved tensors, then the tangents.
    fw_by_name = {n.name: n for n in fw.nodes}
    bw_phs = [n for n in bw.nodes if n.op == "placeholder"]
    primals_needed = []
    for ph in bw_phs:
        if ph.name in recompute:
            p = recompute[ph.name][0]
            if p.name in primal_param and p.name not in primals_needed:
                primals_needed.append(p.name)
    order = {n.name: i for i, n in enumerate(fw_phs)}
    primals_needed.sort(key=lambda n: order[n])
    new = torch.fx.Graph()
    env = {}
    primal_nodes = {}
    for pn in primals_needed:
        node = new.placeholder(pn)
        node.meta = dict(fw_by_name[pn].meta)
        primal_nodes[pn] = node
    saved_rank = {n.name: i for i, n in enumerate(kept[n_outputs:])}
    rest = [ph for ph in bw_phs if ph.name not in recompute]
    rest.sort(key=lambda ph: (ph.name.startswith("tangents"), saved_rank.get(ph.name, 0)))
    tangents = [ph for ph in rest if ph.name.startswith("tangents")]
    for ph in [ph for ph in rest if ph not in tangents] + extra_roots + carried_saved + tangents:
        node = new.placeholder(ph.name)
        node.meta = dict(ph.meta)
        env[ph] = node
    views = sorted((ph for ph in bw_phs if ph.name in recompute),
                   key=lambda ph: fw_pos.get(ph.name, 0))
    saved_ph = {ph.name: node for ph, node in env.items()}
    for ph in views:  # recomputed views, right after the placeholders (forward order)
        primal, chain = recompute[ph.name]
        cur = primal_nodes[primal.name] if primal.name in primal_nodes else saved_ph[primal.name]
        local = {primal: cur}
        for c in chain:
            cur = new.node_copy(c, lambda x: local[x])
            cur.meta = dict(c.meta)
            local[c] = cur
        env[ph] = cur
        saved_ph[ph.name] = cur  # a later view may start from this one
    for n in bw.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "get_attr" and n.target in carried_ph:
            env[n] = env[carried_ph[n.target]]
            continue
        copy = new.node_copy(n, lambda x: env[x])
        copy.meta = dict(n.meta)
        env[n] = copy
    new.lint()

    extra_fw, extra_bw = {}, {}
    for ph_name, pname in primal_param.items():
        extra_fw[ph_name] = {"param": pname}
    for ph_name, bname in buffer_of.items():
        extra_fw[ph_name] = {"buffer": bname}
    # The example inputs and the loss's target: meta.input names their tensor in the
    # weights file (input/0, ..., target).
    first_input = len(named) + len(buffers)
    for i in range(n_inputs):
        extra_fw[fw_phs[first_input + i].name] = {"input": f"input/{i}"}
    if has_target:
        extra_fw[fw_phs[first_input + n_inputs].name] = {"input": "target"}
    for pn, node in primal_nodes.items():
        extra_bw[node.name] = {"param": primal_param[pn]}
    bw_out = next(n for n in new.nodes if n.op == "output")
    grads = list(bw_out.args[0])
    # One backward output per forward placeholder: the constants' are None.
    bw_out.args = (tuple(grads + [None] * len(extra_constants)),)
    extra_fw.update(extra_constants)
    for node, buffer_name in updates:
        extra_fw[node.name] = {"updates_buffer": buffer_name}
    for i, g in enumerate(grads):
        if i < len(fw_phs) and fw_phs[i].name in trainable and isinstance(g, torch.fx.Node):
            extra_bw.setdefault(g.name, {})["grad_of"] = primal_param[fw_phs[i].name]

    table = []
    for i, (pname, p) in enumerate(named):
        owner = fw_phs[i].name
        for alias, first in aliases.items():
            if first == pname:
                table.append(_param_entry(alias, owner, p, pname))

    fw_aliases = {n.name: True for n in fw.nodes if _schema_aliases(n)}
    bw_aliases = {n.name: True for n in new.nodes if _schema_aliases(n)}
    fw_doc = graph_json.graph_json(name, fw, table, extra_fw, fw_aliases, capture="aot_autograd")
    bw_doc = graph_json.graph_json(name + ".backward", new, table, extra_bw, bw_aliases,
                                   capture="aot_autograd")
    return fw_doc, bw_doc


# ---- weights and torch's reference ----


def weights(model, inputs, target):
    """The tensors a runner binds: param/<name> per storage (its first name), buffer/<name>,
    input/<i>, target."""
    out = {}
    for n, p in model.named_parameters():
        out[f"param/{n}"] = p.detach()
    for n, b in model.named_buffers():
        out[f"buffer/{n}"] = b.detach().clone()
    for i, x in enumerate(inputs):
        out[f"input/{i}"] = x
    if target is not None:
        out["target"] = target
    return out


def reference(model, inputs, loss, target, drawn=None, out=None):
    """torch's own numbers on the same inputs: ref/output, ref/loss, ref/grad/<name> per
    trainable storage (its first name), in the model's current mode; and ref64/loss,
    ref64/grad/<name> from a float64 copy of the model on float64 copies of the floating
    inputs (compare's rule: a tensor where torch's float32 is itself far from float64), and
    ref64p/loss, ref64p/grad/<name> from the same float64 run on inputs nudged by a relative
    NUDGE (how far float64 round-off alone moves each result), unless that copy fails
    (float64_fails). `drawn` (export_aot's reference of a pair with
    random ops) replaces ref/loss and ref/grad/: an eager run would draw other masks, so
    torch's figures are the AOT pair's own run on the masks written as random/<node>; no
    float64 reference then (its run would draw others again). The tensors go into `out` as
    each run ends (a safetensors.Spill writes them to a file, so a large model's float64
    gradients are not all held at once), which is returned; a new Tensors dict without it."""
    out = safetensors.Tensors() if out is None else out
    with buffers_kept(model):
        ref = _reference(model, inputs, loss, target, "ref")
    if drawn:
        ref = {k: v for k, v in ref.items() if not k.startswith(("ref/", "ref64/"))}
        out.update(ref)
        out.update(drawn)
        note("the model draws random numbers (dropout in training): torch's reference is the "
             "AOT pair's own run on the masks written as random/<node>, and there is no "
             "float64 reference")
        return out
    out.update(ref)
    del ref
    if loss != "none":
        mark = out.mark()
        try:
            for prefix, nudge in (("ref64", lambda x: x), ("ref64p", _nudged)):
                # One float64 copy alive at a time: a large model's copies take gigabytes.
                wide = _float64(copy_model(model))
                with float64_throughout("reference"):
                    ref64 = _reference(wide, [nudge(_float64(x)) for x in inputs], loss,
                                       _float64(target), prefix)
                del wide
                release()
                ref64.pop(f"{prefix}/output")
                out.update(ref64)
                del ref64
        except ExportError as e:
            float64_fails(e)
            out.rollback(mark)
    return out


def release():
    """Collects the reference cycles a finished model copy, optimizer or trace leaves (a
    module's hooks and a deep copy's memo refer back to it): Python's collector runs by
    object counts, not bytes, and without this a large model's dead float64 copies stay
    resident until it does (vit_l_16's export held 19 GB where 13 are live)."""
    gc.collect()


# The relative nudge of ref64p/'s inputs: about nine float64 rounding units, so the spread
# between ref64/ and ref64p/ is what float64 round-off alone does to a result of the model.
NUDGE = 1e-15


def _nudged(x):
    """A floating tensor times (1 + NUDGE); any other tensor and None as they are."""
    return x * (1 + NUDGE) if x is not None and x.is_floating_point() else x


def _float64(x):
    """A module's floating parameters and buffers in float64; a floating tensor as float64;
    any other tensor and None as they are."""
    if isinstance(x, torch.nn.Module):
        return x.double()
    return x.double() if x is not None and x.is_floating_point() else x


_NARROW_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_NARROWED_NOTED = []  # float64_throughout's note, once a process


class _Float64Throughout(torch.utils._python_dispatch.TorchDispatchMode):
    """Every ATen op of a float64 reference run computes in float64: a requested float32,
    float16 or bfloat16 result dtype (`x.float()`, `.to(torch.float32)`, a factory's dtype=)
    becomes float64, and a narrow floating tensor met as an operand of an op that does not
    write to it (a float32 constant the model keeps outside its buffers) is read as float64.
    Without it a model that upcasts by `x.float()` (Gemma's and Llama's RMS norms, their
    rotary tables) runs those parts in float32 inside its "float64" copy, and the float64
    clause judges float32 round-off against float64. overlap's float64 runs (`exec
    --double`, `train --double`) make the same substitution, so both sides compute the same
    thing. aten._grouped_mm, whose CPU kernel takes no float64, runs as one product per group
    (_grouped_mm_by_groups). `narrowed` counts the ops that asked for a narrow dtype."""

    def __init__(self):
        super().__init__()
        self.narrowed = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is _GROUPED_MM and args and args[0].dtype == torch.float64:
            return _grouped_mm_by_groups(*args, **kwargs)
        if kwargs.get("dtype") in _NARROW_FLOATS:
            kwargs["dtype"] = torch.float64
            self.narrowed += 1
        if not func._schema.is_mutable:
            def widen(x):
                if isinstance(x, torch.Tensor) and x.dtype in _NARROW_FLOATS:
                    return x.to(torch.float64)
                return x
            args, kwargs = torch.utils._pytree.tree_map(widen, (args, kwargs))
        return func(*args, **kwargs)


_GROUPED_MM = getattr(getattr(torch.ops.aten, "_grouped_mm", None), "default", None)


def _grouped_mm_by_groups(a, b, offs=None, bias=None, out_dtype=None):
    """aten._grouped_mm (torch.nn.functional.grouped_mm: transformers' MoE experts in eager
    float32) as one product per group, for the float64 reference: its CPU kernel takes no
    float64. The cases its forward and backward use: [S, K] x [E, K, N] (groups of rows),
    [K, S] x [S, N] (groups along the contraction, the weight's gradient), [E, M, K] x
    [K, N] (groups of columns); without offs, a batched product."""
    if bias is not None or offs is None:
        if bias is not None:
            raise ExportError("float64 reference", "grouped_mm with a bias has no float64 form "
                                                   "here")
        return torch.bmm(a, b)
    ends = [int(e) for e in offs.tolist()]
    starts = [0] + ends[:-1]
    if a.dim() == 2 and b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[2])
        for i, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                out[s:e] = a[s:e] @ b[i]
    elif a.dim() == 2 and b.dim() == 2:
        out = a.new_zeros(len(ends), a.shape[0], b.shape[1])
        for i, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                out[i] = a[:, s:e] @ b[s:e]
    else:
        out = a.new_zeros(a.shape[1], b.shape[1])
        for i, (s, e) in enumerate(zip(starts, ends)):
            if e > s:
                out[:, s:e] = a[i] @ b[:, s:e]
    return out


@contextlib.contextmanager
def float64_throughout(what):
    """The float64 reference run of `what` (a phrase for the note) under _Float64Throughout
    and float64 as torch's default dtype; notes once when the model asked for a narrow
    dtype (once a process)."""
    default = torch.get_default_dtype()
    mode = _Float64Throughout()
    torch.set_default_dtype(torch.float64)
    try:
        with mode:
            yield
    finally:
        torch.set_default_dtype(default)
    if mode.narrowed and not _NARROWED_NOTED:
        _NARROWED_NOTED.append(what)
        note(f"{what}: the model asks for float32 (or float16 / bfloat16) results inside "
             f"({mode.narrowed} ops, e.g. `x.float()`); its float64 reference computes them in "
             "float64, as overlap's float64 runs do")


def float64_fails(e):
    """The float64 reference (ref64/) is left out, saying why in one line, when the float64
    copy of a model that runs in float32 fails: the model computes in another dtype inside
    (`x.float()`, a float32 tensor it makes), which the copy's float64 inputs, parameters
    and buffers then meet. A sys.exit stops the export."""
    if e.fatal:
        raise e
    note(f"{e.step}: the model's float64 copy fails, so no float64 reference (ref64/) is "
         f"written and compare has no float64 clause for it: {e.message}")


def _reference(model, inputs, loss, target, prefix):
    model.zero_grad(set_to_none=True)
    with user_code("reference", "the model's forward", model):
        out = model(*inputs)
        value = _loss_fn(loss, out, target)
        if value is not out:
            value.backward()
    ref = {f"{prefix}/output": out.detach()}
    if value is not out:
        ref[f"{prefix}/loss"] = value.detach()
        for n, p in model.named_parameters():
            if p.grad is not None:
                ref[f"{prefix}/grad/{n}"] = p.grad.detach()
    model.zero_grad(set_to_none=True)
    return ref


def train_reference(model, specs, loss, steps, optimizer, seed, ranks=1, out=None):
    """torch training the model for `steps` optimizer steps on fresh batches: batch k's
    inputs drawn as the example inputs are (parse_input, seed + 1000 k + i; batch 0 is the
    example batch itself) and its loss target as loss_target draws it. `optimizer` is a
    dict: kind (sgd, adamw), lr, momentum, weight_decay, betas, eps. With `ranks` P > 1, each
    step runs as P data-parallel ranks do (DDP, ZeRO-3): rank r's forward and backward on
    rows [r B / P, (r + 1) B / P) of every input and the target (batch norm normalizes by
    each rank's own statistics), the gradients and the losses averaged over ranks, and every
    rank starting from rank 0's buffers (DDP broadcasts them; in training mode they feed no
    result, so only rank 0's are kept). Returns the tensors of a data file
    (docs/interop.md): batch/<k>/input/<i>, batch/<k>/target, param/<name> and
    buffer/<name> (the start), ref/loss/<k> (the loss step k+1 saw, before its update),
    ref/param/<name> and ref/buffer/<name> (after the last step); and ref64/loss/<k>,
    ref64/param/<name>, ref64/buffer/<name> from the same training of a float64 copy of the
    model on float64 copies of the same batches (compare's float64 clause: float32 round-off
    amplified over the steps), and ref64p/ from that float64 training on inputs nudged by a
    relative NUDGE (compare's float64 spread: what float64 round-off alone moves), both left
    out (float64_fails) when the float64 copy fails. The tensors go into `out` as they
    are made (a safetensors.Spill writes them to a file at once), which is returned; a new
    Tensors dict without it. The model is trained in place: pass a copy."""
    if loss in ("none",):
        raise ExportError("train", "training needs a loss (--loss sum, mse or ce)")
    if optimizer["kind"] not in ("sgd", "adamw"):
        raise ExportError("train", f"unknown optimizer '{optimizer['kind']}' (sgd, adamw)")
    out = safetensors.Tensors() if out is None else out
    for n, p in model.named_parameters():
        out[f"param/{n}"] = p.detach().clone()
    for n, b in model.named_buffers():
        out[f"buffer/{n}"] = b.detach().clone()
    # The start, kept in the model's own dtype until the float64 runs (one float64 copy alive
    # at a time: a large model's copies take gigabytes).
    start = copy_model(model)
    batches = []

    def draw(k):  # drawn as the step comes: the target's forward sees the trained model
        inputs = [parse_input(s, seed + 1000 * k + i) for i, s in enumerate(specs)]
        target = loss_target(loss, model, inputs, seed + 100 + 1000 * k)
        for i, x in enumerate(inputs):
            out[f"batch/{k}/input/{i}"] = x
        if target is not None:
            out[f"batch/{k}/target"] = target
        batches.append((inputs, target))
        return batches[-1]
    for k, total in enumerate(_train_steps(model, draw, steps, loss, optimizer, ranks)):
        out[f"ref/loss/{k}"] = total
    for n, p in model.named_parameters():
        out[f"ref/param/{n}"] = p.detach().clone()
    for n, b in model.named_buffers():
        out[f"ref/buffer/{n}"] = b.detach().clone()

    del model  # trained, written; `start` is what the float64 runs copy
    release()
    mark = out.mark()
    for prefix, nudge in (("ref64", lambda x: x), ("ref64p", _nudged)):
        trained = _float64(copy_model(start))
        try:
            with float64_throughout("training reference"):
                losses = _train_steps(
                    trained, lambda k: ([nudge(_float64(x)) for x in batches[k][0]],
                                        _float64(batches[k][1])), steps, loss, optimizer, ranks)
        except ExportError as e:
            float64_fails(e)
            out.rollback(mark)
            return out
        for k, total in enumerate(losses):
            out[f"{prefix}/loss/{k}"] = total
        for n, p in trained.named_parameters():
            out[f"{prefix}/param/{n}"] = p.detach().clone()
        for n, b in trained.named_buffers():
            out[f"{prefix}/buffer/{n}"] = b.detach().clone()
        del trained
        release()
    return out


def _train_steps(model, batch, steps, loss, optimizer, ranks):
    """train_reference's `steps` steps, step k on the (inputs, target) `batch(k)` returns:
    the loss each step saw (a 0-d tensor in the model's dtype; averaged over ranks)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer["kind"] == "sgd":
        opt = torch.optim.SGD(params, lr=optimizer["lr"], momentum=optimizer["momentum"],
                              weight_decay=optimizer["weight_decay"])
    else:
        opt = torch.optim.AdamW(params, lr=optimizer["lr"], betas=optimizer["betas"],
                                eps=optimizer["eps"], weight_decay=optimizer["weight_decay"])
    losses = []
    for k in range(steps):
        inputs, target = batch(k)
        opt.zero_grad(set_to_none=True)
        start = {n: b.detach().clone() for n, b in model.named_buffers()}
        kept, total = None, 0.0
        for r in range(ranks):
            shard = [_rows(x, r, ranks, f"input {i}") for i, x in enumerate(inputs)]
            shard_target = None if target is None else _rows(target, r, ranks, "the target")
            with torch.no_grad():
                for n, b in model.named_buffers():
                    b.copy_(start[n])
            with user_code("train", "the model's forward", model):
                value = _loss_fn(loss, model(*shard), shard_target)
                (value / ranks).backward()
            total += float(value.detach()) / ranks
            if r == 0:
                kept = {n: b.detach().clone() for n, b in model.named_buffers()}
        with torch.no_grad():
            for n, b in model.named_buffers():
                b.copy_(kept[n])
        with user_code("train", "the optimizer's step"):
            opt.step()
        losses.append(torch.tensor(total, dtype=value.dtype) if ranks > 1
                      else value.detach().clone())
    model.zero_grad(set_to_none=True)
    del opt
    release()
    return losses


def _rows(x, rank, ranks, what):
    """Rank `rank`'s contiguous share of the rows of `x` among `ranks`."""
    if ranks == 1:
        return x
    if x.dim() == 0 or x.shape[0] % ranks != 0:
        raise ExportError("train", f"{what}'s {x.shape[0] if x.dim() else 0} rows do not split "
                                   f"over {ranks} ranks")
    n = x.shape[0] // ranks
    return x[rank * n:(rank + 1) * n]
