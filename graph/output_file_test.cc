#include "graph/output_file.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
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

// A full disk while writing a file (`overlap schedule g.json -o g.json` once truncated g.json):
// simulated with a file-size limit, under which a write past the limit fails (EFBIG). The
// target keeps what it held and no temporary is left.
TEST(OutputFileTest, AFailedFileWriteLeavesTheTargetIntact) {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/full_disk.json";
  std::ofstream(path) << "the graph being read";
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  void (*previous)(int) = std::signal(SIGXFSZ, SIG_IGN);  // fail the write, do not kill us
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status s = WriteFileAtomically(path, std::string(1 << 20, 'x'));
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("writing \"" + path + "\" failed: "));
  EXPECT_EQ(Slurp(path), "the graph being read");
  EXPECT_EQ(CountFiles(dir, "full_disk.json.tmp"), 0);
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
