// overlap annotate: fill a graph's missing device_time and tensor_size from the cost model.
#include "graph/annotate.h"
#include "graph/json_reader.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"output", 'o', "FILE", "write the annotated graph to FILE (required; \"-\": stdout)", true},
    {"overwrite", 0, "",
     "replace device_time / tensor_size the file already has (default:\n"
     "fill only what is missing)"},
};

int Run(Invocation& in) {
  const std::optional<std::string> out = in.Path("output");
  const DeviceSpec device = ReadDeviceFlags(in);
  if (!out.has_value()) in.AddUsageError("-o FILE is required (\"-\" for stdout)");
  if (in.has_usage_error()) return in.UsageError();
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  AnnotateOptions options;
  options.device = device;
  options.overwrite = in.Switch("overwrite");
  absl::StatusOr<AnnotateReport> r = AnnotateCosts(*g, options);
  if (!r.ok()) return in.BadInput(r.status());
  absl::Status s = CheckAfter(*g, "annotate");
  if (s.ok()) s = WriteGraphFile(in, *out, *g);
  if (!s.ok()) return in.BadInput(s);
  // The report goes where it cannot mix with a graph written to stdout.
  std::fputs(FormatAnnotateReport(*r).c_str(), *out == "-" ? in.err() : in.out());
  return kExitOk;
}

}  // namespace

const CommandSpec& AnnotateCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "annotate";
    s.synopsis = "FILE -o OUT [--overwrite] [--peak-tflops X ...]";
    s.summary = "fill missing device_time and tensor_size from the roofline cost model";
    s.description =
        "Reads a graph (\"-\": stdin), gives every call node without a device_time the\n"
        "roofline estimate max(FLOPs / peak, bytes / bandwidth) and every node with a\n"
        "stated shape but no tensor_size its size, and writes the result. FLOPs come\n"
        "from per-op formulas (docs/cost-model.md: matmuls, convolutions, attention,\n"
        "norms, softmax, elementwise, reductions, pools; call_module nodes by the class\n"
        "in meta.module); an op without one costs its bytes alone and is listed in the\n"
        "report. Graphs exported from PyTorch (tools/overlap_export) have no device times:\n"
        "annotate them before `schedule` or `simulate`, which take a missing time as 0.\n";
    s.flags = {kFlags, DeviceFlags()};
    s.min_positional = 1;
    s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
