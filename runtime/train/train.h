// Training in one process: an AOT pair's forward and backward run by the interpreter, an
// optimizer (SGD with momentum, AdamW) on the parameters, and synthetic tasks that a tiny
// model learns in a few dozen steps. What `overlap train` runs; DDP and ZeRO-3 (ranks over
// Gloo) and the CUDA backend run the same step.
//
//   absl::StatusOr<Trainer> t = Trainer::Create("gpt2", Preset::kTiny, TrainOptions{});
//   for (int k = 0; k < 50; ++k) absl::StatusOr<StepResult> s = t->Step();
#ifndef OVERLAP_RUNTIME_TRAIN_TRAIN_H_
#define OVERLAP_RUNTIME_TRAIN_TRAIN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/aot.h"
#include "graph/models.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/tensor.h"
#include "runtime/exec/interpreter.h"
#include "runtime/train/data.h"
#include "runtime/train/synthetic.h"
#include "schedule/optimizer.h"

namespace overlap {

// The parameter name a forward placeholder stands for: meta.param, else its name.
std::string ParamNameOf(const Node& placeholder);

// The check every reader of a weights file (`--weights` of train, run and exec) applies,
// against the forward graph `forward` it is for, before any step:
//   - every parameter placeholder (IsParameterPlaceholder) finds its tensor in `weights`
//     (FindInput: by placeholder name, meta.param, "param/" + it, or a parameter-table row it
//     owns); otherwise InvalidArgument naming the first missing parameters and how many of
//     how many are missing (an empty file misses them all);
//   - every tensor is accounted for: it binds a placeholder, names a parameter-table row
//     (bare or after "param/": a parameter the graph does not read), or lies where the
//     exporter's files keep what is not a weight (docs/interop.md: "batch/", "ref/",
//     "ref64/", "ref64p/", "buffer/", "constant/", "input/", "target"); otherwise
//     InvalidArgument naming its key (a misspelt parameter, a file for another model).
// Shapes and dtypes are checked where the tensors are bound. O((placeholders + tensors) log
// tensors).
absl::Status CheckWeights(const Graph& forward, const TensorMap& weights);

// One forward + backward of an AOT pair (graph/aot.h's calling convention).
struct AotStepResult {
  double loss = 0;  // the forward's first output
  TensorMap grads;  // by parameter name (ParamNameOf), trainable parameters only
  // Buffers the forward updated ("buffer/<name>" -> the new value, on the host): its outputs
  // whose node carries meta.updates_buffer (training-mode batch norm's running statistics,
  // docs/interop.md).
  TensorMap buffers;
  RunResult forward, backward;  // the two runs (outputs, measured memory, time)
};

// How RunAotStep hands the forward's results to the backward.
struct AotStepOptions {
  // false: the forward's outputs stay alive (in the result) while the backward copies the
  // saved ones into its own step memory. true: each saved tensor (and tangent) moves into
  // the backward without a copy (InterpretTaking) and is freed at its last use there; the
  // result's forward.outputs keeps only the loss and the outputs that were not handed
  // over. Measured and simulated memory are the same either way; true saves the copies'
  // time and holds the saved tensors once instead of twice. The trainers use true.
  bool hand_over_saved = false;
};

// Runs `pair.forward` on `params` (by parameter or placeholder name) and `data` (by
// placeholder name), then `pair.backward` on the primals, the saved tensors (by the names
// of the forward values they are) and the tangents (`tangents_k` for forward output k: ones
// for the loss, zeros for the others). Uses only the two graphs, so graphs read from files
// run too. `backward_options`, when given, runs the backward (the DDP step hooks its
// gradients there). Errors: the interpreter's, naming the node. O(kernels).
absl::StatusOr<AotStepResult> RunAotStep(const AotPair& pair, const TensorMap& params,
                                         const TensorMap& data,
                                         const InterpreterOptions& options = {},
                                         const InterpreterOptions* backward_options = nullptr,
                                         const AotStepOptions& step = {});

// PyTorch's torch.optim.SGD (momentum, dampening 0) and AdamW update rules. A float32
// parameter is updated in float32, op for op as torch.optim's single-tensor path rounds,
// with its state (momentum buffer, moments) in float32; other dtypes (float64 under
// TrainOptions::compute_in_double) element by element in double, the state in their dtype.
// Each parameter counts its own steps (AdamW's bias correction), as torch.optim's
// per-parameter state does.
class TrainOptimizer {
 public:
  explicit TrainOptimizer(OptimizerOptions options) : options_(options) {}
  // Updates `params` in place from `grads` (same names; a parameter without a gradient is
  // left alone). InvalidArgument naming a gradient whose shape differs. O(elements).
  absl::Status Step(TensorMap& params, const TensorMap& grads);
  // Bytes of optimizer state (momenta, moments) held now.
  int64_t state_bytes() const { return state_alloc_.live(Pool::kValues); }

