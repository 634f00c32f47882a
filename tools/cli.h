// The `overlap` command-line tool, as a library so tests can run it in-process.
//
//   overlap gen <model> [options] [-o FILE]   write a built-in model's graph (stdout if no -o)
//   overlap inspect FILE                      verify a graph and print its summary
//   overlap print FILE                        the graph, one line per node (graph/print.h)
//   overlap partition FILE [options]          DDP buckets and the split into subgraphs
//   overlap schedule FILE [options]           ZeRO-3: insert, schedule, verify, simulate
//                                             (--explain: why ours chose its schedule)
//   overlap simulate FILE [options]           two-stream simulation in the file's order
//   overlap demo [MODEL]                      the README's first command: the whole pipeline
//                                             on a built-in model (default gpt2)
//   overlap help [COMMAND]
//
// Each command lives in tools/cmd_<name>.cc and is declared by one flag table
// (tools/command.h), from which its usage text and accepted flags come.
//
// Exit codes: 0 success, 1 bad input (the message on stderr names the problem), 2 bad usage.
// Relative paths resolve against $BUILD_WORKING_DIRECTORY when set (under `bazel run`), so
// `bazel run //:overlap -- gen gpt2 -o g.json` writes where the user stands.
#ifndef OVERLAP_TOOLS_CLI_H_
#define OVERLAP_TOOLS_CLI_H_

#include <cstdio>
#include <string>
#include <vector>

#include "tools/command.h"  // kExitOk, kExitBadInput, kExitUsage

namespace overlap {

// Runs the CLI on `args` (without the program name), writing to `out` and `err`.
int RunCli(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

}  // namespace overlap

#endif  // OVERLAP_TOOLS_CLI_H_
