// overlap partition: DDP buckets and the split into subgraphs.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/json_reader.h"
#include "graph/json_writer.h"
#include "graph/status_macros.h"
#include "partition/bucket_cap.h"
#include "partition/ddp_partitioner.h"
#include "partition/dot.h"
#include "partition/report.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"mode", 0, "reference|reference-2x|default",
     "reference: PyTorch 2.0's DDPOptimizer exactly; reference-2x: PyTorch\n"
     "2.x's (graphs torch.compile captures: parameters as inputs);\n"
     "default: improved (no subgraph without outputs, tied storage once, ...)"},
    {"bucket-cap", 0, "SIZE|auto",
     "bucket cap (default 25MiB); auto: choose the cap that minimises\n"
     "the predicted backward plus the allreduce time exposed after it,\n"
     "and print the candidates"},
    {"first-bucket-cap", 0, "SIZE",
     "cap of the bucket nearest the output (default min(1MiB, cap));\n"
     "must not exceed --bucket-cap"},
    {"json", 0, "OUT", "write the partition result (overlap-result JSON)", true},
    {"output", 'o', "OUTER", "write the outer graph (calls submod_0, submod_1, ...)", true},
    {"subgraphs-dir", 0, "DIR", "write each subgraph as DIR/submod_<i>.json"},
    {"dot", 0, "OUT",
     "write the partition as Graphviz DOT, one cluster per subgraph (graphs\n"
     "of at most 2000 nodes; render with `dot -Tsvg OUT -o picture.svg`)",
     true},
};

// Reads the bucketing flags into `bo`; whether the cap is chosen automatically.
bool ReadBucketFlags(Invocation& in, BucketOptions* bo, std::optional<int64_t>* first) {
  if (std::optional<std::string> mode = in.String("mode");
      mode && !ParsePartitionMode(*mode, &bo->mode)) {
    in.AddUsageError(
        absl::StrCat("--mode must be reference, reference-2x or default, got \"", *mode, "\""));
  }
  const bool auto_cap = in.String("bucket-cap") == "auto";
  if (!auto_cap) {
    if (std::optional<int64_t> cap = in.Size("bucket-cap")) bo->bucket_cap_bytes = *cap;
  }
  *first = in.Size("first-bucket-cap");
  if (*first && !auto_cap && **first > bo->bucket_cap_bytes) {
    in.AddUsageError(absl::StrCat("--first-bucket-cap (", **first, " bytes) exceeds --bucket-cap (",
                                  bo->bucket_cap_bytes, " bytes)"));
  }
  return auto_cap;
}

absl::Status WriteSubgraphs(const std::string& dir, const PartitionResult& r) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::NotFoundError(absl::StrCat("cannot create \"", dir, "\": ", std::strerror(errno)));
  }
  for (const Submodule& sm : r.pieces.submodules) {
    OVERLAP_RETURN_IF_ERROR(WriteGraphJsonFile(sm.graph, absl::StrCat(dir, "/", sm.name, ".json")));
  }
  return absl::OkStatus();
}

// Verify on every graph the split made (the outer graph and each subgraph).
absl::Status CheckPieces(const PartitionResult& r) {
  if (!r.split) return absl::OkStatus();
  OVERLAP_RETURN_IF_ERROR(CheckAfter(r.pieces.outer, "the split (outer graph)"));
  for (const Submodule& sm : r.pieces.submodules) {
    OVERLAP_RETURN_IF_ERROR(CheckAfter(sm.graph, absl::StrCat("the split (", sm.name, ")")));
  }
  return absl::OkStatus();
}

int Run(Invocation& in) {
  BucketOptions bo;
  std::optional<int64_t> first;
  const bool auto_cap = ReadBucketFlags(in, &bo, &first);
  const CollectiveModel comm = ReadCollectiveFlags(in);
  if (in.has_usage_error()) return in.UsageError();
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  std::optional<CapChoice> choice;
  if (auto_cap) {
    NoteMissingDeviceTimes(in, *g);  // the cap's model overlaps the allreduces with them
    absl::StatusOr<CapChoice> c =
        ChooseBucketCap(*g, bo.mode, comm, first.value_or(kDefaultFirstBucketCapBytes));
    if (!c.ok()) return in.BadInput(c.status());
    choice = std::move(*c);
    bo.bucket_cap_bytes = choice->cap_bytes;
    std::fputs(FormatCapChoice(*choice).c_str(), in.summary());
  }
  bo.first_bucket_cap_bytes =
      std::min(first.value_or(kDefaultFirstBucketCapBytes), bo.bucket_cap_bytes);
  PartitionOptions po;
  po.buckets = bo;
  absl::StatusOr<PartitionResult> r = DdpPartitioner(po).Run(*g);
  if (!r.ok()) return in.BadInput(r.status());
  if (absl::Status s = CheckPieces(*r); !s.ok()) return in.BadInput(s);
  std::fputs(FormatBucketTable(*g, *r).c_str(), in.summary());
  if (std::optional<std::string> path = in.Path("json")) {
    absl::Status s =
        WriteTextFile(in, *path, PartitionResultJson(*g, *r, choice ? &*choice : nullptr));
    if (!s.ok()) return in.BadInput(s);
  }
  if (std::optional<std::string> path = in.Path("output")) {
    absl::Status s = WriteGraphFile(in, *path, r->split ? r->pieces.outer : *g);
    if (!s.ok()) return in.BadInput(s);
  }
  if (std::optional<std::string> path = in.Path("dot")) {
    absl::StatusOr<std::string> dot = PartitionDot(*g, *r);
    if (!dot.ok()) return in.BadInput(dot.status());
    if (absl::Status s = WriteTextFile(in, *path, *dot); !s.ok()) return in.BadInput(s);
  }
  if (std::optional<std::string> dir = in.Path("subgraphs-dir")) {
    if (absl::Status s = WriteSubgraphs(*dir, *r); !s.ok()) return in.BadInput(s);
  }
  return kExitOk;
}

}  // namespace

const CommandSpec& PartitionCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "partition";
    s.synopsis = "FILE [options]";
    s.summary = "bucket and split a forward graph as DDP does";
    s.description =
        "Buckets the forward graph's parameters as DDP buckets gradients, prints the bucket\n"
        "table (index, size in bytes, parameter names), and splits the graph into one\n"
        "subgraph per bucket (split_module semantics). See docs/partition.md.\n";
    s.flags = {kFlags, CollectiveFlags()};
    s.footer =
        "The collective flags model the allreduce. SIZE: bytes, or with KB/MB/GB (powers of\n"
        "1000) or KiB/MiB/GiB (powers of 1024).\n";
    s.min_positional = s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
