// Writing output files so that a failure never destroys what was there: the content goes to
// a temporary file in the same folder, which replaces `path` (rename) only after a complete,
// flushed and closed write. A failed or abandoned write leaves `path` as it was and removes
// the temporary file. Every error names the file and the system's reason.
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
  // Opens a temporary file beside `path` (or `stdout_stream` for "-"). NotFound when the
  // folder cannot be written to.
  static absl::StatusOr<OutputFile> Open(const std::string& path,
                                         std::FILE* stdout_stream = stdout);
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) = delete;
  OutputFile(const OutputFile&) = delete;
  // Abandons an uncommitted write: closes and removes the temporary file.
  ~OutputFile();

  // Where to write.
  std::FILE* stream() const { return stream_; }
  // Flushes, syncs and closes the temporary file and renames it over the path (stdout:
  // flushes and checks for errors). Internal error naming the file and errno's text on any
  // failure, after which the path is unchanged. Call once.
  absl::Status Commit();

 private:
  OutputFile(std::string path, std::string temp, std::FILE* stream)
      : path_(std::move(path)), temp_(std::move(temp)), stream_(stream) {}
  std::string path_;
  std::string temp_;  // empty for stdout
  std::FILE* stream_;
  bool done_ = false;
};

// Writes `text` to `path` through an OutputFile.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view text,
                                 std::FILE* stdout_stream = stdout);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_OUTPUT_FILE_H_
