// Rewrites docs/ops.md's operator table from the schema (graph/op_schema.h):
//   bazel run //graph:ops_doc            (the workspace's docs/ops.md)
//   bazel-bin/graph/ops_doc PATH         (another copy)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "graph/op_schema.h"
#include "graph/output_file.h"

int main(int argc, char** argv) {
  std::string path;
  if (argc > 1) {
    path = argv[1];
  } else if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY"); ws != nullptr) {
    path = std::string(ws) + "/docs/ops.md";
  } else {
    std::fprintf(stderr, "usage: ops_doc [docs/ops.md] (or bazel run //graph:ops_doc)\n");
    return 2;
  }
  if (absl::Status s = overlap::VerifyOpSchemaTable(); !s.ok()) {
    std::fprintf(stderr, "ops_doc: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "ops_doc: cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream page;
  page << in.rdbuf();
  absl::StatusOr<std::string> updated = overlap::WithOpsTable(page.str());
  if (!updated.ok()) {
    std::fprintf(stderr, "ops_doc: %s: %s\n", path.c_str(),
                 std::string(updated.status().message()).c_str());
    return 1;
  }
  if (*updated == page.str()) {
    std::printf("ops_doc: %s is current\n", path.c_str());
    return 0;
  }
  // Through the one output writer (graph/output_file.h): a failed write leaves the page.
  if (absl::Status s = overlap::WriteFileAtomically(path, *updated); !s.ok()) {
    std::fprintf(stderr, "ops_doc: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("ops_doc: rewrote %s\n", path.c_str());
  return 0;
}
