// Roofline cost model: the device time of one kernel from its FLOPs and the bytes it moves.
//
//   time = max(flops / peak_flops(dtype), bytes / memory_bandwidth)
//
// A kernel is either compute-bound or memory-bound; the model takes whichever bound is
// slower and ignores launch overhead and partial overlap. That is the usual first-order
// estimate (Williams et al., "Roofline", CACM 2009) and what the schedulers need: relative
// costs right within a factor of about two, and real times on the right order.
// Defaults describe an H100 SXM (dense tensor-core peaks, HBM3 bandwidth); every figure can
// be overridden (the CLI takes --peak-tflops, --peak-tflops-fp32 and --mem-bandwidth).
#ifndef OVERLAP_GRAPH_COST_MODEL_H_
#define OVERLAP_GRAPH_COST_MODEL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

struct DeviceSpec {
  // Dense 16-bit (bf16 / fp16) tensor-core peak, FLOP/s. H100 SXM: 989 TFLOP/s.
  double peak_flops_16bit = 989e12;
  // 32-bit peak, FLOP/s: TF32 tensor cores (what PyTorch uses for fp32 matmuls with
  // allow_tf32). H100 SXM: 494 TFLOP/s.
  double peak_flops_32bit = 494e12;
  // Memory bandwidth, bytes/s. H100 SXM HBM3: 3.35 TB/s.
  double memory_bandwidth = 3.35e12;
};

// Bytes per element of a dtype name ("float32", "bfloat16", "int64", ...); 4 if unknown.
int64_t DtypeBytes(absl::string_view dtype);

// Bytes per element of every dtype PyTorch names (torch.<name>, its element_size()): the
// floats and their aliases, float8 / float4 variants, complex32 / complex64 / complex128
// (4 / 8 / 16), every signed and unsigned integer, bool, the quantized qint8, quint8,
// qint32, quint4x2, quint2x4 and the bits types; nullopt for any other name. O(1).
std::optional<int64_t> KnownDtypeBytes(absl::string_view dtype);

class CostModel {
 public:
  CostModel() = default;
  explicit CostModel(const DeviceSpec& spec) : spec_(spec) {}
  const DeviceSpec& spec() const { return spec_; }

  // Seconds for a kernel doing `flops` floating-point operations in `dtype` and moving
  // `bytes` to and from memory. Both >= 0. O(1).
  double KernelTime(double flops, double bytes, absl::string_view dtype) const;

 private:
  DeviceSpec spec_;
};

// Alpha-beta model of ring collectives among `world_size` ranks, one latency term each:
// allgather and reduce-scatter of a B-byte (full) tensor take latency + (p-1)/p x B /
// bandwidth; an allreduce latency + 2 (p-1)/p x B / bandwidth. Zero bytes or one rank cost
// nothing. Defaults: 32 ranks (4 nodes of 8 GPUs), 20 us, 50 GB/s per rank (a 400 Gb/s
// fabric). Shared by the DDP cap model and the ZeRO-3 simulator.
struct CollectiveModel {
  int world_size = 32;
  double latency_s = 20e-6;
  double bandwidth_bytes_per_s = 50e9;
  // A fitted latency and bus bandwidth for one collective (`overlap bench-comm`); a fit
  // with bandwidth 0 stands for the shared latency_s and bandwidth_bytes_per_s above.
  struct Fit {
    double latency_s = 0;
    double bandwidth_bytes_per_s = 0;
  };
  Fit allgather, reduce_scatter, allreduce;
  // The host link that offloaded tensors move over (device <-> host memory, PCIe-like):
  // a copy of B bytes takes host_latency_s + B / host_bandwidth_bytes_per_s, one copy at a
  // time. An infinite bandwidth with zero latency makes copies free (SimulateAlone).
  double host_latency_s = 0;
  double host_bandwidth_bytes_per_s = 25e9;
  // Contention: compute runs 1 + compute_slowdown times slower while a collective is in
  // flight (on a CPU the communication's own work, the kernel's network stack and the
  // communication thread's copies, takes cycles from it; `overlap run --calibrate` measures
  // it). 0: compute and communication do not compete (an accelerator's default).
  double compute_slowdown = 0;
  // Waking: a collective that starts the moment it is issued (the communication stream
  // idle) while compute goes on takes busy_start_s longer. On a CPU the communication
  // thread and the transport's thread sleep between collectives and must be scheduled onto
  // cores the kernels hold; a collective queued behind another finds them awake, and one
  // the compute waits for at once finds cores free (schedule/simulator.h says which is
  // which). `overlap run --calibrate` measures it. 0: an accelerator's default.
  double busy_start_s = 0;
  // The end of `seconds` of compute starting at `now` while collectives keep the
  // communication stream busy until `comm_busy_until`: slowed by compute_slowdown for the
  // overlap, at full speed after it. O(1).
  double ComputeEnd(double now, double seconds, double comm_busy_until) const;
  double Allgather(int64_t bytes) const;
  double ReduceScatter(int64_t bytes) const;
  double Allreduce(int64_t bytes) const;
  // Seconds for one copy of `bytes` over the host link (0 for 0 bytes). O(1).
  double HostCopy(int64_t bytes) const;
  // Whether the figures make sense (world >= 1, latency >= 0, bandwidth > 0; fits with
  // latency >= 0 and bandwidth >= 0; the host link's latency >= 0 and bandwidth > 0;
  // compute_slowdown >= 0, busy_start_s >= 0).
  bool Valid() const;
};

// The model as a file (`overlap bench-comm --save`, read by --collective-model):
//   {"format": "overlap-collective-model", "version": 1, "world_size": 4,
//    "latency_s": ..., "bandwidth_bytes_per_s": ...,
//    "allgather": {"latency_s": ..., "bandwidth_bytes_per_s": ...},
//    "reduce_scatter": {...}, "allreduce": {...},
//    "host_latency_s": ..., "host_bandwidth_bytes_per_s": ...,
//    "compute_slowdown": ..., "busy_start_s": ...}  (the last four optional: the defaults)
// Bandwidths are bus bandwidths (nccl-tests' busbw). Unknown keys are ignored; the shared
// figures are required. O(size).
std::string CollectiveModelJson(const CollectiveModel& m);
absl::StatusOr<CollectiveModel> ParseCollectiveModel(absl::string_view json);
// Reads and parses a file; errors name the path.
absl::StatusOr<CollectiveModel> ReadCollectiveModelFile(const std::string& path);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_COST_MODEL_H_
