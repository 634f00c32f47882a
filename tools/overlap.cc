// The `overlap` command-line tool (tools/cli.h), as users start it: the commands that read,
// transform and simulate graphs run here; those that run kernels or communicate are handed
// to overlap_compute (tools/compute_hand_off.h), so that this binary loads no kernel or
// communication library.
#include <string>
#include <vector>

#include "tools/command.h"
#include "tools/commands.h"
#include "tools/compute_hand_off.h"

int main(int argc, char** argv) {
  using overlap::CommandSpec;
  std::vector<const CommandSpec*> commands = {
      &overlap::GenCommand(),   &overlap::InspectCommand(),   &overlap::AnnotateCommand(),
      &overlap::PrintCommand(), &overlap::PartitionCommand(), &overlap::ScheduleCommand(),
      &overlap::PlanCommand(),  &overlap::SimulateCommand(),
  };
  for (const CommandSpec* c : overlap::ComputeCommandStubs()) commands.push_back(c);
  std::vector<std::string> args(argv + 1, argv + argc);
  return overlap::RunCommandLine(commands, args, stdout, stderr);
}
