// A program in a workspace of its own that links overlap's public targets (see WORKSPACE and
// BUILD.bazel beside it): reads a graph file, partitions it into DDP buckets, then inserts
// the ZeRO-3 collectives and orders them with a scheduler of overlap's registry.
//
//   plan GRAPH.json [ALGORITHM]     (ALGORITHM: a registry name; default: the registry's)
//
// Exit status: 0 ok, 1 bad input (the message names the file, node or field), 2 bad usage.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "graph/graph.h"
#include "graph/json_reader.h"
#include "graph/size.h"
#include "graph/status_macros.h"
#include "graph/summary.h"
#include "graph/verifier.h"
#include "partition/ddp_partitioner.h"
#include "schedule/report.h"
#include "schedule/scheduler_registry.h"
#include "schedule/zero3_insertion.h"

namespace {

absl::Status Plan(const std::string& path, const std::string& algorithm) {
  OVERLAP_ASSIGN_OR_RETURN(overlap::Graph g, overlap::ReadGraphJsonFile(path));
  OVERLAP_RETURN_IF_ERROR(overlap::Verify(g));
  const overlap::GraphSummary s = overlap::Summarize(g);
  absl::PrintF("graph: %d nodes, %d parameters (%s)\n", s.nodes, s.param_entries,
               overlap::FormatBytes(s.param_bytes));

  // DDP: PyTorch's DDPOptimizer bucketing, improved (the default mode), 25 MiB buckets.
  OVERLAP_ASSIGN_OR_RETURN(overlap::PartitionResult p,
                           overlap::DdpPartitioner(overlap::PartitionOptions{}).Run(g));
  absl::PrintF("DDP: %d buckets, %d compiled pieces\n", p.buckets.size(),
               p.split ? p.pieces.submodules.size() : 1);

  // ZeRO-3 on the same graph (its parameters must be lifted to placeholders): insert the
  // allgathers, releases and their waits, then let the scheduler order them. RunScheduler leaves
  // the graph final, verified, and simulated on two streams.
  const int before = static_cast<int>(g.size());
  OVERLAP_RETURN_IF_ERROR(overlap::Zero3Insertion(overlap::GraphKind::kForward).Run(&g).status());
  absl::PrintF("ZeRO-3: %d ops inserted\n", static_cast<int>(g.size()) - before);
  OVERLAP_ASSIGN_OR_RETURN(overlap::ScheduleReport r, overlap::RunScheduler(algorithm, &g));
  absl::PrintF("schedule (%s): step %s, exposed communication %s, peak memory %s\n", r.algorithm,
               overlap::FormatSeconds(r.simulation.step_time_s),
               overlap::FormatSeconds(r.simulation.exposed_comm_s),
               overlap::FormatBytes(r.simulation.peak_memory_bytes));
  std::fputs(overlap::FormatScheduleSummary(g, r).c_str(), stdout);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: plan GRAPH.json [ALGORITHM]\n");
    return 2;
  }
  const std::string algorithm = argc == 3 ? argv[2] : std::string(overlap::DefaultSchedulerName());
  if (absl::Status s = Plan(argv[1], algorithm); !s.ok()) {
    std::fprintf(stderr, "plan: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
