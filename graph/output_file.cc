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
// in the handler). A slot is 0 free, 1 being filled, 2 live; it holds the temporary's
// folder (an open descriptor) and its name there. A write whose temporary does not fit a
// slot still works; only a signal during it leaves the temporary behind.
constexpr int kSlots = 64;
constexpr size_t kSlotName = 256;
struct TempSlot {
  std::atomic<int> state{0};
  int dir_fd = -1;
  char name[kSlotName];
};
TempSlot g_temps[kSlots];

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

void RemoveTempsOnSignal(int sig, siginfo_t* info, void* context) {
  for (TempSlot& slot : g_temps) {
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlinkat(slot.dir_fd, slot.name, 0);
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

int RegisterTemp(int dir_fd, const std::string& name) {
  if (name.size() >= kSlotName) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_temps[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      g_temps[i].dir_fd = dir_fd;
      std::memcpy(g_temps[i].name, name.c_str(), name.size() + 1);
      g_temps[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void UnregisterTemp(int slot) {
  if (slot >= 0) g_temps[slot].state.store(0, std::memory_order_release);
}

// A temporary's name beside `name`: the name cut so that the suffix keeps it within a
// file name's limit (255 bytes), then ".tmp-" and `suffix`.
std::string TempName(const std::string& name, absl::string_view suffix) {
  return absl::StrCat(name.substr(0, 200), ".tmp-", suffix);
}

// An open descriptor, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

enum class TargetKind { kReplace, kInPlace };

// An output path split into its folder, opened (the kernel resolves the folder's path),
// and its name there, with what that name is: replaced through a temporary (absent, a
// regular file: `existing`, `st` its mode and owner; or a symbolic link), or written in
// place (a character device or FIFO, or a link the kernel follows to one: `through_link`).
struct Resolved {
  Fd dir;
  std::string name;
  struct stat st {};
  bool existing = false;
  bool through_link = false;
  TargetKind kind = TargetKind::kReplace;
};

bool IsInPlace(mode_t mode) { return S_ISCHR(mode) || S_ISFIFO(mode); }

// InvalidArgument naming the type of a target that is neither; NotFound when the folder
// cannot be opened.
absl::StatusOr<Resolved> Resolve(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an output path is empty");
  const auto refuse = [&](absl::string_view type) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write \"", path, "\": it is ", type,
                     "; outputs replace regular files and write devices and FIFOs"));
  };
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  Resolved r;
  r.name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (r.name.empty() || r.name == "." || r.name == "..") return refuse("a folder");
  // O_PATH: the folder is only a place to create, look up and rename in; opening it needs
  // no read permission, and creating in it is checked where the temporary is created.
  r.dir.reset(::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (r.dir.get() < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot write \"", path, "\": its folder: ", std::strerror(errno)));
  }
  if (::fstatat(r.dir.get(), r.name.c_str(), &r.st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return r;  // absent: created
    return absl::NotFoundError(absl::StrCat("cannot write \"", path, "\": ", std::strerror(errno)));
  }
  if (S_ISREG(r.st.st_mode)) {
    r.existing = true;
    return r;
  }
  if (IsInPlace(r.st.st_mode)) {
    r.kind = TargetKind::kInPlace;
    return r;
  }
  if (S_ISLNK(r.st.st_mode)) {
    // The kernel follows the link, or refuses to (a loop, fs.protected_symlinks, a missing
    // target): only a device or FIFO at its end is written; anything else, the link is
    // replaced.
    struct stat end {};
    if (::fstatat(r.dir.get(), r.name.c_str(), &end, 0) == 0 && IsInPlace(end.st_mode)) {
      r.kind = TargetKind::kInPlace;
      r.through_link = true;
    }
    return r;
  }
  if (S_ISDIR(r.st.st_mode)) return refuse("a folder");
  if (S_ISBLK(r.st.st_mode)) return refuse("a block device");
  if (S_ISSOCK(r.st.st_mode)) return refuse("a socket");
  return refuse("not a regular file");
}

}  // namespace

absl::StatusOr<OutputFile> OutputFile::Open(const std::string& path, std::FILE* stdout_stream) {
  if (path == "-") return OutputFile(path, stdout_stream, false);
  absl::StatusOr<Resolved> resolved = Resolve(path);
  if (!resolved.ok()) return resolved.status();
  Resolved& r = *resolved;
  if (r.kind == TargetKind::kInPlace) {
    // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of waiting for one. No
    // O_CREAT and no O_TRUNC; O_NOFOLLOW unless the kernel was asked to follow the link.
    const int flags =
        O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (r.through_link ? 0 : O_NOFOLLOW);
    Fd fd(::openat(r.dir.get(), r.name.c_str(), flags));
    if (fd.get() < 0) {
      const int err = errno;
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write \"", path,
                       "\": ", err == ENXIO ? "a FIFO without a reader" : std::strerror(err)));
    }
    // What was opened is what was looked at: a name swapped for a regular file in between
    // would otherwise be written over in place.
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !IsInPlace(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write \"", path, "\": it changed while being opened"));
    }
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    std::FILE* f = fdopen(fd.get(), "wb");
    if (f == nullptr) return Failure("opening", path, errno);
    fd.release();
    return OutputFile(path, f, true);
  }
  InstallCleanupHandlers();
  static std::atomic<int> counter{0};
  // A name no other writer uses: the pid and a per-process counter; O_EXCL makes sure (and
  // with O_NOFOLLOW never follows a link planted under that name).
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string temp = TempName(
        r.name, absl::StrCat(getpid(), "-", counter.fetch_add(1, std::memory_order_relaxed)));
    const int fd = ::openat(r.dir.get(), temp.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      return absl::NotFoundError(
          absl::StrCat("cannot write \"", path, "\": ", std::strerror(errno)));
    }
    const int slot = RegisterTemp(r.dir.get(), temp);
    const auto abandon = [&](absl::string_view what, int err) {
      ::close(fd);
      ::unlinkat(r.dir.get(), temp.c_str(), 0);
      UnregisterTemp(slot);
      return Failure(what, path, err);
    };
    if (r.existing) {
      // The owner first: changing it clears set-id bits, which the mode then restores. Not
      // being allowed to give the file away (EPERM) leaves it ours, as an editor's save.
      if (::fchown(fd, r.st.st_uid, r.st.st_gid) != 0 && errno != EPERM) {
        return abandon("keeping the owner of", errno);
      }
      ::fchmod(fd, r.st.st_mode & 07777);
    }
    std::FILE* f = fdopen(fd, "wb");
    if (f == nullptr) return abandon("opening", errno);
    OutputFile out(path, f, false);
    out.dir_fd_ = r.dir.release();
    out.name_ = std::move(r.name);
    out.temp_ = temp;
    out.slot_ = slot;
    return out;
  }
  return absl::InternalError(
      absl::StrCat("cannot find a free temporary name beside \"", path, "\""));
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      dir_fd_(std::exchange(other.dir_fd_, -1)),
      name_(std::move(other.name_)),
      temp_(std::move(other.temp_)),
      stream_(other.stream_),
      in_place_(other.in_place_),
      done_(other.done_),
      slot_(std::exchange(other.slot_, -1)) {
  other.done_ = true;  // the moved-from object owns nothing
}

