#include "partition/ddp_partitioner.h"

#include "graph/status_macros.h"
#include "graph/verifier.h"

namespace overlap {

absl::StatusOr<PartitionResult> DdpPartitioner::Run(const Graph& g) const {
  PartitionResult r;
  r.options = options_.buckets;
  OVERLAP_ASSIGN_OR_RETURN(r.buckets, AssignBuckets(g, options_.buckets));
  if (r.buckets.size() <= 1) return r;  // nothing to overlap: the graph is not split
  OVERLAP_ASSIGN_OR_RETURN(r.pieces, Split(g, r.buckets));
  r.split = true;
  r.compiled.resize(r.pieces.submodules.size());
  if (!options_.compile) return r;
  for (int s : r.pieces.call_order) {
    CompileOutcome& out = r.compiled[s];
    out.attempted = true;
    absl::Status st = options_.compile(r.pieces.submodules[s]);
    out.compiled = st.ok();
    if (!st.ok()) out.error = std::string(st.message());
  }
  return r;
}

}  // namespace overlap
