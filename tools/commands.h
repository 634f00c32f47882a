// The CLI's commands, one file each (tools/cmd_<name>.cc); tools/cli.cc dispatches to them.
#ifndef OVERLAP_TOOLS_COMMANDS_H_
#define OVERLAP_TOOLS_COMMANDS_H_

#include "tools/command.h"

namespace overlap {

// Each command's spec, built once on first use (static storage).
const CommandSpec& GenCommand();
const CommandSpec& InspectCommand();
const CommandSpec& AnnotateCommand();
const CommandSpec& PrintCommand();
const CommandSpec& PartitionCommand();
const CommandSpec& ScheduleCommand();
const CommandSpec& PlanCommand();
const CommandSpec& SimulateCommand();
const CommandSpec& ExecCommand();
const CommandSpec& TrainCommand();
const CommandSpec& RunCommand();
const CommandSpec& WorkerCommand();
const CommandSpec& BenchCommCommand();
const CommandSpec& DemoCommand();

}  // namespace overlap

#endif  // OVERLAP_TOOLS_COMMANDS_H_
