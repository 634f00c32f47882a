// Fuzz target: the DDP partitioner on structure-aware random graphs.
// The first 4 bytes pick the caps (bucket cap up to 16 MiB, first cap a fraction of it);
// the rest decode into a graph (GraphFromBytes). Both modes run, and every invariant of
// partition/invariants.h is checked; reference mode is also compared with the slow,
// obviously-correct version of partition/testing/ (differential). Any violation aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/random_graph.h"
#include "partition/ddp_partitioner.h"
#include "partition/invariants.h"
#include "partition/testing/slow_reference.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  uint32_t knobs = 0;
  for (size_t i = 0; i < 4 && i < size; ++i) knobs = knobs << 8 | data[i];
  const size_t skip = size < 4 ? size : 4;
  const Graph g = GraphFromBytes(absl::MakeConstSpan(data + skip, size - skip), 256);
  for (PartitionMode mode :
       {PartitionMode::kReference, PartitionMode::kDefault, PartitionMode::kReference2x}) {
    PartitionOptions o;
    o.buckets.mode = mode;
    o.buckets.bucket_cap_bytes = static_cast<int64_t>(knobs & 0xffffff);
    o.buckets.first_bucket_cap_bytes = o.buckets.bucket_cap_bytes * ((knobs >> 24) % 9) / 8;
    absl::StatusOr<PartitionResult> r = DdpPartitioner(o).Run(g);
    if (!r.ok()) {
      std::fprintf(stderr, "partition failed: %s\n", std::string(r.status().message()).c_str());
      std::abort();
    }
    absl::Status s = CheckPartitionInvariants(g, *r);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      std::abort();
    }
    if (mode == PartitionMode::kReference) {
      s = slow::CompareReferenceMode(g, *r);
      if (!s.ok()) {
        std::fprintf(stderr, "differs from the slow reference: %s\n",
                     std::string(s.message()).c_str());
        std::abort();
      }
    }
  }
  return 0;
}
