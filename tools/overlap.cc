// The `overlap` command-line tool; see tools/cli.h.
#include <string>
#include <vector>

#include "tools/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return overlap::RunCli(args, stdout, stderr);
}
