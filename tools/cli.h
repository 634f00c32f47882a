// The `overlap` command-line tool, as a library so tests can run it in-process.
//
//   overlap gen <model> [options] [-o FILE]   write a built-in model's graph (stdout if no -o)
//   overlap inspect FILE                      verify a graph and print its summary
//   overlap demo [MODEL]                      the README's first command: the whole pipeline
//                                             on a built-in model (default gpt2)
//   overlap help [COMMAND]
//
// Exit codes: 0 success, 1 bad input (the message on stderr names the problem), 2 bad usage.
// Relative paths resolve against $BUILD_WORKING_DIRECTORY when set (under `bazel run`), so
// `bazel run //:overlap -- gen gpt2 -o g.json` writes where the user stands.
#ifndef OVERLAP_TOOLS_CLI_H_
#define OVERLAP_TOOLS_CLI_H_

#include <cstdio>
#include <string>
#include <vector>

namespace overlap {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 1;
inline constexpr int kExitUsage = 2;

// Runs the CLI on `args` (without the program name), writing to `out` and `err`.
int RunCli(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

}  // namespace overlap

#endif  // OVERLAP_TOOLS_CLI_H_
