// What several CLI commands share: the collective-model flags, the model-building flags of
// `gen` and `demo`, writing outputs, and the check after every graph mutation.
#ifndef OVERLAP_TOOLS_SHARED_FLAGS_H_
#define OVERLAP_TOOLS_SHARED_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/aot.h"
#include "graph/cost_model.h"
#include "graph/graph.h"
#include "graph/models.h"
#include "schedule/budget.h"
#include "schedule/optimizer.h"
#include "tools/command.h"

namespace overlap {

// --world-size, --latency-us, --bandwidth (partition, schedule, simulate).
absl::Span<const FlagSpec> CollectiveFlags();
// The collective model those flags describe (defaults: graph/cost_model.h).
CollectiveModel ReadCollectiveFlags(Invocation& in);
// The model --collective-model names (bench-comm --save's file), nullopt without the flag;
// an unreadable file is a usage error recorded in `in`.
std::optional<CollectiveModel> ReadCollectiveModelFlag(Invocation& in);

// --memory-limit, --device-memory, --reserve: the scheduler's budget (schedule, simulate,
// run, worker; with OptimizerStateFlags or TrainingOptimizerFlags, whose state it counts).
absl::Span<const FlagSpec> BudgetFlags();
// What those flags ask for (schedule/budget.h's BudgetRequest, resolved for a graph by
// ResolveBudget), read before the graph, the state counted for `optimizer` at `world_size`:
// --memory-limit with --device-memory, or --reserve without --device-memory, is a usage error
// recorded in `in` (check in.has_usage_error()).
BudgetRequest ReadBudgetFlags(Invocation& in, int world_size, const OptimizerOptions& optimizer);
// --optimizer, --momentum: the optimizer whose per-rank state a budget counts (schedule,
// simulate).
absl::Span<const FlagSpec> OptimizerStateFlags();
// The budget as one summary line ("budget 12.0 GiB (device 80 GB - state ... - reserve ...):
// the peak fits"), empty without a budget. O(1).
std::string FormatBudget(const MemoryBudget& b, int64_t peak_memory_bytes);

// The error a scheduling command prints when nothing fits its budget: "no WHAT fits the
// memory budget of B; the smallest feasible budget found is M (N bytes)".
void PrintNoFit(const Invocation& in, absl::string_view what, int64_t budget_bytes,
                int64_t min_feasible_bytes);

// --optimizer (sgd or adamw), --momentum, --lr, --weight-decay: the update rule of training
// (train, run, worker); the first two are OptimizerStateFlags.
absl::Span<const FlagSpec> TrainingOptimizerFlags();
// The optimizer either group describes, one reader for both (defaults: AdamW at lr 0.01; SGD
// at lr 0.1, momentum 0.9; a flag the command does not declare keeps its default). An
// unknown optimizer or an out-of-range value is a usage error recorded in `in`.
OptimizerOptions ReadOptimizerFlags(Invocation& in);

// --model, --preset, --graph, --backward-graph, --weights, --data, --save, --seed: what a
// training command trains and on what (train, run, worker).
absl::Span<const FlagSpec> TrainingInputFlags();
struct TrainingInputs {
  std::string model;  // a built-in model, unless graph_path is set
  Preset preset = Preset::kTiny;
  std::string graph_path, backward_graph_path;     // an AOT pair from files (both or neither)
  std::string weights_path, data_path, save_path;  // empty: seeded, synthetic, not saved
  uint64_t seed = 1;
};
// What those flags say; --model random (no kernels), one of --graph / --backward-graph
// alone, --graph with --model, or an unknown preset is a usage error recorded in `in`.
TrainingInputs ReadTrainingInputFlags(Invocation& in);
// --lifted, --loss, --batch, --seq, --layers, and random's --nodes, --seed, --sparse-meta
// (gen, demo; with DeviceFlags).
absl::Span<const FlagSpec> ModelFlags();

// The roofline cost model's --peak-tflops, --peak-tflops-fp32, --mem-bandwidth (gen, demo,
// annotate).
absl::Span<const FlagSpec> DeviceFlags();
// The device they describe; a flag not given keeps graph/cost_model.h's default. An
// out-of-range value is a usage error recorded in `in`.
DeviceSpec ReadDeviceFlags(Invocation& in);

// Which graph of a model BuildModelFromFlags returns.
enum class ModelGraph {
  kAsFlagged,  // --lifted: the AOT forward (below); otherwise the torch.fx (module) forward
  kModule,     // the torch.fx forward, parameters owned by modules, whatever --lifted says
  kForward,    // lifted: the AOT pair's forward (graph/aot.h): loss, then saved tensors
  kBackward,   // lifted: the AOT pair's backward
};

// Builds built-in model `name` as the flags say. For the random model, kForward is its lifted
// graph and kBackward its structural backward (graph/structural_backward.h). A flag that does
// not apply to the model, a bad value, or an unknown model is a usage error recorded in `in`
// (check in.has_usage_error() first).
absl::StatusOr<Graph> BuildModelFromFlags(Invocation& in, const std::string& name,
                                          ModelGraph which = ModelGraph::kAsFlagged);

// The AOT pair (graph/aot.h) of built-in model `name` (not random) as the flags say, its
// backward's device times from the flags' cost model. Usage errors as above.
absl::StatusOr<AotPair> BuildAotPairFromFlags(Invocation& in, const std::string& name);

// Writes `text` to `path` ("-": the invocation's stdout) atomically, checking the write and
// the close (graph/output_file.h).
absl::Status WriteTextFile(const Invocation& in, const std::string& path, absl::string_view text);

// Writes `g` to `path` ("-": the invocation's stdout) atomically (graph/json_writer.h).
absl::Status WriteGraphFile(const Invocation& in, const std::string& path, const Graph& g);

// The executable that ranks run (`overlap run`, `bench-comm`, the demo's step [10]):
// $OVERLAP_WORKER_BINARY when set, else this process's own (/proc/self/exe).
std::string WorkerExecutable();

// Writes a note to stderr when call nodes of `g` (ZeRO-3's dc.* ops aside) have no
// device_time: they count as 0, so simulated times are communication alone there (graphs
// exported from PyTorch have none); `overlap annotate` estimates them. Nothing otherwise.
// O(N).
void NoteMissingDeviceTimes(const Invocation& in, const Graph& g);

// Verify(g) after the CLI changed a graph, naming the step when it fails (an internal error:
// every pass must leave a valid graph).
absl::Status CheckAfter(const Graph& g, absl::string_view step);

}  // namespace overlap

#endif  // OVERLAP_TOOLS_SHARED_FLAGS_H_
