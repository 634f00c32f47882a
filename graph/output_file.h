// Writing output files so that a failure never destroys what was there, and so that an
// output never replaces what is not a regular file. Every output the CLI writes (-o,
// --json, --trace and its per-rank parts, --svg, --dot, --subgraphs-dir, --save) goes
// through here. The output's folder is opened once (the kernel resolves that path, with
// its rules for symbolic links: fs.protected_symlinks); the output's own name is then
// looked at without following it:
//   - nothing, or a regular file: the content goes to a temporary file created in that
//     folder (O_CREAT | O_EXCL | O_NOFOLLOW), which replaces the name (rename) only after a
//     complete, flushed, synced and closed write; an existing file's mode and owner carry
//     over to the new one (the owner only where the process may set it: as root, or when it
//     already owns the file);
//   - a symbolic link: replaced as above, never written through: the link gives way to the
//     new file and whatever it pointed at is unchanged (in a sticky folder such as /tmp,
//     another user's link cannot be replaced, and the write fails naming the path). The
//     one exception is a link the kernel lets this process follow to a character device
//     or a FIFO (/dev/stdout), which is written in place as below;
//   - a character device or a FIFO: written in place, never replaced (/dev/null swallows,
//     /dev/full fails at Commit with "No space left on device"); a FIFO without a reader is
//     an error, not a wait;
//   - a folder, a block device or a socket: refused, naming the path and its type.
// A failed or abandoned write leaves `path` as it was and removes the temporary file, and
// so does SIGINT, SIGTERM or SIGHUP during the write (a handler, installed at the first
// Open for each of those signals that is not ignored, removes every live temporary and
// then does what the signal did before: ends the process, or calls the handler the
// program had installed). Every error names the file and the system's reason.
//
//   OVERLAP_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Open(path));
//   std::fputs(text, out.stream());
//   OVERLAP_RETURN_IF_ERROR(out.Commit());
//
// "-" means standard output: written in place, flushed and checked at Commit.
#ifndef OVERLAP_GRAPH_OUTPUT_FILE_H_
#define OVERLAP_GRAPH_OUTPUT_FILE_H_

#include <cstdio>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

class OutputFile {
 public:
  // Opens the output as the header says (or `stdout_stream` for "-"). NotFound when the
  // folder cannot be opened or written to; InvalidArgument naming the type of a target
  // that cannot be written (a folder, a block device, a socket, a FIFO without a reader).
  // O(1) system calls.
  static absl::StatusOr<OutputFile> Open(const std::string& path,
                                         std::FILE* stdout_stream = stdout);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) = delete;
  OutputFile(const OutputFile&) = delete;
  // Abandons an uncommitted write: closes and removes the temporary file.
  ~OutputFile();

  // Where to write.
  std::FILE* stream() const { return stream_; }
  // Flushes, syncs and closes the temporary file and renames it over the output's name (a
  // device or FIFO, or stdout: flushes, closes and checks for errors). Internal error
  // naming the file and errno's text on any failure, after which a replaced target is
  // unchanged. Call once.
  absl::Status Commit();

 private:
  OutputFile(std::string path, std::FILE* stream, bool in_place)
      : path_(std::move(path)), stream_(stream), in_place_(in_place) {}
  // Closes the folder, after the signal handler's record of the temporary is dropped.
  void Release();
  std::string path_;  // as given, for messages
  int dir_fd_ = -1;   // the output's folder, while a temporary lives in it
  std::string name_;  // the output's name in that folder
  std::string temp_;  // the temporary's name in that folder; empty for stdout and in place
  std::FILE* stream_;
  bool in_place_ = false;  // a device or FIFO: stream_ is ours to close
  bool done_ = false;
  int slot_ = -1;  // the signal handler's record of temp_
};

// Writes `text` to `path` through an OutputFile.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view text,
                                 std::FILE* stdout_stream = stdout);

// Whether `path` can be written as an output, checked without writing it: a usage error
// (InvalidArgument) for what Open would refuse, NotFound when its folder cannot be written
// to. For checking an output that a long run writes at its end before the run starts.
// Creates and removes one temporary file beside the target. What only the final rename
// can tell (another user's link in a sticky folder) still fails at Commit.
absl::Status CheckOutputPath(const std::string& path);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_OUTPUT_FILE_H_
