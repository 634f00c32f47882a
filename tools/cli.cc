#include "tools/cli.h"

#include <cerrno>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "graph/text.h"
#include "tools/commands.h"

namespace overlap {
namespace {

// The commands, in the order `overlap help` lists them.
const CommandSpec* const* Commands(size_t* n) {
  static const CommandSpec* const kCommands[] = {
      // clang-format off
      &GenCommand(), &InspectCommand(), &AnnotateCommand(), &PrintCommand(), &PartitionCommand(),
      &ScheduleCommand(), &PlanCommand(), &SimulateCommand(), &ExecCommand(), &TrainCommand(),
#ifndef OVERLAP_NO_GLOO  // the fuzzers' build has no Gloo (.clusterfuzzlite/build.sh)
      &RunCommand(), &WorkerCommand(), &BenchCommCommand(),
#endif
      &DemoCommand(),
      // clang-format on
  };
  *n = sizeof(kCommands) / sizeof(kCommands[0]);
  return kCommands;
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  size_t n = 0;
  const CommandSpec* const* commands = Commands(&n);
  return RunCommandLine(absl::MakeConstSpan(commands, n), args, out, err);
}

}  // namespace overlap
