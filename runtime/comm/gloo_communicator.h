// The Gloo communicator: ranks as processes (or hosts) over TCP, through Debian's libgloo
// (`@gloo`). One Gloo context per stream, each connected full-mesh through a shared store and
// driven by its own thread, so collectives on different streams run concurrently and never
// on the caller's thread.
//
//   GlooOptions o;
//   o.rank = 0; o.world_size = 2; o.store_path = "/tmp/run1";   // a folder every rank sees
//   absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(o);
//
// Collectives: allreduce (Gloo's ring), allgather and broadcast (Gloo's), barrier, and
// reduce-scatter as a ring over Gloo's pairs (Debian's Gloo exports no reduce-scatter; an
// allreduce and a slice would move twice the bytes): P - 1 steps, each sending one chunk to
// the next rank and adding the one received from the previous, n (P - 1) / P elements sent per
// rank, the same as NCCL's ring. Every wait is bounded by `timeout`; a dead peer ends the
// operation at once (Gloo sees the closed connection), a silent one at the timeout; either
// aborts the communicator, naming the collective and its sequence number.
#ifndef OVERLAP_RUNTIME_COMM_GLOO_COMMUNICATOR_H_
#define OVERLAP_RUNTIME_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/comm/communicator.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace overlap {

// Both communicators' options begin alike (this and cuda/nccl_communicator.h's NcclOptions):
// rank, world_size, key_prefix (this communicator's keys in the store), timeout (60 s by
// default: joining and every operation); then what each library needs.
struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Keys of this communicator in the store, so several runs may share a store or folder.
  std::string key_prefix = "gloo";
  // Bounds connecting and every collective.
  absl::Duration timeout = absl::Seconds(60);
  // The rendezvous: a store every rank reaches (a TcpStore, tcp_store.h), or else a folder
  // every rank can read and write (Gloo's FileStore).
  std::shared_ptr<gloo::rendezvous::Store> store;
  std::string store_path;
  // The address this rank listens on (127.0.0.1 for ranks on one machine).
  std::string hostname = "127.0.0.1";
  // When > 0, bounds connecting instead (what is left of a job's rendezvous deadline).
  absl::Duration connect_timeout = absl::ZeroDuration();
  // Communication streams (threads, Gloo contexts).
  int streams = 1;
  // Sum every element in rank order (x_0 + x_1 + ... + x_{P-1}), so results do not depend
  // on how tensors are split into buckets or on the algorithm: reduce-scatter becomes an
  // all-to-all of the chunks and a local sum in rank order (the ring's bytes), allreduce
  // that followed by an allgather (the ring allreduce's bytes). Gloo's ring sums in ring order.
  bool deterministic = false;
  // An allgather of more than this many bytes per rank runs as consecutive allgathers of
  // this many per rank (each bounds the bytes in flight per peer); 0: one allgather. -1
  // (default): 512 KiB where this rank listens on an address other than loopback (ranks on
  // several hosts: one multi-megabyte message per ring step carried 64% of a rate-limited
  // link, 512 KiB pieces 96%), else 0 (on one machine the pieces' extra synchronizations
  // cost 4x; docs/runtime.md, "A cluster on one machine").
  int64_t allgather_segment_bytes = -1;
  // Debug (race checks): each operation starts after a random delay of 0-2 ms on its
  // stream's thread, so that tests shake out orderings the compute thread must not rely on.
  bool random_delays = false;
};

// Connects to the other ranks (blocking until all have joined, or the timeout). The process
// ignores SIGPIPE from then on unless it already handles it: a write to a dead peer must end
// in an error, not kill the rank (Gloo does not write with MSG_NOSIGNAL everywhere). Errors:
// InvalidArgument for bad options; Unavailable / DeadlineExceeded from the rendezvous.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_COMM_GLOO_COMMUNICATOR_H_
