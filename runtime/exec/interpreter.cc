#include "runtime/exec/interpreter.h"

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/shape_rules.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "graph/value_bytes.h"
#include "runtime/core/random.h"
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

std::string BindingKey(const Node& placeholder) {
  if (std::optional<std::string> b = ExtraString(placeholder.meta(), "buffer")) {
    return absl::StrCat("buffer/", *b);
  }
  if (std::optional<std::string> c = ExtraString(placeholder.meta(), "constant")) {
    return absl::StrCat("constant/", *c);
  }
  if (std::optional<std::string> key = ExtraString(placeholder.meta(), "input")) return *key;
  return "";
}

TensorMap BufferInputs(const Graph& g, const TensorMap& given) {
  TensorMap out;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    const std::string key = BindingKey(n);
    if (!absl::StartsWith(key, "buffer/") && !absl::StartsWith(key, "constant/")) continue;
    auto it = given.find(key);
    if (it != given.end()) out.insert(*it);
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
  // The exporter's weights files (docs/interop.md): buffer/<meta.buffer>,
  // constant/<meta.constant>, <meta.input>.
  if (const std::string key = BindingKey(placeholder); !key.empty()) {
    it = inputs.find(key);
    if (it != inputs.end()) return &it->second;
  }
  for (int row : g.ParamsOwnedBy(placeholder.name())) {
    it = inputs.find(g.params()[row].name);
    if (it != inputs.end()) return &it->second;
  }
  return nullptr;
}

namespace {

// One run of Interpret, in named steps: what cannot run is refused, memory checked, inputs
// bound, residents gathered, then every node in order (outputs, ZeRO-3 ops, getitem, kernels)
// with values freed by the memory plan.
class Interpretation {
 public:
  // `taken`: inputs_ itself, when the caller handed the map over (InterpretTaking).
  Interpretation(const Graph& g, const TensorMap& inputs, const InterpreterOptions& options,
                 TensorMap* taken = nullptr)
      : g_(g),
        inputs_(inputs),
        taken_(taken),
        options_(options),
        kernels_(options.kernels ? *options.kernels : CpuKernels()),
        in_double_(options.compute_in_double),
        plan_(BuildMemoryPlan(g)),
        alloc_(options.device),
        state_(options.device),
        host_(nullptr),
        values_(g.id_bound()) {}

  absl::StatusOr<RunResult> Run() {
    OVERLAP_RETURN_IF_ERROR(CheckRunnable());
    OVERLAP_RETURN_IF_ERROR(CheckMemory());
    OVERLAP_RETURN_IF_ERROR(BindInputs());
    // Resident parameters' gathered copies are live from the start.
    for (NodeId id : plan_.order) {
      const Node& node = g_.node(id);
      if (IsAllgather(node) && plan_.resident.contains(DsId(node))) {
        OVERLAP_RETURN_IF_ERROR(Gather(node));
      }
    }
    const int64_t n = static_cast<int64_t>(plan_.order.size());
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) {
      const NodeId id = plan_.order[i];
      const Node& node = g_.node(id);
      if (node.op() == Op::kOutput) {
        OVERLAP_RETURN_IF_ERROR(Output(node));
      } else if (node.op() == Op::kCallFunction) {
        if (IsZero3Op(node)) {
          OVERLAP_RETURN_IF_ERROR(Zero3Op(node));
        } else if (node.target() == kGetItem) {
          OVERLAP_RETURN_IF_ERROR(GetItem(node));
        } else {
          OVERLAP_RETURN_IF_ERROR(RunKernel(node));
        }
      }
      if (options_.after_node && IsCallNode(node)) {
        OVERLAP_RETURN_IF_ERROR(options_.after_node(node, values_[id]));
      }
      for (NodeId s : plan_.frees_at[i]) FreeRoot(s);
      ++result_.nodes_run;
    }
    result_.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result_.peak_bytes = alloc_.peak(Pool::kValues) + result_.resident_bytes;
    result_.scratch_peak_bytes = alloc_.peak(Pool::kScratch);
    result_.host_peak_bytes = host_.peak(Pool::kValues);
    result_.total_peak_bytes = alloc_.peak_total() + result_.resident_bytes;
    values_.clear();
    result_.final_bytes = alloc_.live(Pool::kValues);
    return std::move(result_);
  }

