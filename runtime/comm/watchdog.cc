#include "runtime/comm/watchdog.h"

#include <unistd.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "graph/text.h"

namespace overlap {

Watchdog::Watchdog(std::shared_ptr<TcpStore> store, Communicator* comm, WatchdogOptions options)
    : store_(std::move(store)), comm_(comm), options_(options) {
  if (!options_.address.empty() && options_.address != "127.0.0.1") {
    store_->Set(absl::StrCat("host/", options_.rank), options_.address).IgnoreError();
  }
  thread_ = std::thread([this] { Loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Watchdog::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

std::string Watchdog::RecentOperations() const {
  std::vector<std::string> lines;
  const absl::Time now = absl::Now();
  for (const std::shared_ptr<Work>& w : comm_->Recent()) {
    std::string state;
    if (w->Done()) {
      const absl::Status status = w->Wait(absl::ZeroDuration());
      state =
          status.ok()
              ? absl::StrCat("done in ", absl::FormatDuration(absl::Seconds(w->run_seconds())))
              : absl::StrCat("failed after ", absl::FormatDuration(absl::Seconds(w->run_seconds())),
                             ": ", status.message().substr(0, 120));
    } else if (w->started() != absl::InfinitePast()) {
      state = absl::StrCat("running for ", absl::FormatDuration(now - w->started()));
    } else {
      state = absl::StrCat("queued for ", absl::FormatDuration(now - w->issued()));
    }
    lines.push_back(absl::StrCat("  ", w->what(), ": ", state));
  }
  if (lines.empty()) return "  (no collective issued yet)";
  return absl::StrJoin(lines, "\n");
}

void Watchdog::PublishAbort(const std::string& reason) {
  store_->Set("abort", absl::StrCat("rank ", options_.rank, ": ", reason)).IgnoreError();
}

void Watchdog::AbortAll(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.load()) return;
    reason_ = reason;
    abort_time_ = absl::Now();
    aborted_.store(true);
  }
  comm_->Abort(absl::AbortedError(reason));
}

absl::Status Watchdog::Explain(const absl::Status& failure) {
  auto read = [&](std::vector<int64_t>& beats) {
    beats.assign(options_.world_size, -1);
    for (int r = 0; r < options_.world_size; ++r) {
      absl::StatusOr<std::string> v = store_->Get(absl::StrCat("hb/", r), absl::ZeroDuration());
      int64_t n = -1;
      if (v.ok() && absl::SimpleAtoi(*v, &n)) beats[r] = n;
    }
  };
  // First say that this rank is ending on an error, so that its heartbeat stopping next is
  // not taken for a loss by the others.
  store_->Set(absl::StrCat("failed/", options_.rank), std::string(failure.message())).IgnoreError();
  std::vector<int64_t> before, after;
  read(before);
  const absl::Duration wait = options_.heartbeat * 3;
  absl::SleepFor(wait);
  read(after);
  std::vector<std::string> lost, hosts;
  for (int r = 0; r < options_.world_size; ++r) {
    if (r != options_.rank && (after[r] < 0 || after[r] == before[r]) &&
        !store_->Get(absl::StrCat("failed/", r), absl::ZeroDuration()).ok()) {
      lost.push_back(absl::StrCat(r));
      absl::StatusOr<std::string> host =
          store_->Get(absl::StrCat("host/", r), absl::ZeroDuration());
      if (host.ok()) hosts.push_back(*host);
    }
  }
  std::string message;
  if (!lost.empty()) {
    const std::string on =
        hosts.empty() ? "" : absl::StrCat("on ", absl::StrJoin(hosts, ", "), "; ");
    message = absl::StrCat(lost.size() == 1 ? "rank " : "ranks ", absl::StrJoin(lost, ", "),
                           lost.size() == 1 ? " is" : " are", " lost (", on, "no heartbeat for ",
                           absl::FormatDuration(wait), "): ", failure.message());
  } else if (absl::IsDeadlineExceeded(failure) || absl::IsUnavailable(failure) ||
             absl::IsAborted(failure)) {
    // Said only where it is the diagnosis: a communication failure with no rank lost.
    message = absl::StrCat(failure.message(),
                           " (every rank's heartbeat advances: no rank is "
                           "lost; a rank is silent or slow)");
  } else {
    message = std::string(failure.message());
  }
  PublishAbort(message);
  return absl::Status(failure.code(), message);
}

void Watchdog::Loop() {
  int64_t beat = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const absl::Status beat_status =
        store_->Set(absl::StrCat("hb/", options_.rank), absl::StrCat(++beat));
    // A lost store (its launcher or rank 0 gone, or stopped): this rank cannot be told of
    // the others' failures any more, so it ends too rather than train on alone.
    if (absl::IsUnavailable(beat_status) && !aborted_.load()) {
      AbortAll(absl::StrCat("rank ", options_.rank, ": lost the rendezvous store (",
                            beat_status.message(), "): ", options_.store_server, " is gone"));
    }
    // Another rank's abort. Its text came through the store: shown escaped.
    if (!aborted_.load()) {
      absl::StatusOr<std::string> other = store_->Get("abort", absl::ZeroDuration());
      if (other.ok() && !absl::StartsWith(*other, absl::StrCat("rank ", options_.rank, ":"))) {
        AbortAll(absl::StrCat("aborted by another rank: ", Printable(*other)));
      }
    }
    // Deadlines.
    if (!aborted_.load()) {
      const absl::Time now = absl::Now();
      for (const std::shared_ptr<Work>& w : comm_->Recent()) {
        if (!w->Done() && now - w->issued() > options_.timeout) {
          const std::string reason =
              absl::StrCat("rank ", options_.rank, ": watchdog: ", w->what(),
                           " did not finish within ", absl::FormatDuration(options_.timeout),
                           "; the last collectives issued:\n", RecentOperations());
          PublishAbort(reason);
          AbortAll(reason);
          break;
        }
      }
    }
    lock.lock();
    if (aborted_.load() && options_.exit_process && absl::Now() - abort_time_ > options_.grace) {
      std::fprintf(stderr, "overlap: rank %d: ending the process: %s\n", options_.rank,
                   reason_.c_str());
      std::fflush(stderr);
      _exit(3);
    }
    cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.heartbeat));
  }
}

}  // namespace overlap
