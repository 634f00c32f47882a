// Tensors for the executor: a dtype, a shape and strides over a shared storage (views share
// it), allocated through an Allocator that counts the bytes live and their peak, with graph
// values and kernel scratch in separate pools, so that the interpreter's measured peak of
// graph values can be compared with the simulator's peak_memory_bytes.
//
//   Allocator alloc;
//   absl::StatusOr<Tensor> t = Tensor::Empty(alloc, DType::kFloat32, {2, 3});
//   Tensor row = t->Select(0, 1);  // a view: no allocation
//   alloc.live(Pool::kValues) == 24; alloc.peak(Pool::kValues) == 24
//
// Not thread-safe: one allocator per interpreter (per rank); kernels that use threads (BLAS)
// allocate before and after, not inside. Storages may outlive their allocator (they share
// its counters).
#ifndef OVERLAP_RUNTIME_CORE_TENSOR_H_
#define OVERLAP_RUNTIME_CORE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace overlap {

// Element types. 16-bit floats are stored as such and computed in float32 by the kernels.
enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kUInt8,
  kBool
};

// The graph's dtype names ("float32", "bfloat16", "int64", ... as graph/cost_model.h's
// DtypeBytes reads them, with their aliases "float", "half", "double", "long"); InvalidArgument
// naming the dtype otherwise. O(1).
absl::StatusOr<DType> ParseDType(absl::string_view name);
// The canonical graph name ("float32", ...). O(1).
absl::string_view DTypeName(DType d);
// Bytes per element. O(1).
int64_t DTypeSize(DType d);
// Whether `d` is a floating-point type (float32, float64, float16, bfloat16). O(1).
inline bool IsFloatingPoint(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 ||
         d == DType::kBFloat16;
}

// Which count an allocation goes to.
enum class Pool : uint8_t {
  kValues,   // graph values (what the simulator's peak_memory_bytes models)
  kScratch,  // a kernel's temporaries (im2col buffers, reductions)
};

class Allocator;
class Tensor;

// Where a storage's bytes live. Host code reads only kCpu storages; a kCuda storage's data()
// is a device pointer for the CUDA backend's kernels and collectives (runtime/cuda/).
enum class Device : uint8_t { kCpu, kCuda };

// Bytes owned by an allocator; freed (and uncounted) when the last tensor viewing it goes.
class Storage {
 public:
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  // Bytes someone else owns (a device allocator's block): `release` runs once, when the last
  // tensor viewing them goes (it must not throw or block on the device). Counted by no
  // Allocator. O(1).
  static std::shared_ptr<Storage> Wrap(std::byte* data, int64_t bytes, Device device,
                                       std::function<void()> release);
  std::byte* data() { return data_ != nullptr ? data_.get() : external_; }
  const std::byte* data() const { return data_ != nullptr ? data_.get() : external_; }
  int64_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  friend class Allocator;
  // The allocator's state, shared with its storages so they may outlive it: the counts,
  // and freed blocks kept for reuse by exact size (a step allocates the same sizes again;
  // the machine's page faults on fresh large blocks cost more than the kernels).
  struct Counters {
    std::mutex mu;  // storages may die on a communication thread
    int64_t live[2] = {0, 0};
    int64_t peak[2] = {0, 0};
    int64_t peak_total = 0;  // of live[0] + live[1]: both pools at once
    absl::flat_hash_map<int64_t, std::vector<std::unique_ptr<std::byte[]>>> cache;
    int64_t cached_bytes = 0;
  };
  Storage(std::shared_ptr<Counters> owner, Pool pool, int64_t bytes);
  std::shared_ptr<Counters> owner_;
  Pool pool_;
  int64_t bytes_;
  std::unique_ptr<std::byte[]> data_;
  std::byte* external_ = nullptr;  // Wrap's or a device's bytes
  Device device_ = Device::kCpu;
  std::function<void()> release_;
  bool counted_ = true;  // by its owner's counters (not Wrap's)
};

