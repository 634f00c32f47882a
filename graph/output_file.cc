#include "graph/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

absl::Status Failure(absl::string_view what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(what, " \"", path, "\" failed: ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<OutputFile> OutputFile::Open(const std::string& path, std::FILE* stdout_stream) {
  if (path == "-") return OutputFile(path, "", stdout_stream);
  static std::atomic<int> counter{0};
  // A name no other writer uses: the pid and a per-process counter; O_EXCL makes sure.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string temp =
        absl::StrCat(path, ".tmp-", getpid(), "-", counter.fetch_add(1, std::memory_order_relaxed));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return absl::NotFoundError(
          absl::StrCat("cannot write \"", path, "\": ", std::strerror(errno)));
    }
    std::FILE* f = fdopen(fd, "wb");
    if (f == nullptr) {
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      return Failure("opening", path, err);
    }
    return OutputFile(path, temp, f);
  }
  return absl::InternalError(
      absl::StrCat("cannot find a free temporary name beside \"", path, "\""));
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      stream_(other.stream_),
      done_(other.done_) {
  other.done_ = true;  // the moved-from object owns nothing
}

OutputFile::~OutputFile() {
  if (done_ || temp_.empty()) return;
  std::fclose(stream_);
  ::unlink(temp_.c_str());
}

absl::Status OutputFile::Commit() {
  if (done_) return absl::InternalError("OutputFile committed twice");
  done_ = true;
  if (temp_.empty()) {
    if (std::fflush(stream_) != 0 || std::ferror(stream_)) {
      return Failure("writing to", "stdout", errno != 0 ? errno : EIO);
    }
    return absl::OkStatus();
  }
  int err = 0;
  if (std::fflush(stream_) != 0 || std::ferror(stream_)) err = errno != 0 ? errno : EIO;
  if (err == 0 && ::fsync(fileno(stream_)) != 0) err = errno;
  if (std::fclose(stream_) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(temp_.c_str());
    return Failure("writing", path_, err);
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    err = errno;
    ::unlink(temp_.c_str());
    return Failure("replacing", path_, err);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view text,
                                 std::FILE* stdout_stream) {
  absl::StatusOr<OutputFile> out = OutputFile::Open(path, stdout_stream);
  if (!out.ok()) return out.status();
  // A short write sets the stream's error, which Commit reports with its cause.
  (void)std::fwrite(text.data(), 1, text.size(), out->stream());
  return out->Commit();
}

}  // namespace overlap
