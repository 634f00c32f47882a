#include "runtime/core/tensor.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap {

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "float32" || name == "float") return DType::kFloat32;
  if (name == "float64" || name == "double") return DType::kFloat64;
  if (name == "float16" || name == "half") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "int64" || name == "long") return DType::kInt64;
  if (name == "int32") return DType::kInt32;
  if (name == "uint8") return DType::kUInt8;
  if (name == "bool") return DType::kBool;
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype \"", name, "\""));
}

absl::string_view DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt64:
      return "int64";
    case DType::kInt32:
      return "int32";
    case DType::kUInt8:
      return "uint8";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

int64_t DTypeSize(DType d) {
  switch (d) {
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kUInt8:
    case DType::kBool:
      return 1;
  }
  return 1;
}

Storage::Storage(std::shared_ptr<Counters> owner, Pool pool, int64_t bytes)
    : owner_(std::move(owner)), pool_(pool), bytes_(bytes) {}

namespace {
std::atomic<bool> poison_freed{false};
}  // namespace

void SetPoisonFreedStorage(bool on) { poison_freed.store(on); }

std::shared_ptr<Storage> Storage::Wrap(std::byte* data, int64_t bytes, Device device,
                                       std::function<void()> release) {
  std::shared_ptr<Storage> s(
      new Storage(std::make_shared<Counters>(), Pool::kScratch, /*bytes=*/0));
  s->bytes_ = bytes;
  s->counted_ = false;
  s->external_ = data;
  s->device_ = device;
  s->release_ = std::move(release);
  return s;
}

Storage::~Storage() {
  if (external_ != nullptr || release_) {
    if (release_) release_();
    if (counted_) {
      std::lock_guard<std::mutex> lock(owner_->mu);
      owner_->live[static_cast<int>(pool_)] -= bytes_;
    }
    return;
  }
  if (data_ != nullptr && poison_freed.load()) std::memset(data_.get(), 0xFF, bytes_);
  std::lock_guard<std::mutex> lock(owner_->mu);
  owner_->live[static_cast<int>(pool_)] -= bytes_;
  if (data_ != nullptr && bytes_ >= 4096 &&
      owner_->cached_bytes + bytes_ <= Allocator::kCacheBytes) {
    owner_->cached_bytes += bytes_;
    owner_->cache[bytes_].push_back(std::move(data_));
  }
}

Allocator::Allocator() : counters_(std::make_shared<Storage::Counters>()) {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  });
}

absl::Status Allocator::Adopt(Storage& storage, Pool pool) {
  if (device_ != nullptr || storage.data_ == nullptr || !storage.counted_) {
    return absl::FailedPreconditionError("only a host allocator's storage can be adopted");
  }
  if (storage.owner_ == counters_ && storage.pool_ == pool) return absl::OkStatus();
  {
    std::lock_guard<std::mutex> lock(storage.owner_->mu);
    storage.owner_->live[static_cast<int>(storage.pool_)] -= storage.bytes_;
  }
  {
    std::lock_guard<std::mutex> lock(counters_->mu);
    int64_t& live = counters_->live[static_cast<int>(pool)];
    live += storage.bytes_;
    int64_t& peak = counters_->peak[static_cast<int>(pool)];
    peak = std::max(peak, live);
    counters_->peak_total =
        std::max(counters_->peak_total, counters_->live[0] + counters_->live[1]);
  }
  storage.owner_ = counters_;
  storage.pool_ = pool;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Storage>> Allocator::Allocate(int64_t bytes, Pool pool,
                                                             bool zeroed) {
  if (bytes < 0) return absl::InvalidArgumentError("cannot allocate a negative byte count");
  std::shared_ptr<Storage> s(new Storage(counters_, pool, bytes));
  if (device_ != nullptr) {
    absl::StatusOr<std::byte*> p = device_->Allocate(bytes, zeroed);
    if (!p.ok()) {
      s->bytes_ = 0;
      s->counted_ = false;
      return p.status();
    }
    DeviceMemory* d = device_;
    std::byte* block = *p;
    s->external_ = block;
    s->device_ = d->device();
    s->release_ = [d, block] { d->Free(block); };
    std::lock_guard<std::mutex> lock(counters_->mu);
    const int k = static_cast<int>(pool);
    counters_->live[k] += bytes;
    counters_->peak[k] = std::max(counters_->peak[k], counters_->live[k]);
    counters_->peak_total =
        std::max(counters_->peak_total, counters_->live[0] + counters_->live[1]);
    return s;
  }
  std::lock_guard<std::mutex> lock(counters_->mu);
  // Zeroed, and never an abort: an allocation the system refuses is an error value.
  auto cached = counters_->cache.find(bytes);
  if (cached != counters_->cache.end() && !cached->second.empty()) {
    s->data_ = std::move(cached->second.back());
    cached->second.pop_back();
    counters_->cached_bytes -= bytes;
    if (zeroed) std::memset(s->data_.get(), 0, bytes);
  } else if (zeroed) {
    s->data_.reset(new (std::nothrow) std::byte[std::max<int64_t>(bytes, 1)]());
  } else {
    s->data_.reset(new (std::nothrow) std::byte[std::max<int64_t>(bytes, 1)]);
  }
  if (s->data_ == nullptr) {
    s->bytes_ = 0;  // nothing to uncount
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  const int p = static_cast<int>(pool);
  counters_->live[p] += bytes;
  counters_->peak[p] = std::max(counters_->peak[p], counters_->live[p]);
  counters_->peak_total = std::max(counters_->peak_total, counters_->live[0] + counters_->live[1]);
  return s;
}

void Allocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(counters_->mu);
  counters_->peak[0] = counters_->live[0];
  counters_->peak[1] = counters_->live[1];
  counters_->peak_total = counters_->live[0] + counters_->live[1];
}

int64_t AvailableMemoryBytes() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kib = -1;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    }
    std::fclose(f);
    if (kib >= 0) return static_cast<int64_t>(kib) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : INT64_MAX;
}