// A device's memory and copies (the CUDA backend's, runtime/cuda/cuda_device.h): an
// Allocator made with one hands out its storages, counted as host ones are. It must outlive
// every storage it made.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // `bytes` of device memory, zeroed when asked; ResourceExhausted when the device has not
  // got them.
  virtual absl::StatusOr<std::byte*> Allocate(int64_t bytes, bool zeroed) = 0;
  // Gives `p` back once the work queued on it so far is done (stream-ordered); never blocks.
  virtual void Free(std::byte* p) = 0;
  // dst's elements become src's (equal shapes; any strides and dtypes, converted as
  // CopyConvert does; either side on this device or the host). A copy to the host is
  // complete when it returns. InvalidArgument when the shapes differ.
  virtual absl::Status Copy(const Tensor& src, Tensor& dst) = 0;
};

// Allocates zeroed storages and counts, per pool, the bytes live and the peak since the last
// ResetPeak (the counts are of bytes handed out, not of blocks kept for reuse). Freed blocks
// are kept for reuse by exact size, up to kCacheBytes in all, as PyTorch's caching
// allocators keep them. Allocation is O(bytes) (zeroing); counting is O(1).
// Debug (race checks): when on, every storage's bytes are overwritten with 0xFF (NaN as
// any float) when it is freed, so that a buffer still read or written after it died shows
// up as NaN in the results. Off by default; process-wide.
void SetPoisonFreedStorage(bool on);

class Allocator {
 public:
  // The first host Allocator of the process also tells glibc to keep freed memory in its
  // heap (mallopt: blocks up to 32 MiB from the heap, not fresh mmaps; no trimming below
  // 2 GiB free): each run of a graph has its own Allocator, and without this a step's
  // blocks came back from the system as fresh pages every run, whose faults cost 12 ms of a
  // 95 ms resnet18 step (2026-12-02). The process keeps its high-water mark, as PyTorch's
  // caching allocators do.
  Allocator();
  // Storages on `device` (not owned; nullptr: the host).
  explicit Allocator(DeviceMemory* device) : Allocator() { device_ = device; }
  DeviceMemory* device() const { return device_; }
  // The most freed bytes kept for reuse.
  static constexpr int64_t kCacheBytes = int64_t{1} << 30;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // `bytes` zeroed bytes (unless !zeroed) in `pool`; InvalidArgument when bytes < 0,
  // ResourceExhausted when the system has not got them (never an abort).
  absl::StatusOr<std::shared_ptr<Storage>> Allocate(int64_t bytes, Pool pool = Pool::kValues,
                                                    bool zeroed = true);

  // Moves `storage`'s bytes into this allocator's count, in `pool`: they stop counting in
  // their previous owner's and count here from now on, until the storage is freed (into
  // this allocator's reuse cache). Hands a tensor from one run's memory to the next
  // without a copy. FailedPrecondition for bytes no host allocator owns (Storage::Wrap's,
  // a device's) or when this allocator is a device's. O(1).
  absl::Status Adopt(Storage& storage, Pool pool = Pool::kValues);

  int64_t live(Pool pool) const {
    std::lock_guard<std::mutex> lock(counters_->mu);
    return counters_->live[static_cast<int>(pool)];
  }
  int64_t peak(Pool pool) const {
    std::lock_guard<std::mutex> lock(counters_->mu);
    return counters_->peak[static_cast<int>(pool)];
  }
  // The most bytes both pools held at one time (at most peak(kValues) + peak(kScratch)).
  int64_t peak_total() const {
    std::lock_guard<std::mutex> lock(counters_->mu);
    return counters_->peak_total;
  }
  // Starts a new peak measurement at the bytes live now.
  void ResetPeak();

 private:
  std::shared_ptr<Storage::Counters> counters_;
  DeviceMemory* device_ = nullptr;
};

// A strided view of a storage. Shapes and strides are in elements; `offset` is the first
// element's index in the storage. A default-constructed tensor has no storage (numel 0).
class Tensor {
 public:
  Tensor() = default;

  // A new contiguous (row-major), zeroed tensor. Errors: negative dimensions, an element
  // count that overflows, and the allocator's. O(numel).
  static absl::StatusOr<Tensor> Empty(Allocator& alloc, DType dtype,
                                      absl::Span<const int64_t> shape, Pool pool = Pool::kValues);
  // The same without zeroing (O(1) on a reused block): for buffers the caller overwrites
  // whole before reading, such as a collective's output.
  static absl::StatusOr<Tensor> Uninitialized(Allocator& alloc, DType dtype,
                                              absl::Span<const int64_t> shape,
                                              Pool pool = Pool::kValues);

