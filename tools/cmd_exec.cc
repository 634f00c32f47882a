// overlap exec: run a graph. Today: timed replay (no kernels yet; runtime/replay.h), which
// runs any graph and measures its memory against the simulator's.
#include "absl/strings/str_cat.h"
#include "graph/json_reader.h"
#include "graph/size.h"
#include "runtime/replay.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"replay", 0, "",
     "run without kernels: each compute node waits its device_time\n"
     "(times --time-scale), buffers of each tensor_size are allocated\n"
     "and freed by the executor's rules (required: kernels come next)"},
    {"time-scale", 0, "X", "with --replay: wait device_time * X per node (default 0)"},
    {"count-only", 0, "", "with --replay: count the buffers instead of allocating them"},
    {"memory-limit", 0, "SIZE",
     "with --replay: the most the buffers may take (default: the memory\n"
     "available now); a graph that needs more is refused up front"},
};

int Run(Invocation& in) {
  const bool replay = in.Switch("replay");
  if (!replay) {
    in.AddUsageError(
        "running kernels is not built yet (the CPU kernel library comes next): use --replay");
  }
  ReplayOptions o;
  if (in.Has("time-scale")) o.time_scale = in.NonNegative("time-scale", 1e6, 0);
  o.count_only = in.Switch("count-only");
  if (std::optional<int64_t> limit = in.Size("memory-limit")) o.memory_limit_bytes = *limit;
  if (in.has_usage_error()) return in.UsageError();
  absl::StatusOr<Graph> g = ReadGraphJsonFile(ResolvePath(in.positional()[0]));
  if (!g.ok()) return in.BadInput(g.status());
  absl::StatusOr<ReplayResult> r = Replay(*g, o);
  if (!r.ok()) return in.BadInput(r.status());
  std::fprintf(in.summary(),
               "replayed %lld nodes in %s (%s); measured peak %s, simulated peak %s (world "
               "size 1): %s; %s live at the end\n",
               static_cast<long long>(r->nodes_run), FormatSeconds(r->wall_s).c_str(),
               o.count_only ? "buffers counted" : "buffers allocated",
               FormatBytes(r->peak_bytes).c_str(), FormatBytes(r->simulated_peak_bytes).c_str(),
               r->peak_bytes == r->simulated_peak_bytes ? "equal" : "DIFFERENT",
               FormatBytes(r->final_bytes).c_str());
  return kExitOk;
}

}  // namespace

const CommandSpec& ExecCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "exec";
    s.synopsis = "FILE --replay [options]";
    s.summary = "run a graph (today: timed replay, measured memory vs the simulator's)";
    s.description =
        "Runs a graph in its file order. With --replay, without kernels: each compute node\n"
        "waits its device_time and buffers of each value's tensor_size are allocated and\n"
        "freed by the executor's rules (docs/runtime.md), so any graph runs; prints the\n"
        "measured peak beside the simulator's at world size 1 (they are equal when every\n"
        "compute node has a device time). A graph whose buffers exceed the available\n"
        "memory is refused up front (--count-only counts them instead).\n";
    s.flags = {kFlags};
    s.footer = "SIZE: bytes, or with KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024).\n";
    s.min_positional = s.max_positional = 1;
    s.positional_name = "file";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