std::optional<std::vector<int64_t>> BroadcastShapes(absl::Span<const int64_t> a,
                                                    absl::Span<const int64_t> b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  }
  return strides;
}

absl::StatusOr<Tensor> Tensor::FromStorage(std::shared_ptr<Storage> storage, DType dtype,
                                           absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("negative dimension in a tensor's shape");
    if (d != 0 && n > INT64_MAX / d) return absl::InvalidArgumentError("element count overflows");
    n *= d;
  }
  if (storage == nullptr || n * DTypeSize(dtype) > storage->bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", DTypeName(dtype), " tensor of ", n, " elements does not fit a storage of ",
        storage == nullptr ? 0 : storage->bytes(), " bytes"));
  }
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.strides_ = ContiguousStrides(shape);
  t.storage_ = std::move(storage);
  return t;
}

absl::StatusOr<Tensor> Tensor::Empty(Allocator& alloc, DType dtype, absl::Span<const int64_t> shape,
                                     Pool pool) {
  return Make(alloc, dtype, shape, pool, true);
}

absl::StatusOr<Tensor> Tensor::Uninitialized(Allocator& alloc, DType dtype,
                                             absl::Span<const int64_t> shape, Pool pool) {
  return Make(alloc, dtype, shape, pool, false);
}

absl::StatusOr<Tensor> Tensor::Make(Allocator& alloc, DType dtype, absl::Span<const int64_t> shape,
                                    Pool pool, bool zeroed) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape [", absl::StrJoin(shape, ", "), "]"));
    }
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] has too many elements"));
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, DTypeSize(dtype), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape [", absl::StrJoin(shape, ", "), "] has too many bytes"));
  }
  absl::StatusOr<std::shared_ptr<Storage>> storage = alloc.Allocate(bytes, pool, zeroed);
  if (!storage.ok()) return storage.status();
  Tensor t;
  t.dtype_ = dtype;
  t.shape_.assign(shape.begin(), shape.end());
  t.strides_ = ContiguousStrides(shape);
  t.storage_ = *std::move(storage);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::IsContiguous() const {
  int64_t expect = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;  // any stride works for a size-1 dimension
    if (strides_[i] != expect) return numel() == 0;
    expect *= shape_[i];
  }
  return true;
}

absl::StatusOr<Tensor> Tensor::View(absl::Span<const int64_t> shape) const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError("view: negative dimension");
    if (__builtin_mul_overflow(n, d, &n)) {
      return absl::InvalidArgumentError("view: too many elements");
    }
  }
  if (n != numel()) {
    return absl::InvalidArgumentError(absl::StrCat("view: ", DebugString(), " has ", numel(),
                                                   " elements, [", absl::StrJoin(shape, ", "),
                                                   "] has ", n));
  }
  if (!IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("view of non-contiguous ", DebugString()));
  }
  Tensor t = *this;
  t.shape_.assign(shape.begin(), shape.end());
  t.strides_ = ContiguousStrides(shape);
  return t;
}

