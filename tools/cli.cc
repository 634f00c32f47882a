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

const CommandSpec* FindCommand(const std::string& name) {
  size_t n = 0;
  const CommandSpec* const* commands = Commands(&n);
  for (size_t i = 0; i < n; ++i) {
    if (commands[i]->name == name) return commands[i];
  }
  return nullptr;
}

std::string MainUsage() {
  std::string out =
      "overlap: compile distributed-training dataflow graphs.\n\n"
      "usage: overlap <command> [options]\n\ncommands:\n";
  size_t n = 0;
  const CommandSpec* const* commands = Commands(&n);
  for (size_t i = 0; i < n; ++i) {
    std::string left = absl::StrCat("  ", commands[i]->name, " ", commands[i]->synopsis);
    if (left.size() < 36) left.resize(36, ' ');
    absl::StrAppend(&out, left, " ", commands[i]->summary, "\n");
  }
  absl::StrAppend(&out,
                  "  help [COMMAND]                     show help for a command\n\n"
                  "models: ",
                  kModelList, "\nexit codes: 0 ok, 1 bad input, 2 bad usage\n");
  return out;
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  if (args.empty()) {
    std::fputs(MainUsage().c_str(), err);
    return kExitUsage;
  }
  const std::string& name = args[0];
  if (name == "help" || name == "--help" || name == "-h") {
    if (args.size() == 1) {
      std::fputs(MainUsage().c_str(), out);
      return kExitOk;
    }
    const CommandSpec* spec = FindCommand(args[1]);
    if (spec == nullptr) {
      std::fprintf(err, "overlap: no help for unknown command \"%s\"\n\n%s",
                   Printable(args[1]).c_str(), MainUsage().c_str());
      return kExitUsage;
    }
    std::fputs(UsageText(*spec).c_str(), out);
    return kExitOk;
  }
  const CommandSpec* spec = FindCommand(name);
  if (spec == nullptr) {
    std::fprintf(err, "overlap: unknown command \"%s\"\n\n%s", Printable(name).c_str(),
                 MainUsage().c_str());
    return kExitUsage;
  }
  Invocation in(*spec, out, err);
  if (!in.Parse(args, 1)) return in.UsageError();
  if (in.help()) {
    std::fputs(UsageText(*spec).c_str(), out);
    return kExitOk;
  }
  int code = kExitOk;
  try {
    code = spec->run(in);
  } catch (const std::bad_alloc&) {
    // The last resort: inputs are bounded (docs/limits.md), but a machine can still run out.
    std::fprintf(err, "overlap: error: out of memory while running `overlap %s`\n",
                 std::string(spec->name).c_str());
    return kExitBadInput;
  }
  // Summaries go to `out` unchecked as they are printed; a failed write (a full disk, a
  // closed pipe) must not pass for success.
  if (std::fflush(out) != 0 || std::ferror(out)) {
    std::fprintf(err, "overlap: error: writing to stdout failed: %s\n",
                 std::strerror(errno != 0 ? errno : EIO));
    return code == kExitOk ? kExitBadInput : code;
  }
  return code;
}

}  // namespace overlap
