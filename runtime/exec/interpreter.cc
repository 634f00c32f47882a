#include "runtime/exec/interpreter.h"

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/shape_rules.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "runtime/exec/memory_plan.h"
#include "schedule/simulator.h"
#include "schedule/zero3_ops.h"

namespace overlap {
namespace {

constexpr absl::string_view kGetItem = "operator.getitem";

bool Is16Bit(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

absl::Status NodeError(const Node& n, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(
      "node '", n.name(), "'",
      n.op() == Op::kCallFunction ? absl::StrCat(" (", n.target(), ")") : "", ": ", message));
}

std::string ShapeString(absl::Span<const int64_t> s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// Whether `actual` is what meta states (with compute_in_double, float64 stands for any
// floating dtype).
absl::Status CheckType(const Node& n, const TensorType& stated, const Tensor& actual,
                       bool in_double, absl::string_view what) {
  const std::vector<int64_t> shape(stated.shape.begin(), stated.shape.end());
  if (actual.shape() != shape) {
    return NodeError(n, absl::StrCat(what, " has shape ", ShapeString(actual.shape()),
                                     ", meta says ", ShapeString(shape)));
  }
  if (stated.dtype.empty()) return absl::OkStatus();
  absl::StatusOr<DType> d = ParseDType(stated.dtype);
  if (!d.ok()) return NodeError(n, d.status().message());
  const bool ok = *d == actual.dtype() ||
                  (in_double && IsFloatingPoint(*d) && actual.dtype() == DType::kFloat64);
  if (!ok) {
    return NodeError(n, absl::StrCat(what, " has dtype ", DTypeName(actual.dtype()), ", meta says ",
                                     stated.dtype));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// An unknown meta key's value when it is a plain JSON string ("\"x\"" -> x).
std::optional<std::string> ExtraString(const NodeMeta& m, absl::string_view key) {
  for (const auto& [k, v] : m.extra) {
    if (k != key) continue;
    if (v.size() < 2 || v.front() != '"' || v.back() != '"' || v.find('\\') != std::string::npos) {
      return std::nullopt;
    }
    return v.substr(1, v.size() - 2);
  }
  return std::nullopt;
}

}  // namespace

TensorMap BufferInputs(const Graph& g, const TensorMap& given) {
  TensorMap out;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    if (std::optional<std::string> b = ExtraString(n.meta(), "buffer")) {
      auto it = given.find(absl::StrCat("buffer/", *b));
      if (it != given.end()) out.insert(*it);
    }
  }
  return out;
}

const Tensor* FindInput(const Graph& g, const Node& placeholder, const TensorMap& inputs) {
  auto it = inputs.find(placeholder.name());
  if (it != inputs.end()) return &it->second;
  if (placeholder.meta().has_param) {
    for (const std::string& key :
         {placeholder.meta().param, absl::StrCat("param/", placeholder.meta().param)}) {
      it = inputs.find(key);
      if (it != inputs.end()) return &it->second;
    }
  }
  // The exporter's weights files (docs/interop.md): buffer/<meta.buffer>, <meta.input>.
  if (std::optional<std::string> b = ExtraString(placeholder.meta(), "buffer")) {
    it = inputs.find(absl::StrCat("buffer/", *b));
    if (it != inputs.end()) return &it->second;
  }
  if (std::optional<std::string> key = ExtraString(placeholder.meta(), "input")) {
    it = inputs.find(*key);
    if (it != inputs.end()) return &it->second;
  }
  for (int row : g.ParamsOwnedBy(placeholder.name())) {
    it = inputs.find(g.params()[row].name);
    if (it != inputs.end()) return &it->second;
  }
  return nullptr;
}

absl::StatusOr<RunResult> Interpret(const Graph& g, const TensorMap& inputs,
                                    const InterpreterOptions& options) {
  const KernelRegistry& kernels = options.kernels ? *options.kernels : CpuKernels();
  const bool in_double = options.compute_in_double;
  const MemoryPlan plan = BuildMemoryPlan(g);
  const int64_t n = static_cast<int64_t>(plan.order.size());

  // Refuse what cannot run before running anything.
  for (NodeId id : plan.order) {
    const Node& node = g.node(id);
    if (node.op() == Op::kCallModule || node.op() == Op::kGetAttr) {
      return NodeError(
          node, absl::StrCat("module-owned parameters (", OpName(node.op()), " '", node.target(),
                             "') cannot run: the format records no module types; export a "
                             "graph with lifted parameters (overlap gen --lifted)"));
    }
    if (node.op() == Op::kCallMethod) {
      return NodeError(node,
                       absl::StrCat("call_method '", node.target(),
                                    "' has no kernel (timed replay, --replay, runs any graph)"));
    }
    if (node.op() == Op::kCallFunction && !IsZero3Op(node) && node.target() != kGetItem &&
        kernels.Find(node.target()) == nullptr) {
      return NodeError(node, absl::StrCat("no kernel for target '", node.target(), "'"));
    }
  }

  RunResult result;
  if (options.simulate || options.memory_limit_bytes > 0) {
    OVERLAP_ASSIGN_OR_RETURN(const SimulationResult sim, SimulateAlone(g, plan.order));
    result.simulated_peak_bytes = sim.peak_memory_bytes;
    const int64_t scale = in_double ? 2 : 1;  // float32 values run as float64
    if (options.memory_limit_bytes > 0 &&
        sim.peak_memory_bytes > options.memory_limit_bytes / scale) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the graph needs ", FormatBytes(sim.peak_memory_bytes * scale),
          " of graph values at its peak, more than the ", FormatBytes(options.memory_limit_bytes),
          " allowed (a smaller preset or batch, or `overlap exec --replay --count-only`)"));
    }
  }

