// Linking //partition as a library: build a graph in code, partition it with your own
// compile hook, and use the pieces. This is what a compiler team's integration looks like;
// it does not use the CLI.
//
//   bazel run //examples:partition_example
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "graph/verifier.h"
#include "partition/ddp_partitioner.h"
#include "partition/report.h"

namespace {

// A 4-layer MLP, 2048 wide, fp32: each Linear owns 16 MiB of weights.
absl::StatusOr<overlap::Graph> BuildMlp() {
  using overlap::Op;
  using overlap::Value;
  overlap::Graph g;
  absl::StatusOr<overlap::NodeId> x = g.AddNode(Op::kPlaceholder, "x", "x");
  if (!x.ok()) return x.status();
  overlap::NodeId h = *x;
  for (int i = 0; i < 4; ++i) {
    const std::string fc = "layers." + std::to_string(i);
    absl::StatusOr<overlap::NodeId> lin =
        g.AddNode(Op::kCallModule, "layers_" + std::to_string(i), fc, {Value::Ref(h)});
    if (!lin.ok()) return lin.status();
    g.mutable_node(*lin).mutable_meta().set_device_time(100e-6);
    absl::StatusOr<overlap::NodeId> act = g.AddNode(Op::kCallFunction, "relu_" + std::to_string(i),
                                                    "aten.relu.default", {Value::Ref(*lin)});
    if (!act.ok()) return act.status();
    h = *act;
    overlap::Param w;
    w.name = fc + ".weight";
    w.owner = fc;
    w.bytes = int64_t{2048} * 2048 * 4;
    w.dtype = "float32";
    w.has_dtype = true;
    if (absl::Status s = g.AddParam(w); !s.ok()) return s;
  }
  if (absl::StatusOr<overlap::NodeId> out =
          g.AddNode(Op::kOutput, "output", "output", {Value::Ref(h)});
      !out.ok()) {
    return out.status();
  }
  if (absl::Status s = overlap::Verify(g); !s.ok()) return s;
  return g;
}

}  // namespace

int main() {
  absl::StatusOr<overlap::Graph> g = BuildMlp();
  if (!g.ok()) {
    std::fprintf(stderr, "building the graph failed: %s\n",
                 std::string(g.status().message()).c_str());
    return 1;
  }
  overlap::PartitionOptions options;
  options.buckets.mode = overlap::PartitionMode::kDefault;
  options.buckets.bucket_cap_bytes = 20 << 20;  // 20 MiB: one Linear per bucket
  // Our "backend": accepts pieces of up to 5 graph nodes, refuses larger ones (which then run
  // uncompiled, as DDPOptimizer falls back).
  int compiled = 0;
  options.compile = [&compiled](const overlap::Submodule& piece) -> absl::Status {
    if (piece.graph.size() > 5) {
      return absl::ResourceExhaustedError("piece too large for this backend");
    }
    ++compiled;
    return absl::OkStatus();
  };
  absl::StatusOr<overlap::PartitionResult> r = overlap::DdpPartitioner(options).Run(*g);
  if (!r.ok()) {
    std::fprintf(stderr, "partition failed: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::fputs(overlap::FormatBucketTable(*g, *r).c_str(), stdout);
  std::printf("compiled %d of %zu pieces; outer graph has %lld nodes\n", compiled,
              r->pieces.submodules.size(), static_cast<long long>(r->pieces.outer.size()));
  return 0;
}
