// Fills the device_time and tensor_size a graph's metadata leaves out, from the roofline cost
// model (graph/cost_model.h), so that graphs from other exporters (torch.fx, AOT) can be
// scheduled and simulated. `overlap annotate` runs it; no other pass estimates: the
// simulator and the schedulers take an absent device_time as 0 and `overlap inspect` counts
// such nodes.
//
// Per node: tensor_size is the sum of numel x dtype bytes over the node's stated types
// (graph/value_bytes.h's StatedBytes, what every memory figure counts when it is absent).
// device_time = KernelTime(flops, bytes, dtype), where bytes are what the kernel reads and
// writes (its inputs' and its outputs' stated sizes, plus a call_module's own parameters)
// and flops come from a per-op formula keyed by the op's base name (aten.addmm.default ->
// addmm, torch.nn.functional.gelu -> gelu, operator.add -> add; call_module nodes by the
// class in meta.module, which overlap_export writes). The table is in docs/cost-model.md.
// Views (meta.aliases_input), getitem and size queries take 0; an ATen op that always
// returns a view and whose meta leaves aliases_input out is marked a view (the report
// counts them). An op without a formula
// gets the memory-bound fallback (flops 0, bytes as above) and is counted in the report.
#ifndef OVERLAP_GRAPH_ANNOTATE_H_
#define OVERLAP_GRAPH_ANNOTATE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

struct AnnotateOptions {
  DeviceSpec device;
  // Replace device_time / tensor_size where the metadata already has them (default: fill
  // only what is missing, so an exporter's measured times survive).
  bool overwrite = false;
};

struct AnnotateReport {
  int64_t device_times_filled = 0;  // call nodes given a device_time
  int64_t tensor_sizes_filled = 0;  // nodes given a tensor_size
  int64_t by_formula = 0;           // filled device times with a formula (views included)
  int64_t fallback = 0;             // filled device times from the memory-only fallback
  // Fallback nodes per op: the call_function / call_method target, or for call_module the
  // class from meta.module ("call_module" when it is absent). Sorted by name.
  std::map<std::string, int64_t> fallback_ops;
  int64_t kept = 0;  // call nodes whose device_time was present and kept
  // Call nodes with a typed input but no stated result type (not views): their bytes count
  // their inputs only. Python values (sizes and arithmetic on them) count in neither.
  int64_t untyped = 0;
  double total_device_time = 0;  // seconds, over every call node after annotating
  // ATen views (expand, transpose, slice, ...) whose meta left aliases_input out, marked
  // true: their results are views in every executor, so they take no memory of their own.
  int64_t views_marked = 0;
};

// The op's base name that the formulas are keyed by, from a call_function / call_method
// target: "aten.native_layer_norm.default" -> "native_layer_norm", "aten.add_.Tensor" ->
// "add", "torch.nn.functional.relu" -> "relu", "operator.getitem" -> "getitem". O(length).
std::string BaseOpName(absl::string_view target);

// Annotates `g` in place as above. Only call_function, call_method and call_module nodes
// get a device_time; every node but the output with a stated type and no tensor_size gets
// one. Never
// fails on an op it does not know (that is the fallback); InvalidArgument when the device
// figures are not positive, or naming the node whose stated shape takes more than 2^63
// bytes, pushes the graph's total tensor_size past 64 bits, or gives a non-finite time
// (the verifier would refuse the result). On error `g` is unchanged. O(N + E).
absl::StatusOr<AnnotateReport> AnnotateCosts(Graph& g, const AnnotateOptions& options = {});

// The report as a few lines for the CLI. O(fallback ops).
std::string FormatAnnotateReport(const AnnotateReport& r);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_ANNOTATE_H_