absl::StatusOr<Tensor> Tensor::Transpose(int64_t a, int64_t b) const {
  if (a < 0) a += dim();
  if (b < 0) b += dim();
  if (a < 0 || b < 0 || a >= dim() || b >= dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transpose: dimension out of range for ", DebugString()));
  }
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

absl::StatusOr<Tensor> Tensor::Select(int64_t d, int64_t index) const {
  if (d < 0) d += dim();
  if (d < 0 || d >= dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("select: dimension out of range for ", DebugString()));
  }
  if (index < 0) index += shape_[d];
  if (index < 0 || index >= shape_[d]) {
    return absl::InvalidArgumentError(
        absl::StrCat("select: index out of range for ", DebugString()));
  }
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

absl::StatusOr<Tensor> Tensor::Slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  if (d < 0) d += dim();
  if (d < 0 || d >= dim() || step <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice: bad dimension or step for ", DebugString()));
  }
  const int64_t size = shape_[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = (end - start + step - 1) / step;
  t.strides_[d] *= step;
  return t;
}

absl::StatusOr<Tensor> Tensor::AsStrided(absl::Span<const int64_t> shape,
                                         absl::Span<const int64_t> strides, int64_t offset) const {
  if (shape.size() != strides.size() || offset < 0) {
    return absl::InvalidArgumentError("as_strided: shape and strides differ in length");
  }
  int64_t last = offset;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0 || strides[i] < 0) {
      return absl::InvalidArgumentError("as_strided: negative size or stride");
    }
    if (shape[i] == 0) empty = true;
    int64_t span = 0;
    if (shape[i] > 0 && (__builtin_mul_overflow(shape[i] - 1, strides[i], &span) ||
                         __builtin_add_overflow(last, span, &last))) {
      return absl::InvalidArgumentError("as_strided: view past any storage");
    }
  }
  const int64_t capacity = storage_ == nullptr ? 0 : storage_->bytes() / DTypeSize(dtype_);
  if (!empty && last >= capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("as_strided: view past the end of the storage of ", DebugString()));
  }
  Tensor t = *this;
  t.shape_.assign(shape.begin(), shape.end());
  t.strides_.assign(strides.begin(), strides.end());
  t.offset_ = offset;
  return t;
}

namespace {
int64_t StorageIndex(const Tensor& t, int64_t i) {
  int64_t at = t.offset();
  if (t.numel() == 0) return at;  // no element: callers check numel first
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.shape()[d];
    at += (i % size) * t.strides()[d];
    i /= size;
  }
  return at;
}
}  // namespace