void OutputFile::Release() {
  UnregisterTemp(slot_);
  slot_ = -1;
  if (dir_fd_ >= 0) ::close(dir_fd_);
  dir_fd_ = -1;
}

OutputFile::~OutputFile() {
  if (done_) return;
  if (in_place_) {
    std::fclose(stream_);
    return;
  }
  if (temp_.empty()) return;
  std::fclose(stream_);
  ::unlinkat(dir_fd_, temp_.c_str(), 0);
  Release();
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
  // rename replaces the name itself: a symbolic link there gives way, its target untouched.
  if (err == 0 && ::renameat(dir_fd_, temp_.c_str(), dir_fd_, name_.c_str()) != 0) {
    err = errno;
    step = "replacing";
  }
  if (err != 0) ::unlinkat(dir_fd_, temp_.c_str(), 0);
  Release();
  if (err != 0) return Failure(step, path_, err);
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
  const int dir = resolved->dir.get();
  const std::string probe = TempName(resolved->name, absl::StrCat(getpid(), "-check"));
  const int fd =
      ::openat(dir, probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST) {
    return absl::NotFoundError(absl::StrCat("cannot write \"", path, "\": ", std::strerror(errno)));
  }
  if (fd >= 0) {
    ::close(fd);
    ::unlinkat(dir, probe.c_str(), 0);
  }
  return absl::OkStatus();
}

}  // namespace overlap