  // A contiguous tensor over the first bytes of `storage` (Storage::Wrap's device blocks).
  // InvalidArgument when the shape is negative or needs more bytes than the storage has.
  // O(dim).
  static absl::StatusOr<Tensor> FromStorage(std::shared_ptr<Storage> storage, DType dtype,
                                            absl::Span<const int64_t> shape);

  // Whether the tensor has a storage (a kernel's None result has none).
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  // The product of the shape (1 for a scalar). O(dim).
  int64_t numel() const;
  // numel() * DTypeSize. O(dim).
  int64_t nbytes() const { return numel() * DTypeSize(dtype_); }
  // Whether the elements are laid out row-major without gaps. O(dim).
  bool IsContiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Where the elements live (kCpu for an undefined tensor).
  Device device() const { return storage_ != nullptr ? storage_->device() : Device::kCpu; }
  // Whether two tensors view the same storage.
  bool SharesStorageWith(const Tensor& other) const {
    return storage_ != nullptr && storage_ == other.storage_;
  }

  // Views (no allocation). InvalidArgument for out-of-range dimensions or indices, or a
  // reshape of a non-contiguous tensor or to a different element count. O(dim).
  absl::StatusOr<Tensor> View(absl::Span<const int64_t> shape) const;  // contiguous reshape
  absl::StatusOr<Tensor> Transpose(int64_t a, int64_t b) const;
  absl::StatusOr<Tensor> Select(int64_t dim, int64_t index) const;  // drops `dim`
  absl::StatusOr<Tensor> Slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // Any view of the same storage (expand's zero strides, unsqueeze): InvalidArgument when
  // some element would lie outside the storage or a size or stride is negative.
  absl::StatusOr<Tensor> AsStrided(absl::Span<const int64_t> shape,
                                   absl::Span<const int64_t> strides, int64_t offset) const;

  // A typed pointer to the first element (storage index `offset`); index it with
  // IndexOf - offset. No checks: T must match the dtype (float for kFloat32, uint16_t for
  // the 16-bit floats, ...).
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(storage_->data()) + offset_;
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(storage_->data()) + offset_;
  }
  // The storage index of a multi-index (one entry per dimension). O(dim).
  int64_t IndexOf(absl::Span<const int64_t> index) const;

  // "float32[2, 3]" (strides when not contiguous). O(dim).
  std::string DebugString() const;

 private:
  static absl::StatusOr<Tensor> Make(Allocator& alloc, DType dtype, absl::Span<const int64_t> shape,
                                     Pool pool, bool zeroed);
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> shape_, strides_;
  int64_t offset_ = 0;
  std::shared_ptr<Storage> storage_;
};

// Element i (row-major over the shape, any strides) read as a double / written from one;
// 16-bit floats convert exactly to and round to nearest even from double, integers and bools
// convert by C++ rules. O(dim) per element: for tests and small tensors, not kernels.
double GetElement(const Tensor& t, int64_t i);
void SetElement(Tensor& t, int64_t i, double v);

// Copies src's elements into dst (same shape, any strides and dtypes: converted as
// SetElement does). InvalidArgument when the shapes differ. O(numel); fast paths for equal
// dtypes and float32 / float64 / 16-bit conversions of contiguous tensors.
absl::Status CopyConvert(const Tensor& src, Tensor& dst);

// float <-> IEEE half / bfloat16 bits, rounding to nearest even (NaN stays NaN). O(1).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);

// The physical memory available now for new allocations: Linux's MemAvailable (free pages
// plus the page cache and other memory the kernel reclaims without swapping), else the free
// pages, INT64_MAX when the system says neither: what the executor refuses graphs against
// up front. Free pages alone understate it by whatever the page cache holds (a machine that
// had just written gigabytes of files refused a 4 GiB run with 15 GiB available). Reads
// /proc/meminfo: O(1).
int64_t AvailableMemoryBytes();

// NumPy broadcasting: the shape `a` and `b` broadcast to, nullopt when they do not. O(dim).
std::optional<std::vector<int64_t>> BroadcastShapes(absl::Span<const int64_t> a,
                                                    absl::Span<const int64_t> b);

// Row-major strides for `shape`. O(dim).
std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> shape);

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_CORE_TENSOR_H_