 private:
  OptimizerOptions options_;
  Allocator state_alloc_;
  TensorMap m_, v_;                       // momentum / first and second moments
  std::map<std::string, int64_t> steps_;  // per parameter, as torch.optim keeps them
};

struct TrainOptions {
  OptimizerOptions optimizer;
  uint64_t seed = 1;
  // Start from these parameters (a weights file's tensors, by parameter name) instead of
  // seeded ones: CheckWeights, then every parameter with the shape and dtype the model
  // states. Absent: seeded. Given but empty is an error (every parameter is missing).
  std::optional<TensorMap> initial_params;
  // The memory guard (runtime/exec/memory_plan.h; none: the memory available now): a model
  // whose step needs more (simulated graph values, parameters, gradients, optimizer state) is
  // refused up front.
  std::optional<int64_t> guard_bytes;
  // The data: step k trains on batches[(k - 1) mod size] (inputs by placeholder name or
  // binding, FindInput). Empty: the synthetic task (SyntheticTask).
  std::vector<TensorMap> batches;
  // Train in float64 whatever the graph's float dtypes (InterpreterOptions::
  // compute_in_double): parameters, buffers and the update are float64 from the start, so
  // params() and buffers() hold float64. Tells a wrong kernel from float32 round-off (a
  // ReLU mask that flips on a pre-activation within a rounding of zero): compared with a
  // float64 reference, round-off is gone and a wrong kernel is not. Twice the memory.
  bool compute_in_double = false;
};

class Work;  // runtime/comm/communicator.h: a collective in flight

// One optimizer step's figures, whichever trainer ran it (Trainer here, DdpTrainer,
// Zero3Trainer); what a trainer does not do stays 0.
struct StepResult {
  int64_t step = 0;      // from 1
  double loss = 0;       // this rank's
  double seconds = 0;    // wall time of forward, backward and update
  double graph_s = 0;    // the part the simulator predicts: ZeRO-3's forward, backward and final
                         // drain; the whole step otherwise
  double comm_s = 0;     // summed run time of the step's collectives
  double exposed_s = 0;  // time compute waited for them
  // Measured peaks of graph values, per graph (ZeRO-3: gathered buffers and residents in).
  int64_t forward_peak_bytes = 0, backward_peak_bytes = 0;
  int64_t peak_bytes() const {
    return forward_peak_bytes > backward_peak_bytes ? forward_peak_bytes : backward_peak_bytes;
  }
  // DDP: buckets allreduced, and of those launched before the backward ended.
  int64_t allreduces = 0, launched_during_backward = 0;
  // ZeRO-3: allgathers that moved bytes (residents' refreshes included), reduce-scatters (one
  // per bucket).
  int64_t allgathers = 0, reduce_scatters = 0;
  std::vector<std::shared_ptr<Work>> works;  // the step's collectives, in issue order
  // The buffers this step's forward updated (AotStepResult::buffers): the caller feeds them
  // to the next step (Trainer does so itself).
  TensorMap buffers;
};

// A model's tiny AOT pair, its parameters, an optimizer and a SyntheticTask.
class Trainer {
 public:
  static absl::StatusOr<Trainer> Create(absl::string_view model, Preset preset,
                                        TrainOptions options);
  // Any AOT pair (graph/aot.h's convention; e.g. read from an exporter's files), named
  // `name` in errors. Parameters: options.initial_params (CheckWeights, every parameter with
  // the graph's shape and dtype; "buffer/" entries feed buffer placeholders) or seeded.
  static absl::StatusOr<Trainer> FromPair(AotPair pair, absl::string_view name,
                                          TrainOptions options);
  // One optimizer step on a new batch. O(forward + backward).
  absl::StatusOr<StepResult> Step();
  // The current parameters, by parameter name.
  const TensorMap& params() const { return params_; }
  // The buffers and constants every step adds to its batch ("buffer/<name>",
  // "constant/<name>"), buffers as the last step updated them.
  const TensorMap& buffers() const { return constants_; }
  const AotPair& pair() const { return *pair_; }

 private:
  Trainer() = default;
  absl::StatusOr<TensorMap> Batch();

  std::unique_ptr<AotPair> pair_;
  std::unique_ptr<Allocator> alloc_;
  TensorMap params_;
  std::unique_ptr<TrainOptimizer> optimizer_;
  uint64_t seed_ = 1;
  int64_t step_ = 0;
  std::unique_ptr<SyntheticTask> task_;
  std::vector<TensorMap> batches_;
  TensorMap constants_;  // buffers, added to every batch
  bool in_double_ = false;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_TRAIN_H_
