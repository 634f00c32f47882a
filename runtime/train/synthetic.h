// Seeded tensors for a graph's placeholders: parameters initialised as the layers'
// PyTorch defaults would be (roughly), data inputs drawn so that every index is in range.
// What `overlap exec --seed`, `overlap train` and the tests feed graphs that come without
// tensors. Deterministic across machines (own generator, no std distributions).
#ifndef OVERLAP_RUNTIME_TRAIN_SYNTHETIC_H_
#define OVERLAP_RUNTIME_TRAIN_SYNTHETIC_H_

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/tensor.h"

namespace overlap {

// A small deterministic generator (splitmix64).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t Next();
  // Uniform in [0, 1).
  double Uniform();
  // Uniform in [0, n); n > 0.
  int64_t Below(int64_t n);
  // Standard normal (Box-Muller).
  double Normal();

 private:
  uint64_t state_;
};

// The exclusive upper bound an integer placeholder's values must respect, read from its
// readers (through views): an embedding's rows, a loss's classes; 2 when nothing bounds it.
// O(users).
int64_t IndexBound(const Graph& g, NodeId placeholder);

// Every placeholder's tensor, keyed by placeholder name, from meta shape and dtype:
// parameters (meta.param or a parameter-table owner) uniform in +-1/sqrt(fan_in) for
// matrices and larger, 1 for one-dimensional weights, 0 for biases; float inputs standard
// normal, except batch norms' running statistics bound by meta.buffer (variance 1, mean 0,
// as PyTorch starts them); integer inputs uniform in [0, IndexBound). Tensor constants
// (meta.constant) are not drawn: their values are the exporter's. InvalidArgument naming a
// placeholder without shape or dtype. O(total elements).
struct SeededInputsOptions {
  bool parameters = true;                 // draw the parameter placeholders
  bool data = true;                       // draw the others
  absl::flat_hash_set<std::string> skip;  // placeholder names not to draw (given elsewhere)
};
absl::StatusOr<TensorMap> SeededInputs(const Graph& g, uint64_t seed, Allocator& alloc,
                                       const SeededInputsOptions& options = {});

// Whether placeholder `id` stands for a parameter (meta.param, or it owns table rows).
bool IsParameterPlaceholder(const Graph& g, NodeId id);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TRAIN_SYNTHETIC_H_
