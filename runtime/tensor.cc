#include "runtime/tensor.h"

#include <algorithm>
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

Storage::Storage(Allocator* owner, Pool pool, int64_t bytes)
    : owner_(owner), pool_(pool), bytes_(bytes) {}

Storage::~Storage() { owner_->Release(pool_, bytes_); }

absl::StatusOr<std::shared_ptr<Storage>> Allocator::Allocate(int64_t bytes, Pool pool) {
  if (bytes < 0) return absl::InvalidArgumentError("cannot allocate a negative byte count");
  std::shared_ptr<Storage> s(new Storage(this, pool, bytes));
  // Zeroed, and never an abort: an allocation the system refuses is an error value.
  s->data_.reset(new (std::nothrow) std::byte[std::max<int64_t>(bytes, 1)]());
  if (s->data_ == nullptr) {
    s->bytes_ = 0;  // nothing to uncount
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  const int p = static_cast<int>(pool);
  live_[p] += bytes;
  peak_[p] = std::max(peak_[p], live_[p]);
  return s;
}

void Allocator::ResetPeak() {
  peak_[0] = live_[0];
  peak_[1] = live_[1];
}

std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * std::max<int64_t>(shape[i + 1], 1);
  }
  return strides;
}

absl::StatusOr<Tensor> Tensor::Empty(Allocator& alloc, DType dtype, absl::Span<const int64_t> shape,
                                     Pool pool) {
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
  absl::StatusOr<std::shared_ptr<Storage>> storage = alloc.Allocate(bytes, pool);
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
    n *= d;
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
