// Writing output files so that a failure never destroys what was there, and so that an
// output never replaces what is not a regular file. Every output the CLI writes (-o,
// --json, --trace, --svg, --dot, --save) goes through here. By what `path` is now:
//   - nothing, or a regular file: the content goes to a temporary file in the same folder,
//     which replaces `path` (rename) only after a complete, flushed, synced and closed
//     write; an existing file's mode and owner carry over to the new one (the owner only
//     where the process may set it: as root, or when it already owns the file);
//   - a symbolic link: the link's final target is written as above (a target that does not
//     exist yet is created), so the link stays a link;
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

class OutputFile {
 public:
  // Opens the output as the header says (or `stdout_stream` for "-"). NotFound when the
  // folder cannot be written to; InvalidArgument naming the type of a target that cannot
  // be written (a folder, a block device, a socket, a FIFO without a reader, a symlink
  // loop). O(1) system calls (O(links) for a chain of symlinks).
  static absl::StatusOr<OutputFile> Open(const std::string& path,
                                         std::FILE* stdout_stream = stdout);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) = delete;
  OutputFile(const OutputFile&) = delete;
  // Abandons an uncommitted write: closes and removes the temporary file.
  ~OutputFile();

  // Where to write.
  std::FILE* stream() const { return stream_; }
  // The file that Commit writes: `path` itself, or a symlink's final target.
  const std::string& target() const { return path_; }
  // Flushes, syncs and closes the temporary file and renames it over the target (a device
  // or FIFO, or stdout: flushes, closes and checks for errors). Internal error naming the
  // file and errno's text on any failure, after which a replaced target is unchanged.
  // Call once.
  absl::Status Commit();

 private:
  OutputFile(std::string path, std::string temp, std::FILE* stream, bool in_place)
      : path_(std::move(path)), temp_(std::move(temp)), stream_(stream), in_place_(in_place) {}
  std::string path_;
  std::string temp_;  // empty for stdout and for targets written in place
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
// Creates and removes one temporary file beside the target.
absl::Status CheckOutputPath(const std::string& path);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_OUTPUT_FILE_H_
