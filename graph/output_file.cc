#include "graph/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

absl::Status Failure(absl::string_view what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(what, " \"", path, "\" failed: ", std::strerror(err)));
}

// The live temporary files, for the signal handler: a fixed table (no allocation, no lock
// in the handler). A slot is 0 free, 1 being filled, 2 live. A write whose temporary does
// not fit a slot still works; only a signal during it leaves the temporary behind.
constexpr int kSlots = 64;
constexpr size_t kSlotPath = 4096;
struct TempSlot {
  std::atomic<int> state{0};
  char path[kSlotPath];
};
TempSlot g_temps[kSlots];

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

void RemoveTempsOnSignal(int sig, siginfo_t* info, void* context) {
  for (TempSlot& slot : g_temps) {
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlink(slot.path);
  }
  int k = 0;
  while (k < 2 && kCleanupSignals[k] != sig) ++k;
  const struct sigaction& before = g_previous[k];
  if ((before.sa_flags & SA_SIGINFO) != 0) {
    if (before.sa_sigaction != nullptr) before.sa_sigaction(sig, info, context);
    return;
  }
  if (before.sa_handler == SIG_IGN) return;
  if (before.sa_handler == SIG_DFL) {
    // End the process as the signal would have: it is blocked while this handler runs,
    // so the raised copy is delivered, to the default action, when the handler returns.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  before.sa_handler(sig);
}

void InstallCleanupHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int k = 0; k < 3; ++k) {
      struct sigaction now {};
      if (sigaction(kCleanupSignals[k], nullptr, &now) != 0) continue;
      if ((now.sa_flags & SA_SIGINFO) == 0 && now.sa_handler == SIG_IGN) continue;
      g_previous[k] = now;
      struct sigaction ours {};
      ours.sa_sigaction = &RemoveTempsOnSignal;
      ours.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&ours.sa_mask);
      sigaction(kCleanupSignals[k], &ours, nullptr);
    }
  });
}

int RegisterTemp(const std::string& path) {
  if (path.size() >= kSlotPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_temps[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      std::memcpy(g_temps[i].path, path.c_str(), path.size() + 1);
      g_temps[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void UnregisterTemp(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0, std::memory_order_release);
}

// `path` with every symbolic link at its end followed: the file a write should change
// (which may not exist yet). InvalidArgument after 40 links (a loop).
absl::StatusOr<std::string> FinalTarget(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string link(4096, '\0');
    const ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n < 0) return Failure("reading the link", p, errno);
    link.resize(static_cast<size_t>(n));
    const size_t slash = p.rfind('/');
    p = link.front() == '/' || slash == std::string::npos
            ? link
            : absl::StrCat(p.substr(0, slash + 1), link);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot write \"", path, "\": too many levels of symbolic links"));
}

enum class TargetKind { kReplace, kInPlace };

// An output path followed to the file it changes, and what that file is: replaced through
// a temporary (absent, or a regular file: `existing`, `st` its mode and owner), or written
// in place (a character device or FIFO).
struct Resolved {
  std::string target;
  struct stat st {};
  bool existing = false;
  TargetKind kind = TargetKind::kReplace;
};

// InvalidArgument naming the type of a target that is neither.
absl::StatusOr<Resolved> Resolve(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an output path is empty");
  Resolved r;
  absl::StatusOr<std::string> target = FinalTarget(path);
  if (!target.ok()) return target.status();
  r.target = *std::move(target);
  if (::lstat(r.target.c_str(), &r.st) != 0) return r;  // absent: the create says why not
  const auto refuse = [&](absl::string_view type) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write \"", path, "\"",
        r.target == path ? "" : absl::StrCat(" (a link to \"", r.target, "\")"), ": it is ", type,
        "; outputs replace regular files and write devices and FIFOs"));
  };
  if (S_ISREG(r.st.st_mode)) {
    r.existing = true;
    return r;
  }
  if (S_ISCHR(r.st.st_mode) || S_ISFIFO(r.st.st_mode)) {
    r.kind = TargetKind::kInPlace;
    return r;
  }
  if (S_ISDIR(r.st.st_mode)) return refuse("a folder");
  if (S_ISBLK(r.st.st_mode)) return refuse("a block device");
  if (S_ISSOCK(r.st.st_mode)) return refuse("a socket");
  return refuse("not a regular file");
}

}  // namespace