 private:
  // Refuses what cannot run before running anything.
  absl::Status CheckRunnable() {
    for (NodeId id : plan_.order) {
      const Node& node = g_.node(id);
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
          kernels_.Find(node.target()) == nullptr) {
        return NodeError(node, absl::StrCat("no kernel for target '", node.target(), "'"));
      }
    }
    return absl::OkStatus();
  }

  // With a limit (or when asked), simulates the graph and refuses it when its peak exceeds the
  // limit.
  absl::Status CheckMemory() {
    const bool guard = !options_.memory_checked &&
                       (options_.device == nullptr || options_.guard_bytes.has_value());
    if (!options_.simulate && !guard) return absl::OkStatus();
    OVERLAP_ASSIGN_OR_RETURN(const SimulationResult sim, SimulateAlone(g_, plan_.order));
    result_.simulated_peak_bytes = sim.peak_memory_bytes;
    if (!guard) return absl::OkStatus();
    const int64_t scale = in_double_ ? 2 : 1;  // float32 values run as float64
    return CheckMemoryGuard(MulBytes(scale, sim.peak_memory_bytes), options_.guard_bytes,
                            "the graph", "its peak of graph values",
                            "a smaller preset or batch, or `overlap exec --replay --count-only`",
                            {&g_});
  }

  // Placeholders: checked against meta; shards used in place, other inputs copied into the
  // step's memory (live from time 0, as the simulator counts them).
  absl::Status BindInputs() {
    for (NodeId id : plan_.order) {
      const Node& node = g_.node(id);
      if (node.op() != Op::kPlaceholder) continue;
      const Tensor* given = FindInput(g_, node, inputs_);
      const bool shard = IsParameterShard(g_, id);
      if (given == nullptr) {
        const std::string key = BindingKey(node);
        return NodeError(
            node, shard         ? absl::StrCat("missing parameter '",
                                       node.meta().has_param ? node.meta().param : node.name(), "'")
                  : key.empty() ? std::string("missing input")
                                : absl::StrCat("missing input '", key,
                                               "' (the exporter's --weights / "
                                               "--train-data file holds it)"));
      }
      if (shard && options_.zero3 != nullptr) {  // the rank's flat shard
        values_[id] = {*given};
        continue;
      }
      if (IsHostTensor(g_, id) && !in_double_) {  // an offloaded copy: host memory, as it is
        values_[id] = {*given};
        continue;
      }
      const std::vector<TensorType> stated = StatedTypes(node);
      if (!stated.empty()) {
        OVERLAP_RETURN_IF_ERROR(CheckType(node, stated[0], *given, in_double_, "input"));
      }
      const DType dtype =
          in_double_ && IsFloatingPoint(given->dtype()) ? DType::kFloat64 : given->dtype();
      const Device here = options_.device != nullptr ? options_.device->device() : Device::kCpu;
      if (shard && dtype == given->dtype() && given->device() == here) {
        values_[id] = {*given};
        continue;
      }
      OVERLAP_ASSIGN_OR_RETURN(const bool adopted, Adopt(node, dtype));
      if (adopted) continue;
      OVERLAP_ASSIGN_OR_RETURN(
          Tensor copy, Tensor::Empty(plan_.owns[id] ? alloc_ : state_, dtype, given->shape()));
      OVERLAP_RETURN_IF_ERROR(CopyTo(*given, copy));
      values_[id] = {std::move(copy)};
    }
    return absl::OkStatus();
  }

  // With a taken map: the input bound by `node`'s name used in place when it is the whole
  // of a host storage nothing else holds and needs no conversion; true when it was.
  absl::StatusOr<bool> Adopt(const Node& node, DType dtype) {
    if (taken_ == nullptr || options_.device != nullptr) return false;
    auto it = taken_->find(node.name());
    if (it == taken_->end()) return false;
    Tensor& t = it->second;
    if (!t.defined() || t.dtype() != dtype || !t.IsContiguous() || t.offset() != 0 ||
        t.nbytes() != t.storage()->bytes() || t.storage().use_count() != 1) {
      return false;
    }
    if (!(plan_.owns[node.id()] ? alloc_ : state_).Adopt(*t.storage()).ok()) return false;
    ++result_.inputs_taken;
    result_.inputs_taken_bytes += t.nbytes();
    values_[node.id()] = {std::move(t)};
    taken_->erase(it);
    return true;
  }

  // An allgather: the whole parameter from its shard (through options.zero3 across ranks).
  absl::Status Gather(const Node& node) {
    const Tensor* shard = TensorOf(HandedOnFrom(node));
    if (shard == nullptr) return NodeError(node, "its parameter is not available");
    if (options_.zero3 != nullptr) {
      const std::vector<TensorType> full = StatedTypes(node);
      if (full.size() != 1 || full[0].dtype.empty()) {
        return NodeError(node, "meta does not state the gathered parameter's shape and dtype");
      }
      const bool resident = plan_.resident.contains(DsId(node));
      OVERLAP_ASSIGN_OR_RETURN(Tensor t,
                               options_.zero3->Allgather(node, *shard, full[0], resident, alloc_));
      if (resident) result_.resident_bytes += t.nbytes();
      values_[node.id()] = {std::move(t)};
      return absl::OkStatus();
    }
    OVERLAP_ASSIGN_OR_RETURN(Tensor copy, Tensor::Empty(alloc_, shard->dtype(), shard->shape()));
    OVERLAP_RETURN_IF_ERROR(CopyTo(*shard, copy));
    values_[node.id()] = {std::move(copy)};
    return absl::OkStatus();
  }

  // The output node: every item it lists, as a tensor (or undefined).
  absl::Status Output(const Node& node) {
    const Value& out = node.args().empty() ? Value() : node.args()[0];
    std::vector<Value> items =
        out.kind() == Value::Kind::kList ? out.items() : std::vector<Value>{out};
    for (const Value& item : items) {
      if (item.is_none()) {
        result_.outputs.emplace_back();
        continue;
      }
      const Tensor* t = item.is_ref() ? TensorOf(item.as_ref()) : nullptr;
      if (t == nullptr && item.is_ref()) {
        // A gradient freed at its reduction: the output returns the reduced one (with
        // options.zero3, the rank's shard lives with the implementation: undefined).
        auto it = reduced_root_.find(plan_.root[item.as_ref()]);
        if (it != reduced_root_.end() && options_.zero3 != nullptr) {
          result_.outputs.emplace_back();
          continue;
        }
        if (it != reduced_root_.end()) t = &result_.reduced_grads[it->second];
      }
      if (t == nullptr) {
        return NodeError(
            node, absl::StrCat("output '", item.is_ref() ? g_.node(item.as_ref()).name() : "?",
                               "' is not an available tensor"));
      }
      result_.outputs.push_back(*t);
    }
    return absl::OkStatus();
  }

  // allgather, wait, release and reduce_grad, in one process or through options.zero3.
  absl::Status Zero3Op(const Node& node) {
    const NodeId id = node.id();
    if (IsAllgather(node)) {
      if (!plan_.resident.contains(DsId(node))) {
        OVERLAP_RETURN_IF_ERROR(Gather(node));
        gathered_[DsId(node)].push_back(id);
      }
    } else if (IsWait(node) || IsRelease(node)) {
      const Tensor* t = TensorOf(HandedOnFrom(node));
      if (t == nullptr) return NodeError(node, "its input is not available");
      if (IsWait(node) && options_.zero3 != nullptr) {
        OVERLAP_RETURN_IF_ERROR(options_.zero3->Wait(node));
      }
      values_[id] = {*t};
      if (IsRelease(node) && !plan_.resident.contains(DsId(node)) &&
          ++releases_[DsId(node)] == NUsers(node)) {
        releases_[DsId(node)] = 0;
        std::deque<NodeId>& copies = gathered_[DsId(node)];
        if (!copies.empty()) {
          FreeRoot(copies.front());
          copies.pop_front();
        }
      }
    } else if (IsReduce(node)) {
      reduced_root_[plan_.root[HandedOnFrom(node)]] = DsId(node);
      const Tensor* grad = TensorOf(HandedOnFrom(node));
      if (grad == nullptr) return NodeError(node, "its gradient is not available");
      if (options_.zero3 != nullptr) {
        OVERLAP_RETURN_IF_ERROR(options_.zero3->Reduce(node, *grad));
        values_[id] = {Tensor()};
      } else {
        Tensor& acc = result_.reduced_grads[DsId(node)];
        if (options_.device != nullptr && acc.defined()) {
          return NodeError(node, "a second gradient of one ds_id on a device needs options.zero3");
        }
        if (!acc.defined()) {
          OVERLAP_ASSIGN_OR_RETURN(acc, Tensor::Empty(state_, grad->dtype(), grad->shape()));
          OVERLAP_RETURN_IF_ERROR(CopyTo(*grad, acc));
        } else {
          if (acc.shape() != grad->shape())
            return NodeError(node, "gradients of one ds_id differ in shape");
          for (int64_t k = 0; k < acc.numel(); ++k) {
            SetElement(acc, k, GetElement(acc, k) + GetElement(*grad, k));
          }
        }
        values_[id] = {acc};
      }
    } else if (IsWaitReduce(node)) {
      if (options_.zero3 != nullptr) OVERLAP_RETURN_IF_ERROR(options_.zero3->WaitReduce(node));
      values_[id] = {Tensor()};
    } else if (IsOffload(node) || IsReload(node) || IsWaitReload(node) || IsWaitOffload(node)) {
      return HostCopy(node);
    } else {
      return NodeError(node, "not a ZeRO-3 op this interpreter runs");
    }
    return absl::OkStatus();
  }

  // The host-memory ops: an offload copies into host memory (counted apart), a reload into a
  // new buffer of the step's memory, a wait_reload hands that on.
  absl::Status HostCopy(const Node& node) {
    const Tensor* t = TensorOf(HandedOnFrom(node));
    if (t == nullptr) return NodeError(node, "its input is not available");
    if (IsWaitReload(node) || IsWaitOffload(node)) {  // copies are done where they stand
      values_[node.id()] = {*t};
      return absl::OkStatus();
    }
    const bool offload = IsOffload(node);
    OVERLAP_ASSIGN_OR_RETURN(
        Tensor copy, Tensor::Uninitialized(offload ? host_ : alloc_, t->dtype(), t->shape()));
    OVERLAP_RETURN_IF_ERROR(CopyTo(*t, copy));
    if (offload && options_.zero3 != nullptr) {
      OVERLAP_RETURN_IF_ERROR(options_.zero3->Offloaded(node, *t));
    }
    values_[node.id()] = {std::move(copy)};
    return absl::OkStatus();
  }

  // operator.getitem: a tuple's element (Python's negative index too), never a tensor's row.
  absl::Status GetItem(const Node& node) {
    const NodeId id = node.id();
    const Value* src = node.args().empty() ? nullptr : &node.args()[0];
    if (src == nullptr || !src->is_ref()) {
      return NodeError(node, "getitem: argument 'self' should be a tuple node");
    }
    const Node& from = g_.node(src->as_ref());
    const std::vector<Tensor>& tuple = values_[src->as_ref()];
    // Python indexing of a tensor (x[0], x[:, :d]) selects rows; returning the tensor
    // itself would be a different answer. A source is a tensor when it is an input, an
    // element, or states one shape and computed one result.
    if (from.op() == Op::kPlaceholder || from.op() == Op::kGetAttr || from.target() == kGetItem ||
        (from.meta().has_shape && tuple.size() == 1)) {
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
    values_[id] = {tuple[k]};
    // An owned element (the memory plan's tuple rule) lives on in this node alone: the
    // tuple lets go of it, so it is freed at its own last reader.
    if (plan_.owned_element[id]) values_[src->as_ref()][k] = Tensor();
    return absl::OkStatus();
  }

  // A kernel node: 16-bit inputs widened for non-view kernels, results checked against meta.
  absl::Status RunKernel(const Node& node) {
    const NodeId id = node.id();
    // A kernel. Non-view kernels see 16-bit floats as float32 copies.
    const bool view = SharesInputStorage(node);
    bool convert = false;
    DType narrow = DType::kFloat32;
    if (!view) {
      for (NodeId in : node.inputs()) {
        for (const Tensor& t : values_[in]) {
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
        const Tensor* t = TensorOf(in);
        if (t == nullptr || !Is16Bit(t->dtype()) || widened.contains(in)) continue;
        OVERLAP_ASSIGN_OR_RETURN(
            Tensor w, Tensor::Empty(alloc_, DType::kFloat32, t->shape(), Pool::kScratch));
        OVERLAP_RETURN_IF_ERROR(CopyTo(*t, w));
        widened[in] = std::move(w);
      }
    }
    KernelCall call(
        node, alloc_,
        [&](NodeId in) -> const Tensor* {
          auto it = widened.find(in);
          return it != widened.end() ? &it->second : TensorOf(in);
        },
        convert ? Pool::kScratch : Pool::kValues, kernels_.SchemaOf(node.target()));
    call.set_in_double(in_double_);
    if (const OpSchema* s = kernels_.SchemaOf(node.target()); s != nullptr && s->Random()) {
      KernelCall::Random random;
      random.key = RandomKey(options_.random_seed, node.name());
      auto given = inputs_.find(absl::StrCat("random/", node.name()));
      if (given != inputs_.end()) random.given = &given->second;
      call.set_random(random);
    }
    OVERLAP_ASSIGN_OR_RETURN(std::vector<Tensor> results, (*kernels_.Find(node.target()))(call));
    const std::vector<TensorType> stated = StatedTypes(node);
    for (size_t k = 0; k < results.size(); ++k) {
      Tensor& r = results[k];
      if (!r.defined()) continue;
      bool aliases_input = false;
      for (NodeId in : node.inputs()) {
        for (const Tensor& t : values_[in]) aliases_input |= r.SharesStorageWith(t);
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
        ++result_.view_copies;
        result_.view_copy_bytes += r.nbytes();
      }
      // A result that shares its input's storage stays a view (as in ATen) unless the
      // graph states it is not one (aliases_input false): then the memory model counts
      // a buffer of its own, and the copy keeps measured and simulated memory equal.
      const bool stated_not_view = node.meta().has_aliases_input && !node.meta().aliases_input;
      if (convert || (!view && aliases_input && stated_not_view)) {
        OVERLAP_ASSIGN_OR_RETURN(Tensor owned, Tensor::Empty(alloc_, want, r.shape()));
        OVERLAP_RETURN_IF_ERROR(CopyTo(r, owned));
        r = std::move(owned);
      }
    }
    if (!stated.empty() && results.size() < stated.size()) {
      return NodeError(node, absl::StrCat("the kernel returned ", results.size(),
                                          " results, meta states ", stated.size()));
    }
    for (size_t k = 0; k < stated.size(); ++k) {
      if (!results[k].defined()) continue;
      OVERLAP_RETURN_IF_ERROR(
          CheckType(node, stated[k], results[k], in_double_,
                    stated.size() > 1 ? absl::StrCat("result ", k) : std::string("the result")));
    }
    values_[id] = std::move(results);
    return absl::OkStatus();
  }

  // Copies and conversions between the host and the step's device.
  absl::Status CopyTo(const Tensor& src, Tensor& dst) {
    return options_.device != nullptr ? options_.device->Copy(src, dst) : CopyConvert(src, dst);
  }

  const Tensor* TensorOf(NodeId id) const {
    if (id < 0 || id >= g_.id_bound() || values_[id].size() != 1) return nullptr;
    return &values_[id][0];
  }

  void FreeRoot(NodeId root) {
    for (NodeId m : plan_.members[root]) values_[m].clear();
  }

  const Graph& g_;
  const TensorMap& inputs_;
  TensorMap* const taken_;
  const InterpreterOptions& options_;
  const KernelRegistry& kernels_;
  const bool in_double_;
  const MemoryPlan plan_;
  RunResult result_;
  Allocator alloc_;  // the step's memory: graph values and scratch
  Allocator state_;  // outside it: converted parameters, reduced gradients
  Allocator host_;   // offloaded copies: host memory, apart from the step's
  std::vector<std::vector<Tensor>> values_;
  absl::flat_hash_map<int64_t, std::deque<NodeId>> gathered_;  // by ds_id, oldest first
  absl::flat_hash_map<int64_t, int64_t> releases_;             // by ds_id, since the last free
  absl::flat_hash_map<NodeId, int64_t> reduced_root_;  // a reduced gradient's buffer -> ds_id
};

}  // namespace

absl::StatusOr<RunResult> Interpret(const Graph& g, const TensorMap& inputs,
                                    const InterpreterOptions& options) {
  return Interpretation(g, inputs, options).Run();
}

absl::StatusOr<RunResult> InterpretTaking(const Graph& g, TensorMap inputs,
                                          const InterpreterOptions& options) {
  return Interpretation(g, inputs, options, &inputs).Run();
}

}  // namespace overlap