uint16_t FloatToBFloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float BFloat16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (u < 0x38800000u) {  // subnormal half (or zero): round the shifted mantissa
    if (u < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t mant = (u & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(u >> 23);  // to units of 2^-24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((u >> 13) - (112u << 10));
  const uint32_t rem = u & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    f = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

double GetElement(const Tensor& t, int64_t i) {
  const int64_t at = StorageIndex(t, i) - t.offset();
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data<float>()[at];
    case DType::kFloat64:
      return t.data<double>()[at];
    case DType::kFloat16:
      return HalfToFloat(t.data<uint16_t>()[at]);
    case DType::kBFloat16:
      return BFloat16ToFloat(t.data<uint16_t>()[at]);
    case DType::kInt64:
      return static_cast<double>(t.data<int64_t>()[at]);
    case DType::kInt32:
      return t.data<int32_t>()[at];
    case DType::kUInt8:
      return t.data<uint8_t>()[at];
    case DType::kBool:
      return t.data<uint8_t>()[at] != 0;
  }
  return 0;
}

void SetElement(Tensor& t, int64_t i, double v) {
  const int64_t at = StorageIndex(t, i) - t.offset();
  switch (t.dtype()) {
    case DType::kFloat32:
      t.data<float>()[at] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      t.data<double>()[at] = v;
      break;
    case DType::kFloat16:
      t.data<uint16_t>()[at] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      t.data<uint16_t>()[at] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DType::kInt64:
      t.data<int64_t>()[at] = static_cast<int64_t>(v);
      break;
    case DType::kInt32:
      t.data<int32_t>()[at] = static_cast<int32_t>(v);
      break;
    case DType::kUInt8:
      t.data<uint8_t>()[at] = static_cast<uint8_t>(v);
      break;
    case DType::kBool:
      t.data<uint8_t>()[at] = v != 0;
      break;
  }
}

namespace {

// dst = src elementwise for one element type of `sizeof(T)` bytes, any strides (shapes
// equal): an odometer over the outer dimensions and a strided loop over the last, a few ns
// an element where GetElement / SetElement take tens (the transposed gradients the
// backward hands on).
template <typename T>
void StridedCopy(const Tensor& src, Tensor& dst) {
  const std::vector<int64_t>& shape = src.shape();
  const int64_t d = static_cast<int64_t>(shape.size());
  const T* s = reinterpret_cast<const T*>(src.storage()->data()) + src.offset();
  T* t = reinterpret_cast<T*>(dst.storage()->data()) + dst.offset();
  if (d == 0) {
    *t = *s;
    return;
  }
  const int64_t inner = shape[d - 1], ss = src.strides()[d - 1], ts = dst.strides()[d - 1];
  if (d == 2 && ts == 1 && ss != 1) {
    // A transpose: in 32 x 32 tiles, so that both sides stay in cache.
    constexpr int64_t kTile = 32;
    const int64_t rows = shape[0], srs = src.strides()[0], trs = dst.strides()[0];
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
      for (int64_t c0 = 0; c0 < inner; c0 += kTile) {
        const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(inner, c0 + kTile);
        for (int64_t c = c0; c < c1; ++c) {
          for (int64_t r = r0; r < r1; ++r) t[r * trs + c] = s[r * srs + c * ss];
        }
      }
    }
    return;
  }
  std::vector<int64_t> index(d - 1, 0);
  int64_t outer = 1;
  for (int64_t k = 0; k + 1 < d; ++k) outer *= shape[k];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t sa = 0, ta = 0;
    for (int64_t k = 0; k + 1 < d; ++k) {
      sa += index[k] * src.strides()[k];
      ta += index[k] * dst.strides()[k];
    }
    for (int64_t i = 0; i < inner; ++i) t[ta + i * ts] = s[sa + i * ss];
    for (int64_t k = d - 2; k >= 0; --k) {
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
}

}  // namespace

absl::Status CopyConvert(const Tensor& src, Tensor& dst) {
  if (src.shape() != dst.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy ", src.DebugString(), " into ", dst.DebugString()));
  }
  const int64_t n = src.numel();
  if (n == 0) return absl::OkStatus();
  const bool contiguous = src.IsContiguous() && dst.IsContiguous();
  if (contiguous && src.dtype() == dst.dtype()) {
    std::memcpy(dst.storage()->data() + dst.offset() * DTypeSize(dst.dtype()),
                src.storage()->data() + src.offset() * DTypeSize(src.dtype()), src.nbytes());
    return absl::OkStatus();
  }
  if (contiguous) {
    auto read = [&](int64_t i) -> double {
      switch (src.dtype()) {
        case DType::kFloat32:
          return src.data<float>()[i];
        case DType::kFloat64:
          return src.data<double>()[i];
        case DType::kFloat16:
          return HalfToFloat(src.data<uint16_t>()[i]);
        case DType::kBFloat16:
          return BFloat16ToFloat(src.data<uint16_t>()[i]);
        case DType::kInt64:
          return static_cast<double>(src.data<int64_t>()[i]);
        case DType::kInt32:
          return src.data<int32_t>()[i];
        case DType::kUInt8:
          return src.data<uint8_t>()[i];
        case DType::kBool:
          return src.data<uint8_t>()[i] != 0;
      }
      return 0;
    };
    for (int64_t i = 0; i < n; ++i) {
      const double v = read(i);
      switch (dst.dtype()) {
        case DType::kFloat32:
          dst.data<float>()[i] = static_cast<float>(v);
          break;
        case DType::kFloat64:
          dst.data<double>()[i] = v;
          break;
        case DType::kFloat16:
          dst.data<uint16_t>()[i] = FloatToHalf(static_cast<float>(v));
          break;
        case DType::kBFloat16:
          dst.data<uint16_t>()[i] = FloatToBFloat16(static_cast<float>(v));
          break;
        case DType::kInt64:
          dst.data<int64_t>()[i] = static_cast<int64_t>(v);
          break;
        case DType::kInt32:
          dst.data<int32_t>()[i] = static_cast<int32_t>(v);
          break;
        case DType::kUInt8:
          dst.data<uint8_t>()[i] = static_cast<uint8_t>(v);
          break;
        case DType::kBool:
          dst.data<uint8_t>()[i] = v != 0;
          break;
      }
    }
    return absl::OkStatus();
  }
  if (src.dtype() == dst.dtype()) {
    switch (DTypeSize(src.dtype())) {
      case 1:
        StridedCopy<uint8_t>(src, dst);
        return absl::OkStatus();
      case 2:
        StridedCopy<uint16_t>(src, dst);
        return absl::OkStatus();
      case 4:
        StridedCopy<uint32_t>(src, dst);
        return absl::OkStatus();
      case 8:
        StridedCopy<uint64_t>(src, dst);
        return absl::OkStatus();
      default:
        break;
    }
  }
  for (int64_t i = 0; i < n; ++i) SetElement(dst, i, GetElement(src, i));
  return absl::OkStatus();
}

int64_t Tensor::IndexOf(absl::Span<const int64_t> index) const {
  int64_t at = offset_;
  for (size_t i = 0; i < index.size() && i < strides_.size(); ++i) at += index[i] * strides_[i];
  return at;
}

std::string Tensor::DebugString() const {
  std::string out = absl::StrCat(DTypeName(dtype_), "[", absl::StrJoin(shape_, ", "), "]");
  if (!IsContiguous()) absl::StrAppend(&out, " strides [", absl::StrJoin(strides_, ", "), "]");
  return out;
}

}  // namespace overlap
