#include "graph/output_file.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Files in `dir` whose name starts with `prefix`.
int CountFiles(const std::string& dir, const std::string& prefix) {
  int n = 0;
  DIR* d = opendir(dir.c_str());
  for (dirent* e = d ? readdir(d) : nullptr; e != nullptr; e = readdir(d)) {
    n += std::string(e->d_name).rfind(prefix, 0) == 0;
  }
  if (d) closedir(d);
  return n;
}

TEST(OutputFileTest, ReplacesTheFileOnlyAfterACompleteWrite) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/replaced.json";
  std::ofstream(path) << "old";
  absl::StatusOr<OutputFile> out = OutputFile::Open(path);
  ASSERT_TRUE(out.ok()) << out.status();
  std::fputs("new", out->stream());
  EXPECT_EQ(Slurp(path), "old");  // untouched while writing
  ASSERT_TRUE(out->Commit().ok());
  EXPECT_EQ(Slurp(path), "new");
  EXPECT_EQ(CountFiles(dir, "replaced.json.tmp"), 0);
}

TEST(OutputFileTest, AnAbandonedWriteLeavesTheFileAndNoTemporary) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/kept.json";
  std::ofstream(path) << "precious";
  {
    absl::StatusOr<OutputFile> out = OutputFile::Open(path);
    ASSERT_TRUE(out.ok());
    std::fputs("half", out->stream());
  }  // destroyed without Commit, as on an error path
  EXPECT_EQ(Slurp(path), "precious");
  EXPECT_EQ(CountFiles(dir, "kept.json.tmp"), 0);
}

TEST(OutputFileTest, AFullDiskIsAnErrorNamingTheFileAndTheCause) {
  // /dev/full accepts the open and fails every write with ENOSPC: the stdout path.
  std::FILE* full = std::fopen("/dev/full", "w");
  if (full == nullptr) GTEST_SKIP() << "no /dev/full here";
  absl::Status s = WriteFileAtomically("-", std::string(1 << 16, 'x'), full);
  std::fclose(full);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("writing to \"stdout\" failed: No space left"));
}

TEST(OutputFileTest, AnUnwritableFolderOrADirectoryTargetIsAnError) {
  absl::Status missing = WriteFileAtomically("/nonexistent-folder/x.json", "x");
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("cannot write \"/nonexistent-folder/x.json\""));
  const std::string dir = testing::TempDir() + "/a_directory";
  mkdir(dir.c_str(), 0755);
  absl::Status onto_dir = WriteFileAtomically(dir, "x");
  EXPECT_FALSE(onto_dir.ok());
  EXPECT_THAT(std::string(onto_dir.message()), HasSubstr(dir));
  EXPECT_EQ(CountFiles(testing::TempDir(), "a_directory.tmp"), 0);
}

}  // namespace
}  // namespace overlap
