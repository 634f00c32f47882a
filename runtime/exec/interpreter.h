// The interpreter: runs a graph with lifted parameters in its node order, one kernel per
// call_function node, on given inputs and parameters, with the memory rules of timed replay
// (replay.h), so its measured peak of graph values is the simulator's peak_memory_bytes at
// world size 1.
//
//   TensorMap in = ...;  // by placeholder name (parameters also by parameter name)
//   absl::StatusOr<RunResult> r = Interpret(graph, in);
//   r->outputs[0]   // the loss of an AOT forward
//
// What runs where:
//   - call_function nodes run the registry's kernel for their target (kernel.h); views
//     allocate nothing; a value is freed after its last reader (replay.h's rules); a
//     result the kernel returns as a view of its input stays a view (an expand of 72 B is
//     72 B, whatever its shape), unless meta states aliases_input false: then it is copied
//     into a buffer of its own, the one the simulator counts;
//   - operator.getitem of a tensor (Python's x[i], not tuple access) is refused naming the
//     node, as is an argument ATen refuses (kernel.h);
//   - ZeRO-3 ops in one process: allgather copies the whole parameter into a new buffer,
//     wait hands it on, release frees the oldest gathered copy when its count reaches
//     n_users, reduce_grad adds the gradient into the per-ds_id reduced gradient (state kept
//     outside the step's memory, as a shard's gradient is);
//   - host-memory ops (activation offloading, graph/dc_ops.h), copies done where they stand:
//     dc.offload_tensor copies its value into host memory (RunResult::host_peak_bytes,
//     counted apart from the step's memory) and the value is freed after its last device
//     reader; a placeholder a reload reads is that host copy, used in place, not counted;
//     dc.reload_tensor copies it into a new buffer of the step's memory; dc.wait_reload hands
//     that on, dc.wait_offload the host copy. With free copies these are the simulator's rules
//     (SimulateAlone);
//   - operator.getitem picks a tuple element; placeholders take the given tensors: a
//     parameter placeholder (a parameter shard) uses the caller's tensor as is, any other
//     input is copied into the step's memory, where the simulator counts it from time 0;
//   - bfloat16 / float16 values are stored as such; non-view kernels see float32 copies and
//     their float results are rounded to the stated dtype (nearest even).
// Errors name the node: a missing input or parameter, a shape or dtype that differs from
// meta, an unknown target, module-owned parameters (call_module / get_attr: the format
// records no module types), call_method, a value read after it was freed.
#ifndef OVERLAP_RUNTIME_EXEC_INTERPRETER_H_
#define OVERLAP_RUNTIME_EXEC_INTERPRETER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/shape_rules.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/tensor.h"
#include "runtime/kernels/kernel.h"