  Allocator alloc(options.device);  // the step's memory: graph values and scratch
  Allocator state(options.device);  // outside it: converted parameters, reduced gradients
  // Copies and conversions between the host and the step's device.
  auto copy_to = [&](const Tensor& src, Tensor& dst) {
    return options.device != nullptr ? options.device->Copy(src, dst) : CopyConvert(src, dst);
  };
  std::vector<std::vector<Tensor>> values(g.id_bound());
  auto tensor_of = [&](NodeId id) -> const Tensor* {
    if (id < 0 || id >= g.id_bound() || values[id].size() != 1) return nullptr;
    return &values[id][0];
  };
  auto free_root = [&](NodeId root) {
    for (NodeId m : plan.members[root]) values[m].clear();
  };

  // Placeholders: checked against meta; shards used in place, other inputs copied into the
  // step's memory (live from time 0, as the simulator counts them).
  for (NodeId id : plan.order) {
    const Node& node = g.node(id);
    if (node.op() != Op::kPlaceholder) continue;
    const Tensor* given = FindInput(g, node, inputs);
    const bool shard = IsParameterShard(g, id);
    if (given == nullptr) {
      return NodeError(
          node, shard ? absl::StrCat("missing parameter '",
                                     node.meta().has_param ? node.meta().param : node.name(), "'")
                      : "missing input");
    }
    if (shard && options.zero3 != nullptr) {  // the rank's flat shard
      values[id] = {*given};
      continue;
    }
    const std::vector<TensorType> stated = StatedTypes(node);
    if (!stated.empty()) {
      OVERLAP_RETURN_IF_ERROR(CheckType(node, stated[0], *given, in_double, "input"));
    }
    const DType dtype =
        in_double && IsFloatingPoint(given->dtype()) ? DType::kFloat64 : given->dtype();
    const Device here = options.device != nullptr ? options.device->device() : Device::kCpu;
    if (shard && dtype == given->dtype() && given->device() == here) {
      values[id] = {*given};
      continue;
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor copy,
                             Tensor::Empty(plan.owns[id] ? alloc : state, dtype, given->shape()));
    OVERLAP_RETURN_IF_ERROR(copy_to(*given, copy));
    values[id] = {std::move(copy)};
  }
  // Resident parameters' gathered copies are live from the start.
  absl::flat_hash_map<int64_t, std::deque<NodeId>> gathered;
  absl::flat_hash_map<int64_t, int64_t> releases;
  absl::flat_hash_map<NodeId, int64_t> reduced_root;  // a reduced gradient's buffer -> ds_id
  auto gather = [&](const Node& node) -> absl::Status {
    const Tensor* shard = tensor_of(HandedOnFrom(node));
    if (shard == nullptr) return NodeError(node, "its parameter is not available");
    if (options.zero3 != nullptr) {
      const std::vector<TensorType> full = StatedTypes(node);
      if (full.size() != 1 || full[0].dtype.empty()) {
        return NodeError(node, "meta does not state the gathered parameter's shape and dtype");
      }
      const bool resident = plan.resident.contains(DsId(node));
      OVERLAP_ASSIGN_OR_RETURN(Tensor t,
                               options.zero3->Allgather(node, *shard, full[0], resident, alloc));
      if (resident) result.resident_bytes += t.nbytes();
      values[node.id()] = {std::move(t)};
      return absl::OkStatus();
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor copy, Tensor::Empty(alloc, shard->dtype(), shard->shape()));
    OVERLAP_RETURN_IF_ERROR(copy_to(*shard, copy));
    values[node.id()] = {std::move(copy)};
    return absl::OkStatus();
  };
  for (NodeId id : plan.order) {
    const Node& node = g.node(id);
    if (IsAllgather(node) && plan.resident.contains(DsId(node))) {
      OVERLAP_RETURN_IF_ERROR(gather(node));
    }
  }

  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const NodeId id = plan.order[i];
    const Node& node = g.node(id);
    if (node.op() == Op::kOutput) {
      const Value& out = node.args().empty() ? Value() : node.args()[0];
      std::vector<Value> items =
          out.kind() == Value::Kind::kList ? out.items() : std::vector<Value>{out};
      for (const Value& item : items) {
        if (item.is_none()) {
          result.outputs.emplace_back();
          continue;
        }
        const Tensor* t = item.is_ref() ? tensor_of(item.as_ref()) : nullptr;
        if (t == nullptr && item.is_ref()) {
          // A gradient freed at its reduction: the output returns the reduced one (with
          // options.zero3, the rank's shard lives with the implementation: undefined).
          auto it = reduced_root.find(plan.root[item.as_ref()]);
          if (it != reduced_root.end() && options.zero3 != nullptr) {
            result.outputs.emplace_back();
            continue;
          }
          if (it != reduced_root.end()) t = &result.reduced_grads[it->second];
        }
        if (t == nullptr) {
          return NodeError(
              node, absl::StrCat("output '", item.is_ref() ? g.node(item.as_ref()).name() : "?",
                                 "' is not an available tensor"));
        }
        result.outputs.push_back(*t);
      }
    } else if (node.op() == Op::kCallFunction) {
      if (IsAllgather(node)) {
        if (!plan.resident.contains(DsId(node))) {
          OVERLAP_RETURN_IF_ERROR(gather(node));
          gathered[DsId(node)].push_back(id);
        }
      } else if (IsWait(node) || IsRelease(node)) {
        const Tensor* t = tensor_of(HandedOnFrom(node));
        if (t == nullptr) return NodeError(node, "its input is not available");
        if (IsWait(node) && options.zero3 != nullptr) {
          OVERLAP_RETURN_IF_ERROR(options.zero3->Wait(node));
        }
        values[id] = {*t};
        if (IsRelease(node) && !plan.resident.contains(DsId(node)) &&
            ++releases[DsId(node)] == NUsers(node)) {
          releases[DsId(node)] = 0;
          std::deque<NodeId>& copies = gathered[DsId(node)];
          if (!copies.empty()) {
            free_root(copies.front());
            copies.pop_front();
          }
        }
      } else if (IsReduce(node)) {
        reduced_root[plan.root[HandedOnFrom(node)]] = DsId(node);
        const Tensor* grad = tensor_of(HandedOnFrom(node));
        if (grad == nullptr) return NodeError(node, "its gradient is not available");
        if (options.zero3 != nullptr) {
          OVERLAP_RETURN_IF_ERROR(options.zero3->Reduce(node, *grad));
          values[id] = {Tensor()};
        } else {
          Tensor& acc = result.reduced_grads[DsId(node)];
          if (options.device != nullptr && acc.defined()) {
            return NodeError(node,
                             "a second gradient of one ds_id on a device needs options.zero3");
          }
          if (!acc.defined()) {
            OVERLAP_ASSIGN_OR_RETURN(acc, Tensor::Empty(state, grad->dtype(), grad->shape()));
            OVERLAP_RETURN_IF_ERROR(copy_to(*grad, acc));
          } else {
            if (acc.shape() != grad->shape())
              return NodeError(node, "gradients of one ds_id differ in shape");
            for (int64_t k = 0; k < acc.numel(); ++k) {
              SetElement(acc, k, GetElement(acc, k) + GetElement(*grad, k));
            }
          }
          values[id] = {acc};
        }
      } else if (node.target() == kGetItem) {
        const Value* src = node.args().empty() ? nullptr : &node.args()[0];
        if (src == nullptr || !src->is_ref()) {
          return NodeError(node, "getitem: argument 'self' should be a tuple node");
        }
        const Node& from = g.node(src->as_ref());
        const std::vector<Tensor>& tuple = values[src->as_ref()];
        // Python indexing of a tensor (x[0], x[:, :d]) selects rows; returning the tensor
        // itself would be a different answer. A source is a tensor when it is an input, an
        // element, or states one shape and computed one result.
        if (from.op() == Op::kPlaceholder || from.op() == Op::kGetAttr ||
            from.target() == kGetItem || (from.meta().has_shape && tuple.size() == 1)) {
          return NodeError(node, absl::StrCat("getitem: argument 'self' is node '", from.name(),
                                              "', a tensor, not a tuple; indexing a tensor "
                                              "has no kernel (use aten.select / aten.slice)"));
        }
        if (node.args().size() < 2 || node.args()[1].kind() != Value::Kind::kInt) {
          return NodeError(node, "getitem: argument 'index' should be an int");
        }
        const int64_t given = node.args()[1].as_int();
        // Python's indexing: -1 is the last element.
        const int64_t k = given < 0 ? given + static_cast<int64_t>(tuple.size()) : given;
        if (k < 0 || k >= static_cast<int64_t>(tuple.size())) {
          return NodeError(node, absl::StrCat("index ", given, " out of range for a tuple of ",
                                              tuple.size(), (tuple.empty() ? " (freed?)" : "")));
        }
        values[id] = {tuple[k]};
      } else {
        // A kernel. Non-view kernels see 16-bit floats as float32 copies.
        const bool view = SharesInputStorage(node);
        bool convert = false;
        DType narrow = DType::kFloat32;
        if (!view) {
          for (NodeId in : node.inputs()) {
            for (const Tensor& t : values[in]) {
              if (t.defined() && Is16Bit(t.dtype())) {
                convert = true;
                narrow = t.dtype();
              }
            }
          }
        }
        absl::flat_hash_map<NodeId, Tensor> widened;
        if (convert) {
          for (NodeId in : node.inputs()) {
            const Tensor* t = tensor_of(in);
            if (t == nullptr || !Is16Bit(t->dtype()) || widened.contains(in)) continue;
            OVERLAP_ASSIGN_OR_RETURN(
                Tensor w, Tensor::Empty(alloc, DType::kFloat32, t->shape(), Pool::kScratch));
            OVERLAP_RETURN_IF_ERROR(copy_to(*t, w));
            widened[in] = std::move(w);
          }
        }
        KernelCall call(
            node, alloc,
            [&](NodeId in) -> const Tensor* {
              auto it = widened.find(in);
              return it != widened.end() ? &it->second : tensor_of(in);
            },
            convert ? Pool::kScratch : Pool::kValues);
        OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> results, (*kernels.Find(node.target()))(call));
        const std::vector<TensorType> stated = StatedTypes(node);
        for (size_t k = 0; k < results.size(); ++k) {
          Tensor& r = results[k];
          if (!r.defined()) continue;
          bool aliases_input = false;
          for (NodeId in : node.inputs()) {
            for (const Tensor& t : values[in]) aliases_input |= r.SharesStorageWith(t);
          }
          DType want = r.dtype();
          if (convert && r.dtype() == DType::kFloat32) {
            want = narrow;
            if (k < stated.size() && !stated[k].dtype.empty()) {
              absl::StatusOr<DType> d = ParseDType(stated[k].dtype);
              if (d.ok() && IsFloatingPoint(*d)) want = *d;
            }
          }
          if (view && !aliases_input) {
            ++result.view_copies;
            result.view_copy_bytes += r.nbytes();
          }
          // A result that shares its input's storage stays a view (as in ATen) unless the
          // graph states it is not one (aliases_input false): then the memory model counts
          // a buffer of its own, and the copy keeps measured and simulated memory equal.
          const bool stated_not_view = node.meta().has_aliases_input && !node.meta().aliases_input;
          if (convert || (!view && aliases_input && stated_not_view)) {
            OVERLAP_ASSIGN_OR_RETURN(Tensor owned, Tensor::Empty(alloc, want, r.shape()));
            OVERLAP_RETURN_IF_ERROR(copy_to(r, owned));
            r = std::move(owned);
          }
        }
        if (!stated.empty() && results.size() < stated.size()) {
          return NodeError(node, absl::StrCat("the kernel returned ", results.size(),
                                              " results, meta states ", stated.size()));
        }
        for (size_t k = 0; k < stated.size(); ++k) {
          if (!results[k].defined()) continue;
          OVERLAP_RETURN_IF_ERROR(CheckType(
              node, stated[k], results[k], in_double,
              stated.size() > 1 ? absl::StrCat("result ", k) : std::string("the result")));
        }
        values[id] = std::move(results);
      }
    }
    if (options.after_node && IsCallNode(node)) {
      OVERLAP_RETURN_IF_ERROR(options.after_node(node, values[id]));
    }
    for (NodeId s : plan.frees_at[i]) free_root(s);
    ++result.nodes_run;
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.peak_bytes = alloc.peak(Pool::kValues) + result.resident_bytes;
  result.scratch_peak_bytes = alloc.peak(Pool::kScratch);
  values.clear();
  result.final_bytes = alloc.live(Pool::kValues);
  return result;
}

}  // namespace overlap
