// The random-graph generator shared by the CLI (`overlap gen random`), property tests and
// fuzzers.
//
// Graphs are acyclic by construction (a node reads only nodes made before it), size-bounded,
// and always pass Verify(). They exercise what real exports contain: several users per node,
// nested list / dict / slice arguments, kwargs, string constants that start with '%', view
// ops marked aliases_input, call_module nodes owning several parameters, modules called
// twice, get_attr parameters, tied (shared-storage), frozen and ddp_ignored parameters, and
// lifted parameter placeholders (meta.param).
//
// One generator core reads its decisions from a ChoiceSource, so the three front ends agree:
//   RandomGraph(options)          seeded PRNG: the same seed gives the same graph, anywhere;
//   GraphFromBytes(data, max)     fuzzers: every byte string decodes to a valid graph;
//   ArbitraryGraph() (random_graph_rc.h)  RapidCheck: shrinks by shrinking the bytes.
#ifndef OVERLAP_GRAPH_RANDOM_GRAPH_H_
#define OVERLAP_GRAPH_RANDOM_GRAPH_H_

#include <cstdint>

#include "absl/types/span.h"
#include "graph/graph.h"

namespace overlap {

// Where the generator's decisions come from.
class ChoiceSource {
 public:
  virtual ~ChoiceSource() = default;
  // A value in [0, bound) (bound >= 1).
  virtual uint64_t Below(uint64_t bound) = 0;
  // True when the source has nothing more to say (bytes exhausted); generation then closes
  // the graph. A PRNG is never exhausted.
  virtual bool Exhausted() const = 0;
  bool Chance(uint64_t num, uint64_t den) { return Below(den) < num; }
};

// SplitMix64: tiny, fast, and the same sequence on every platform (unlike std::
// distributions, whose algorithms differ between standard libraries).
class SeededChoices : public ChoiceSource {
 public:
  explicit SeededChoices(uint64_t seed) : state_(seed) {}
  uint64_t Below(uint64_t bound) override;
  bool Exhausted() const override { return false; }

 private:
  uint64_t state_;
};

// Reads decisions from a byte string: one byte for bounds up to 256, more above; zeros once
// the bytes run out.
class ByteChoices : public ChoiceSource {
 public:
  explicit ByteChoices(absl::Span<const uint8_t> data) : data_(data) {}
  uint64_t Below(uint64_t bound) override;
  bool Exhausted() const override { return pos_ >= data_.size(); }

 private:
  absl::Span<const uint8_t> data_;
  size_t pos_ = 0;
};

struct RandomGraphOptions {
  // Total nodes, placeholders and the output node included (at least 2).
  int64_t nodes = 100;
  uint64_t seed = 1;
  // Parameters as placeholders with meta.param (AOT style) instead of module-owned; about one
  // in twelve also gets an absent row (a whole-model table lists it, no node reads it).
  bool lifted = false;
  // shape, dtype, tensor_size and device_time on every node (else on about half).
  bool full_meta = true;
};

// Generates a graph of exactly options.nodes nodes from a seed. O(nodes).
Graph RandomGraph(const RandomGraphOptions& options);

// Decodes fuzz bytes into a graph of at most `max_nodes` nodes (>= 2): the first byte picks
// the style, the rest drive the same generator until they run out. O(size of data).
Graph GraphFromBytes(absl::Span<const uint8_t> data, int64_t max_nodes);

// The generator core: at most `max_nodes` nodes, stopping early if `choices` runs out.
Graph GenerateGraph(ChoiceSource& choices, int64_t max_nodes, bool lifted, bool full_meta);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_RANDOM_GRAPH_H_
