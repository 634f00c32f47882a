// Kernels and their registry: what runs one call_function node on tensors.
//
// A kernel gets a KernelCall (the node, its arguments resolved to tensors and constants,
// the allocator) and returns the node's results: one tensor, or one per tuple element (an
// undefined Tensor for a None element, e.g. a gradient its output mask did not ask for).
//
//   KernelRegistry kernels = CpuKernels();   // every op of docs/ops.md
//   kernels.Register("mylib.fused_gelu.default", MyFusedGelu);
//
// Contract for kernels (the interpreter's memory accounting rests on it):
//   - results are allocated with NewOutput (the graph-values pool, or scratch while the
//     interpreter converts 16-bit floats), temporaries with NewScratch;
//   - a kernel for a view op (docs/ops.md's "alias" column) returns a view of its first
//     input and allocates nothing; every other kernel returns new storage;
//   - errors are values naming the node (KernelCall::Error), never aborts.
#ifndef OVERLAP_RUNTIME_KERNELS_KERNEL_H_
#define OVERLAP_RUNTIME_KERNELS_KERNEL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"
#include "graph/op_schema.h"
#include "runtime/core/tensor.h"

namespace overlap {

// One node's call: its arguments and where its tensors come from.
class KernelCall {
 public:
  // `tensor_of` gives the tensor of a referenced node (nullptr: not available, an error
  // naming it). `output_pool` is where NewOutput allocates.
  // Binds the node's arguments to `schema`, by default its target's declaration
  // (graph/op_schema.h; KernelRegistry::SchemaOf gives a user op's). O(args).
  KernelCall(const Node& node, Allocator& alloc, std::function<const Tensor*(NodeId)> tensor_of,
             Pool output_pool = Pool::kValues, const OpSchema* schema = nullptr);

  const Node& node() const { return node_; }
  Allocator& allocator() { return alloc_; }
  // The tensor of a referenced node (what the typed arguments resolve through); nullptr
  // when not available.
  const Tensor* TensorOf(NodeId id) const { return tensor_of_(id); }

  // Arguments are read by name through the operator's schema: given by position or keyword,
  // else the schema's default. A target the schema does not declare (a user's own op,
  // registered without a schema) has only its keywords by name.
  // The argument `name`, else nullptr. O(args).
  const Value* Arg(absl::string_view name) const;
  // The schema's refusal of the node's arguments (a keyword it does not declare, surplus
  // arguments, a keyword-only one by position), or OK; every typed accessor returns it first.
  absl::Status CheckArgs() const;

  // Typed arguments. Each fails with InvalidArgument naming the node, the argument and what
  // it got when the argument is missing (and has no default) or of the wrong kind. Ints
  // and bools (a Scalar may be either) are accepted for doubles; a single int for an int
  // list. A `fallback` is what None means where the schema's default is None (slice's end:
  // the dimension's size).
  absl::StatusOr<Tensor> TensorArg(absl::string_view name) const;
  // nullopt for None or a missing argument.
  absl::StatusOr<std::optional<Tensor>> OptionalTensorArg(absl::string_view name) const;
  absl::StatusOr<std::vector<Tensor>> TensorListArg(absl::string_view name) const;
  // A `Tensor?[]` argument (index's indices): None items as nullopt.
  absl::StatusOr<std::vector<std::optional<Tensor>>> OptionalTensorListArg(
      absl::string_view name) const;
  absl::StatusOr<int64_t> IntArg(absl::string_view name,
                                 std::optional<int64_t> fallback = std::nullopt) const;
  absl::StatusOr<double> DoubleArg(absl::string_view name,
                                   std::optional<double> fallback = std::nullopt) const;
  absl::StatusOr<bool> BoolArg(absl::string_view name,
                               std::optional<bool> fallback = std::nullopt) const;
  absl::StatusOr<std::vector<int64_t>> IntListArg(absl::string_view name) const;
  // A `float[]?` argument (upsampling's scale_factors): nullopt for None or a missing one.
  absl::StatusOr<std::optional<std::vector<double>>> OptionalDoubleListArg(
      absl::string_view name) const;
  // A bool list (output masks); missing or None gives `fallback`.
  absl::StatusOr<std::vector<bool>> BoolListArg(absl::string_view name,
                                                std::vector<bool> fallback) const;
  absl::StatusOr<std::string> StringArg(absl::string_view name,
                                        std::optional<std::string> fallback = std::nullopt) const;

  // A zeroed result / temporary. O(bytes).
  absl::StatusOr<Tensor> NewOutput(DType dtype, absl::Span<const int64_t> shape);
  // The same without zeroing, for a kernel that writes every element (or, in timed replay,
  // none that anyone reads).
  absl::StatusOr<Tensor> NewUninitializedOutput(DType dtype, absl::Span<const int64_t> shape);
  absl::StatusOr<Tensor> NewScratch(DType dtype, absl::Span<const int64_t> shape);