absl::StatusOr<OutputFile> OutputFile::Open(const std::string& path, std::FILE* stdout_stream) {
  if (path == "-") return OutputFile(path, "", stdout_stream, false);
  absl::StatusOr<Resolved> resolved = Resolve(path);
  if (!resolved.ok()) return resolved.status();
  const Resolved& r = *resolved;
  if (r.kind == TargetKind::kInPlace) {
    // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of waiting for one.
    const int fd = ::open(r.target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write \"", path,
                       "\": ", err == ENXIO ? "a FIFO without a reader" : std::strerror(err)));
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    std::FILE* f = fdopen(fd, "wb");
    if (f == nullptr) {
      const int err = errno;
      ::close(fd);
      return Failure("opening", path, err);
    }
    return OutputFile(r.target, "", f, true);
  }
  InstallCleanupHandlers();
  static std::atomic<int> counter{0};
  // A name no other writer uses: the pid and a per-process counter; O_EXCL makes sure (and
  // with O_NOFOLLOW never follows a link planted under that name).
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string temp = absl::StrCat(r.target, ".tmp-", getpid(), "-",
                                          counter.fetch_add(1, std::memory_order_relaxed));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return absl::NotFoundError(
          absl::StrCat("cannot write \"", path, "\": ", std::strerror(errno)));
    }
    const int slot = RegisterTemp(temp);
    if (r.existing) {
      // The owner first: changing it clears set-id bits, which the mode then restores. Not
      // being allowed to give the file away (EPERM) leaves it ours, as an editor's save.
      if (::fchown(fd, r.st.st_uid, r.st.st_gid) != 0 && errno != EPERM) {
        const int err = errno;
        ::close(fd);
        ::unlink(temp.c_str());
        UnregisterTemp(slot);
        return Failure("keeping the owner of", path, err);
      }
      ::fchmod(fd, r.st.st_mode & 07777);
    }
    std::FILE* f = fdopen(fd, "wb");
    if (f == nullptr) {
      const int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      UnregisterTemp(slot);
      return Failure("opening", path, err);
    }
    OutputFile out(r.target, temp, f, false);
    out.slot_ = slot;
    return out;
  }
  return absl::InternalError(
      absl::StrCat("cannot find a free temporary name beside \"", path, "\""));
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      stream_(other.stream_),
      in_place_(other.in_place_),
      done_(other.done_),
      slot_(other.slot_) {
  other.done_ = true;  // the moved-from object owns nothing
  other.slot_ = -1;
}

OutputFile::~OutputFile() {
  if (done_) return;
  if (in_place_) {
    std::fclose(stream_);
    return;
  }
  if (temp_.empty()) return;
  std::fclose(stream_);
  ::unlink(temp_.c_str());
  UnregisterTemp(slot_);
}

absl::Status OutputFile::Commit() {
  if (done_) return absl::InternalError("OutputFile committed twice");
  done_ = true;
  if (temp_.empty()) {
    int err = 0;
    if (std::fflush(stream_) != 0 || std::ferror(stream_)) err = errno != 0 ? errno : EIO;
    if (in_place_ && std::fclose(stream_) != 0 && err == 0) err = errno;
    if (err != 0) return Failure("writing to", in_place_ ? path_ : "stdout", err);
    return absl::OkStatus();
  }
  int err = 0;
  const char* step = "writing";
  if (std::fflush(stream_) != 0 || std::ferror(stream_)) err = errno != 0 ? errno : EIO;
  if (err == 0 && ::fsync(fileno(stream_)) != 0) err = errno;
  if (std::fclose(stream_) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(temp_.c_str(), path_.c_str()) != 0) {
    err = errno;
    step = "replacing";
  }
  if (err != 0) {
    ::unlink(temp_.c_str());
    UnregisterTemp(slot_);
    return Failure(step, path_, err);
  }
  UnregisterTemp(slot_);
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

absl::Status CheckOutputPath(const std::string& path) {
  if (path == "-") return absl::OkStatus();
  absl::StatusOr<Resolved> resolved = Resolve(path);
  if (!resolved.ok()) return resolved.status();
  if (resolved->kind == TargetKind::kInPlace) return absl::OkStatus();
  const std::string probe = absl::StrCat(resolved->target, ".tmp-", getpid(), "-check");
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST) {
    return absl::NotFoundError(absl::StrCat("cannot write \"", path, "\": ", std::strerror(errno)));
  }
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  return absl::OkStatus();
}

}  // namespace overlap
