// Collectives on GPUs: the Communicator (communicator.h) over NCCL, through the GpuApi seam.
//
//   OVERLAP_ASSIGN_OR_RETURN(auto comm, CreateNcclCommunicator({.rank = r,
//       .world_size = n, .api = api, .store = store, .stream = comm_stream}));
//   api->RecordEvent(ready, compute);  api->StreamWaitEvent(comm->stream(), ready);
//   std::shared_ptr<Work> w = comm->AllGather(shard, full);      // queued on the stream
//   api->StreamWaitEvent(compute, NcclWorkEvent(*w));           // the device waits, not the host
//
// How it is made and ended (NCCL 2.28's nonblocking API):
//   - rank 0 makes the unique id and publishes it as <prefix>/id in the store; every rank
//     calls ncclCommInitRankConfig with blocking = 0 and polls ncclCommGetAsyncError until
//     the communicator is ready or `timeout` passes;
//   - a poller thread watches every queued operation: its done event, the communicator's
//     asynchronous error, its deadline (`timeout` from issue) and the store's abort key
//     <prefix>/abort. On an error or a missed deadline it writes the reason to the abort key
//     and calls ncclCommAbort; a rank that sees another's reason aborts with it. Every
//     pending and later operation then fails with the reason, so no rank waits past its
//     deadline and the peers follow within a poll of the store (`store_poll`);
//   - Shutdown (or the destructor): ncclCommFinalize, polled, then ncclCommDestroy; after an
//     abort only the abort.
// Contract beyond Communicator's: tensors are device tensors (Device::kCuda) of the api's
// device; every operation runs on the one communication stream `stream` whatever
// CollectiveOptions::stream says (one NCCL communicator runs its operations in order);
// ordering against compute is the caller's, by events (above), or `after`'s. Reductions sum
// float32, float64, float16 and bfloat16. Work::run_seconds is 0 (the device's time is not measured
// per operation; step times are). Thread-safety: one issuing thread (NCCL's rule).
#ifndef OVERLAP_RUNTIME_CUDA_NCCL_COMMUNICATOR_H_
#define OVERLAP_RUNTIME_CUDA_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/tcp_store.h"
#include "runtime/cuda/gpu_api.h"

namespace overlap {

// Begins as GlooOptions does (gloo_communicator.h): rank, world_size, key_prefix, timeout.
struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  std::string key_prefix = "nccl";             // distinct per communicator of one job
  absl::Duration timeout = absl::Seconds(60);  // initialisation, and each operation
  GpuApi* api = nullptr;                       // not owned; outlives the communicator
  std::shared_ptr<TcpStore> store;             // ids and the abort key; the poller's own connection
  GpuStream* stream = nullptr;  // the communication stream (high priority); not owned
  // When set (the compute stream), every collective (group) first makes the communication
  // stream wait for the work queued on it so far, as ProcessGroupNCCL does with the current
  // stream; callers that order by their own events leave it unset. Not owned.
  GpuStream* after = nullptr;
  absl::Duration poll = absl::Milliseconds(1);         // events and asynchronous errors
  absl::Duration store_poll = absl::Milliseconds(20);  // the abort key
};

class NcclCommunicator : public Communicator {
 public:
  // The communication stream every operation runs on.
  virtual GpuStream* stream() const = 0;
  // Collectives issued between GroupStart and GroupEnd launch as one NCCL group (a bucket's
  // reduce-scatters, fused allgathers); their Works complete together.
  virtual absl::Status GroupStart() = 0;
  virtual absl::Status GroupEnd() = 0;
  // The first failure (an error, a missed deadline, a peer's abort); OK before any.
  virtual absl::Status status() const = 0;
  // Finalize then destroy (idempotent; after an abort, nothing more to do). Blocks until
  // NCCL has flushed, at most `timeout`.
  virtual absl::Status Shutdown() = 0;
};

// Joins the job's NCCL communicator (every rank calls it). Errors: the store's, NCCL's
// (naming the call), DeadlineExceeded when a rank does not join within the timeout.
absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(
    const NcclOptions& options);

// The event a Work of an NcclCommunicator records on the communication stream when its
// operation is done (for StreamWaitEvent); nullptr for another communicator's Work or an
// operation refused before it was queued.
GpuEvent* NcclWorkEvent(const Work& w);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CUDA_NCCL_COMMUNICATOR_H_
