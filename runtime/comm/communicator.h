// Collectives across ranks, asynchronous: each call queues the operation on one of the
// communicator's streams (a communication thread each, never the caller's) and returns a
// Work to wait on. The executor's training steps (DDP, ZeRO-3) use this interface; the Gloo
// implementation (gloo_communicator.h) runs ranks as processes or hosts over TCP, the NCCL
// one (cuda/nccl_communicator.h) runs them on GPUs.
//
//   std::shared_ptr<Work> w = comm->AllReduce(grads, {.stream = 1});
//   ... compute goes on ...
//   OVERLAP_RETURN_IF_ERROR(w->Wait(absl::Seconds(30)));
//
// Contract:
//   - every rank issues the same collectives in the same order on each stream (as PyTorch's
//     reducer and DeepCompile do); operations on one stream run in issue order, streams run
//     concurrently;
//   - tensors are contiguous and must stay alive and untouched until their Work is done;
//     reductions (allreduce, reduce-scatter) take float32 or float64, allgather and
//     broadcast any dtype (they move bytes);
//   - a failure (a dead peer, a timeout, Abort) ends the operation and every later one on
//     every stream with an error naming the collective, its sequence number and the peer
//     when known; nothing hangs past the timeout.
#ifndef OVERLAP_RUNTIME_COMM_COMMUNICATOR_H_
#define OVERLAP_RUNTIME_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/core/tensor.h"

namespace overlap {

// One queued collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation is done or `timeout` passes (DeadlineExceeded, naming the
  // operation; the operation itself goes on). Returns the operation's status.
  virtual absl::Status Wait(absl::Duration timeout) = 0;
  // Whether it finished (successfully or not). Never blocks.
  virtual bool Done() const = 0;
  // Once Done: the seconds the operation ran on its stream (from leaving the queue to its
  // end): the communication time the hidden-communication fraction divides by. 0 before.
  virtual double run_seconds() const { return 0; }
  // "allgather #12 (stream 0, 4096 bytes, rank 1 of 4)": what the watchdog reports.
  virtual std::string what() const { return ""; }
  // When it was issued, and when it left the queue to run (InfinitePast before): for the
  // watchdog's deadlines and the trace.
  virtual absl::Time issued() const { return absl::InfinitePast(); }
  virtual absl::Time started() const { return absl::InfinitePast(); }
};

struct CollectiveOptions {
  int stream = 0;  // which communication stream (thread) runs it; < Communicator::streams()
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int streams() const = 0;
  // Where the tensors it takes live: the host (Gloo) or a device (NCCL: device tensors).
  virtual Device device() const { return Device::kCpu; }

  // In place: every rank's `t` becomes the elementwise sum over ranks.
  virtual std::shared_ptr<Work> AllReduce(Tensor t, const CollectiveOptions& o = {}) = 0;
  // `out` (size() * in.numel() elements) receives every rank's `in`, in rank order.
  virtual std::shared_ptr<Work> AllGather(Tensor in, Tensor out,
                                          const CollectiveOptions& o = {}) = 0;
  // `out` (in.numel() / size() elements; in.numel() a multiple of size()) receives the sum
  // over ranks of this rank's slice of `in` (slice r is elements [r n, (r + 1) n)).
  virtual std::shared_ptr<Work> ReduceScatter(Tensor in, Tensor out,
                                              const CollectiveOptions& o = {}) = 0;
  // Every rank's `t` becomes root's.
  virtual std::shared_ptr<Work> Broadcast(Tensor t, int root, const CollectiveOptions& o = {}) = 0;
  virtual std::shared_ptr<Work> Barrier(const CollectiveOptions& o = {}) = 0;

  // Ends every pending and later operation with `reason` (idempotent; the first reason
  // wins). Never blocks on the network. An operation already running on the network is not
  // interrupted (Gloo cannot): it ends at its own timeout or when a peer closes.
  virtual void Abort(absl::Status reason) = 0;

  // The last few operations issued (oldest first), done or not: what a watchdog reports.
  virtual std::vector<std::shared_ptr<Work>> Recent() const { return {}; }
};

// A device whose streams order collectives without the host (runtime/cuda/cuda_device.h):
// what a trainer asks of it beyond its memory (DeviceMemory).
class DeviceStreams {
 public:
  virtual ~DeviceStreams() = default;
  // Makes the device's compute wait (device-side) for `w` to finish: true. false when `w`
  // is not a collective of this device (a host library's): the caller waits on the host.
  virtual absl::StatusOr<bool> ComputeWaitFor(const Work& w) = 0;
  // A collective on the device's communication stream used `t`'s block: its free must be
  // ordered after that use.
  virtual void MarkCommunicated(const Tensor& t) = 0;
};

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_COMM_COMMUNICATOR_H_
