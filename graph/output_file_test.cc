#include "graph/output_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
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

// As root, `--save /dev/null` once replaced the machine's /dev/null with a regular file.
TEST(OutputFileTest, ACharacterDeviceIsWrittenInPlaceNeverReplaced) {
  struct stat before {};
  ASSERT_EQ(stat("/dev/null", &before), 0);
  ASSERT_TRUE(S_ISCHR(before.st_mode));
  EXPECT_TRUE(WriteFileAtomically("/dev/null", "swallowed").ok());
  struct stat after {};
  ASSERT_EQ(stat("/dev/null", &after), 0);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_EQ(CountFiles("/dev", "null.tmp"), 0);
}

TEST(OutputFileTest, DevFullFailsWithNoSpaceAndStaysADevice) {
  struct stat st {};
  if (stat("/dev/full", &st) != 0) GTEST_SKIP() << "no /dev/full here";
  absl::Status s = WriteFileAtomically("/dev/full", std::string(1 << 16, 'x'));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("No space left on device"));
  ASSERT_EQ(stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

// Another user's link planted at an output path must not make a write land on its target:
// the link is replaced (rename replaces the name, not what it points at), whatever the link
// leads to: a file, nothing, or itself.
TEST(OutputFileTest, ASymlinkIsReplacedNeverWrittenThrough) {
  const std::string dir = testing::TempDir() + "/links";
  mkdir(dir.c_str(), 0755);
  const std::string victim = dir + "/victim.json";
  std::ofstream(victim) << "victim";
  ASSERT_EQ(chmod(victim.c_str(), 0600), 0);
  struct stat st {};
  for (const std::string& to : {std::string("victim.json"), victim}) {  // relative, absolute
    const std::string link = dir + "/link.json";
    unlink(link.c_str());
    ASSERT_EQ(symlink(to.c_str(), link.c_str()), 0);
    ASSERT_TRUE(CheckOutputPath(link).ok());
    ASSERT_TRUE(WriteFileAtomically(link, "new").ok());
    ASSERT_EQ(lstat(link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << to;
    EXPECT_EQ(Slurp(link), "new");
    EXPECT_EQ(Slurp(victim), "victim") << to;
    ASSERT_EQ(stat(victim.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
  }
  // A dangling link: replaced; its target is not created.
  const std::string dangling = dir + "/dangling.json";
  unlink(dangling.c_str());
  unlink((dir + "/made.json").c_str());
  ASSERT_EQ(symlink("made.json", dangling.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(dangling, "made").ok());
  ASSERT_EQ(lstat(dangling.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_NE(access((dir + "/made.json").c_str(), F_OK), 0);
  // A loop: replaced, not an error and not a hang.
  const std::string loop = dir + "/loop.json";
  unlink(loop.c_str());
  ASSERT_EQ(symlink("loop.json", loop.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(loop, "x").ok());
  EXPECT_EQ(Slurp(loop), "x");
  EXPECT_EQ(CountFiles(dir, "link.json.tmp") + CountFiles(dir, "dangling.json.tmp") +
                CountFiles(dir, "loop.json.tmp"),
            0);
}

// A link to a character device (as /dev/stdout is) is followed by the kernel and the
// device written in place: the link stays, the device stays a device.
TEST(OutputFileTest, ALinkToACharacterDeviceIsWrittenInPlace) {
  const std::string link = testing::TempDir() + "/to_null";
  unlink(link.c_str());
  ASSERT_EQ(symlink("/dev/null", link.c_str()), 0);
  ASSERT_TRUE(CheckOutputPath(link).ok());
  ASSERT_TRUE(WriteFileAtomically(link, "swallowed").ok());
  struct stat st {};
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(OutputFileTest, AnExistingFileKeepsItsMode) {
  const std::string path = testing::TempDir() + "/mode.json";
  std::ofstream(path) << "old";
  ASSERT_EQ(chmod(path.c_str(), 0640), 0);
  ASSERT_TRUE(WriteFileAtomically(path, "new").ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(Slurp(path), "new");
}

TEST(OutputFileTest, AFifoIsWrittenInPlaceAndWithoutAReaderIsAnError) {
  const std::string fifo = testing::TempDir() + "/out.fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::Status no_reader = WriteFileAtomically(fifo, "x");  // would block forever otherwise
  EXPECT_THAT(std::string(no_reader.message()), HasSubstr("a FIFO without a reader"));
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(WriteFileAtomically(fifo, "through").ok());
  char buf[16] = {0};
  EXPECT_EQ(read(reader, buf, sizeof(buf)), 7);
  EXPECT_EQ(std::string(buf), "through");
  close(reader);
  struct stat st {};
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(OutputFileTest, ASocketIsRefusedByType) {
  const std::string path = testing::TempDir() + "/out.sock";
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) GTEST_SKIP() << "temp path too long for a socket";
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  absl::Status s = WriteFileAtomically(path, "x");
  close(fd);
  EXPECT_THAT(std::string(s.message()), HasSubstr("it is a socket"));
  EXPECT_TRUE(CheckOutputPath(path).ok() == false);
  unlink(path.c_str());
}

TEST(OutputFileTest, CheckOutputPathRefusesWhatOpenWouldAndWritesNothing) {
  const std::string dir = testing::TempDir() + "/check";
  mkdir(dir.c_str(), 0755);
  EXPECT_TRUE(CheckOutputPath(dir + "/fresh.bin").ok());
  EXPECT_EQ(CountFiles(dir, "fresh.bin"), 0);
  EXPECT_TRUE(CheckOutputPath("/dev/null").ok());
  EXPECT_EQ(CheckOutputPath(dir).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckOutputPath("/nonexistent-folder/x").code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(CheckOutputPath("").ok());
}

// SIGTERM while a write is open: the temporary is removed and the process still dies of
// the signal (checked in a child, which the signal ends).
TEST(OutputFileTest, ASignalDuringAWriteRemovesTheTemporary) {
  const std::string dir = testing::TempDir() + "/signalled";
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/out.json";
  std::ofstream(path) << "old";
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction now {};
    sigaction(sig, nullptr, &now);
    // An ignored signal ends nothing (a test runner may ignore SIGHUP): nothing to check.
    if ((now.sa_flags & SA_SIGINFO) == 0 && now.sa_handler == SIG_IGN) continue;
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      absl::StatusOr<OutputFile> out = OutputFile::Open(path);
      if (!out.ok()) _exit(2);
      std::fputs("half", out->stream());
      std::fflush(out->stream());
      (void)write(ready[1], "r", 1);
      while (true) pause();
    }
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    EXPECT_EQ(CountFiles(dir, "out.json.tmp"), 1);
    kill(child, sig);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status)) << status;
    if (WIFSIGNALED(status)) EXPECT_EQ(WTERMSIG(status), sig);
    EXPECT_EQ(CountFiles(dir, "out.json.tmp"), 0) << "signal " << sig;
    EXPECT_EQ(Slurp(path), "old");
    close(ready[0]);
    close(ready[1]);
  }
}

}  // namespace
}  // namespace overlap