namespace overlap {

// What runs a graph's ZeRO-3 ops across ranks (zero3.h's trainer implements it). Without
// one the interpreter runs them in one process, as described above. With one:
//   - a parameter shard placeholder takes the given tensor as is (the rank's flat shard;
//     its shape is not checked against meta, which states the whole parameter);
//   - dc.allgather_param calls Allgather, which starts gathering `shard` into a buffer of
//     `full`'s type that it allocates from `alloc` (the step's memory) and returns; a
//     resident (persistent) allgather is called before the first node, with resident set:
//     it returns a gathered copy that the implementation keeps across graphs and steps
//     (refreshing it in the forward), counted in RunResult::resident_bytes;
//   - dc.wait_allgather calls Wait (blocking compute until that allgather is done);
//     dc.release_param frees the gathered buffer at its count, as in one process;
//   - dc.reduce_grad calls Reduce, which must copy `grad` before it returns (the gradient
//     is freed on the plan's schedule); the node's result, and the output items that
//     return it, are undefined tensors (the reduced shard lives with the implementation).
//   - dc.offload_tensor copies its value to host memory as in one process, then calls
//     Offloaded with the value (an implementation may hold it to keep it counted until
//     the copy's simulated completion, as a real asynchronous copy would).
class Zero3Collectives {
 public:
  virtual ~Zero3Collectives() = default;
  virtual absl::Status Offloaded(const Node& node, const Tensor& value) {
    (void)node;
    (void)value;
    return absl::OkStatus();
  }
  // dc.wait_reduce: blocks until its reduce_grad's (bucket's) reduce-scatter has finished,
  // when it has been launched. In one process a reduction is done at once.
  virtual absl::Status WaitReduce(const Node& node) {
    (void)node;
    return absl::OkStatus();
  }
  virtual absl::StatusOr<Tensor> Allgather(const Node& node, const Tensor& shard,
                                           const TensorType& full, bool resident,
                                           Allocator& alloc) = 0;
  virtual absl::Status Wait(const Node& node) = 0;
  virtual absl::Status Reduce(const Node& node, const Tensor& grad) = 0;
};

struct InterpreterOptions {
  // The kernels; nullptr: CpuKernels().
  const KernelRegistry* kernels = nullptr;
  // Run floating-point values in float64 whatever their stated dtype (finite-difference
  // checks): float inputs are converted on entry and results are float64.
  bool compute_in_double = false;
  // Also simulate the graph (world size 1) and report its peak beside the measured one.
  bool simulate = false;
  // The memory guard (memory_plan.h; none: the memory available now): on the host, every run
  // is simulated first (O(N log N + E)) and refused when its peak of graph values (doubled
  // under compute_in_double) exceeds it. On a device (`device` below) only a guard given is
  // checked: the device's allocator refuses what does not fit.
  std::optional<int64_t> guard_bytes;
  // The caller checked this graph's memory once, up front (a trainer when it is made, a job
  // before its ranks start): no guard, and no simulation, on every run of a step.
  bool memory_checked = false;
  // Called after each call node runs, with its results (before the plan frees anything), on
  // the interpreter's thread; an error ends the run. The DDP step launches a bucket's
  // allreduce from here once the bucket's last gradient exists. Results must not be
  // modified; copy what must outlive the node.
  std::function<absl::Status(const Node&, const std::vector<Tensor>&)> after_node;
  // Runs the ZeRO-3 ops across ranks (above); nullptr: in one process. Not owned.
  Zero3Collectives* zero3 = nullptr;
  // The seed of the run's random ops (dropout's bernoulli_): a node draws from
  // RandomKey(random_seed, its name) (runtime/core/random.h), so its mask is reproducible
  // from this seed alone; a trainer passes RandomSeed(seed, rank, step). An input named
  // "random/<node name>" (torch's own mask, which the exporter writes for a comparison) is
  // that node's draw instead, when its shape matches.
  uint64_t random_seed = 0;
  // The device the step's tensors live on (runtime/cuda/cuda_device.h); nullptr: the host.
  // Inputs may be on either; they are copied (or used in place, a device shard) as above,
  // and the kernels must be that device's (options.kernels). Results stay on the device.
  // Not owned.
  DeviceMemory* device = nullptr;
};

struct RunResult {
  // One per item of the output node's list (undefined for None), in order.
  std::vector<Tensor> outputs;
  // ZeRO-3 graphs: the reduced gradient of each ds_id (in one process, the whole gradient).
  std::map<int64_t, Tensor> reduced_grads;
  // Measured peak of graph values (with options.zero3, plus resident_bytes: residents are
  // held for the whole step, as the simulator counts them).
  int64_t peak_bytes = 0;
  int64_t resident_bytes = 0;      // with options.zero3: resident parameters' gathered copies
  int64_t final_bytes = 0;         // graph values live at the end (what the output holds)
  int64_t scratch_peak_bytes = 0;  // kernels' temporaries, counted apart
  int64_t host_peak_bytes = 0;     // offloaded copies in host memory, counted apart
  // Graph values and kernels' temporaries held at one time (with residents): the run's
  // tensor memory, what PyTorch's profiler measures; between peak_bytes and peak_bytes +
  // scratch_peak_bytes.
  int64_t total_peak_bytes = 0;
  int64_t simulated_peak_bytes = -1;  // when simulated (options.simulate, or the guard)
  // View nodes (SharesInputStorage) whose input's layout needed a copy (reshape of a
  // transpose): bytes the plan did not count, so the measured peak may exceed the
  // simulated one by up to this much. 0 for every graph overlap builds.
  int64_t view_copies = 0;
  int64_t view_copy_bytes = 0;
  int64_t nodes_run = 0;
  // Inputs used in place instead of copied (InterpretTaking), and their bytes.
  int64_t inputs_taken = 0;
  int64_t inputs_taken_bytes = 0;
  double wall_s = 0;
};

// Runs `g` on `inputs`. Cost: the kernels' plus O(N + E).
absl::StatusOr<RunResult> Interpret(const Graph& g, const TensorMap& inputs,
                                    const InterpreterOptions& options = {});

// Interpret, taking `inputs`: an input that is the whole of a host storage nothing else
// holds, bound by its placeholder's name and needing no conversion, is used in place (its
// bytes move into this run's count: Allocator::Adopt) instead of copied into the run's
// memory, and is freed at its last use here. Measured memory is Interpret's (an adopted
// input counts from the start, as its copy would). A forward's saved tensors handed to its
// backward: RunAotStep with AotStepOptions::hand_over_saved. Cost: Interpret's, less the
// copies.
absl::StatusOr<RunResult> InterpretTaking(const Graph& g, TensorMap inputs,
                                          const InterpreterOptions& options = {});

// The tensor a placeholder takes from `inputs`: by its name, else (a parameter placeholder)
// by its meta.param (or "param/" + it) or the name of a parameter-table row it owns, else
// by an exporter's binding (docs/interop.md): "buffer/" + meta.buffer, "constant/" +
// meta.constant, or meta.input; nullptr when none.
const Tensor* FindInput(const Graph& g, const Node& placeholder, const TensorMap& inputs);

// The key an exporter's binding names for a placeholder ("buffer/bn.running_mean",
// "constant/_tensor_constant0", "input/0"; FindInput's order); empty when it has none.
std::string BindingKey(const Node& placeholder);

// An unknown meta key's value when it is a plain JSON string (meta.buffer, meta.constant,
// meta.updates_buffer: the exporter's keys); nullopt otherwise. O(meta keys).
std::optional<std::string> ExtraString(const NodeMeta& m, absl::string_view key);

// The tensors of `given` that feed buffer and constant placeholders of `g` (FindInput's
// "buffer/" + meta.buffer and "constant/" + meta.constant bindings), under the same keys:
// what a training step adds to every batch, apart from the parameters and the data.
// O(placeholders).
TensorMap BufferInputs(const Graph& g, const TensorMap& given);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_EXEC_INTERPRETER_H_