  // InvalidArgument "node 'name' (target): message".
  absl::Status Error(absl::string_view message) const;

  // What a random op (a schema with a `Generator? generator` argument: bernoulli_) draws
  // from: element i of its draw is RandomUniform01(key, i) (runtime/core/random.h), so a
  // mask is a function of the run's seed and the node's name; or, when `given` is set,
  // that tensor is the draw (torch's own mask, fed for a comparison with torch; not owned).
  // The interpreter sets it for every node; the default is key 0, nothing given.
  struct Random {
    uint64_t key = 0;
    const Tensor* given = nullptr;
  };
  void set_random(Random r) { random_ = r; }
  const Random& random() const { return random_; }

  // Whether the run computes in float64 whatever the graph's float dtypes (exec / train
  // --double): a float32 that a dtype argument names, or that a factory defaults to, is
  // float64 then (DTypeKwarg), so a made tensor meets its float64 operands.
  void set_in_double(bool b) { in_double_ = b; }
  bool in_double() const { return in_double_; }

 private:
  const Node& node_;
  Allocator& alloc_;
  std::function<const Tensor*(NodeId)> tensor_of_;
  Pool output_pool_;
  const OpSchema* schema_;  // nullptr: the target is undeclared
  Random random_;
  bool in_double_ = false;
  // The node's arguments bound to schema_; none for an undeclared target.
  std::optional<absl::StatusOr<OpArgs>> bound_;
};

// A kernel: the node's results (one per tuple element), or an error naming the node.
using Kernel = std::function<absl::StatusOr<std::vector<Tensor>>(KernelCall&)>;

// Kernels by call_function target. Copyable: a backend starts from CpuKernels() and adds or
// replaces its own.
class KernelRegistry {
 public:
  // Adds or replaces the kernel for `target`. An undeclared target (a user's op) may name
  // the schema its arguments follow (FindOpSchema of the op it implements; not owned), so
  // that its kernel reads them by name as a declared op's does.
  void Register(std::string target, Kernel kernel, const OpSchema* schema = nullptr) {
    if (schema != nullptr) schemas_[target] = schema;
    kinds_.erase(target);
    kernels_[std::move(target)] = std::move(kernel);
  }
  // Adds or replaces the kernel for `target`, recording `kind`: how this backend runs it,
  // in the backend's words (CudaKernelKind's "cublas", "host", ...). The registration is
  // the one place a backend states its support for an op.
  void Register(std::string target, std::string kind, Kernel kernel) {
    kinds_[target] = std::move(kind);
    kernels_[std::move(target)] = std::move(kernel);
  }
  // The kind `target` was registered with; "" for none (or no kernel). O(1) expected.
  std::string KindOf(absl::string_view target) const;
  // The schema `target`'s arguments follow: its declaration, else the one it was registered
  // with; nullptr for neither. O(1) expected.
  const OpSchema* SchemaOf(absl::string_view target) const;
  // The kernel for `target`, nullptr when none is registered. O(1) expected.
  const Kernel* Find(absl::string_view target) const;
  // Registered targets, sorted. O(K log K).
  std::vector<std::string> Targets() const;

 private:
  absl::flat_hash_map<std::string, Kernel> kernels_;
  absl::flat_hash_map<std::string, const OpSchema*> schemas_;
  absl::flat_hash_map<std::string, std::string> kinds_;
};

// The CPU kernels: every call_function target of docs/ops.md (forward, backward and loss),
// for float32 and float64 tensors (the interpreter runs 16-bit floats through the float32
// kernels); arithmetic, sums, where, comparisons and the floating unary ops take bool and
// integer operands too, their results' dtypes decided by graph/type_promotion.h as the shape
// rules decide them. Built once; O(1) after.
const KernelRegistry& CpuKernels();

// Registration hooks of the kernel files (kernels/elementwise.cc, index.cc, nn.cc, reduction.cc,
// scatter.cc, view.cc); CpuKernels calls each once.
void RegisterViewKernels(KernelRegistry& r);
void RegisterElementwiseKernels(KernelRegistry& r);
void RegisterReductionKernels(KernelRegistry& r);
void RegisterIndexKernels(KernelRegistry& r);
void RegisterNnKernels(KernelRegistry& r);
void RegisterMaxReductionKernels(KernelRegistry& r);  // kernels/max_reduction.cc
void RegisterChannelKernels(KernelRegistry& r);       // kernels/channel.cc: prelu, pixel_shuffle
void RegisterScatterKernels(KernelRegistry& r);
void RegisterPoolNdKernels(KernelRegistry& r);   // kernels/pool_nd.cc
void RegisterFactoryKernels(KernelRegistry& r);  // kernels/factory.cc: ones, arange, bernoulli

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_KERNELS_KERNEL_H_
