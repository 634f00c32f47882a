#include "runtime/kernels/kernel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {
namespace {

std::string KindName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "a bool";
    case Value::Kind::kInt:
      return "an int";
    case Value::Kind::kDouble:
      return "a float";
    case Value::Kind::kString:
      return "a string";
    case Value::Kind::kRef:
      return "a tensor";
    case Value::Kind::kList:
      return "a list";
    case Value::Kind::kDict:
      return "a dict";
    case Value::Kind::kSlice:
      return "a slice";
  }
  return "?";
}

std::string ArgLabel(absl::string_view name) { return absl::StrCat("argument `", name, "`"); }

}  // namespace

KernelCall::KernelCall(const Node& node, Allocator& alloc,
                       std::function<const Tensor*(NodeId)> tensor_of, Pool output_pool,
                       const OpSchema* schema)
    : node_(node),
      alloc_(alloc),
      tensor_of_(std::move(tensor_of)),
      output_pool_(output_pool),
      schema_(schema != nullptr ? schema : FindOpSchema(node.target())) {
  if (schema_ != nullptr) bound_ = OpArgs::Bind(node, *schema_);
}

absl::Status KernelCall::CheckArgs() const {
  return bound_.has_value() ? bound_->status() : absl::OkStatus();
}

const Value* KernelCall::Arg(absl::string_view name) const {
  if (bound_.has_value()) return bound_->ok() ? (*bound_)->Get(name) : nullptr;
  for (const auto& [key, value] : node_.kwargs()) {  // an undeclared target: keywords only
    if (key == name) return &value;
  }
  return nullptr;
}

absl::Status KernelCall::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node_.name(), "' (", node_.target(), "): ", message));
}

absl::StatusOr<Tensor> KernelCall::TensorArg(absl::string_view name) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if (v == nullptr || !v->is_ref()) {
    return Error(absl::StrCat(ArgLabel(name), " should be a tensor, got ",
                              v == nullptr ? "nothing" : KindName(*v)));
  }
  const Tensor* t = tensor_of_(v->as_ref());
  if (t == nullptr || !t->defined()) {
    return Error(absl::StrCat(ArgLabel(name), ": its value is not available"));
  }
  return *t;
}

absl::StatusOr<std::optional<Tensor>> KernelCall::OptionalTensorArg(absl::string_view name) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if (v == nullptr || v->is_none()) return std::optional<Tensor>();
  absl::StatusOr<Tensor> t = TensorArg(name);
  if (!t.ok()) return t.status();
  return std::optional<Tensor>(*std::move(t));
}

absl::StatusOr<std::vector<Tensor>> KernelCall::TensorListArg(absl::string_view name) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if (v == nullptr || v->kind() != Value::Kind::kList) {
    return Error(absl::StrCat(ArgLabel(name), " should be a list of tensors, got ",
                              v == nullptr ? "nothing" : KindName(*v)));
  }
  std::vector<Tensor> out;
  for (const Value& item : v->items()) {
    const Tensor* t = item.is_ref() ? tensor_of_(item.as_ref()) : nullptr;
    if (t == nullptr || !t->defined()) {
      return Error(
          absl::StrCat(ArgLabel(name), ": item ", out.size(), " is not an available tensor"));
    }
    out.push_back(*t);
  }
  return out;
}

absl::StatusOr<std::vector<std::optional<Tensor>>> KernelCall::OptionalTensorListArg(
    absl::string_view name) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if (v == nullptr || v->kind() != Value::Kind::kList) {
    return Error(absl::StrCat(ArgLabel(name), " should be a list of tensors or None, got ",
                              v == nullptr ? "nothing" : KindName(*v)));
  }
  std::vector<std::optional<Tensor>> out;
  for (const Value& item : v->items()) {
    if (item.is_none()) {
      out.push_back(std::nullopt);
      continue;
    }
    const Tensor* t = item.is_ref() ? tensor_of_(item.as_ref()) : nullptr;
    if (t == nullptr || !t->defined()) {
      return Error(
          absl::StrCat(ArgLabel(name), ": item ", out.size(), " is not an available tensor"));
    }
    out.push_back(*t);
  }
  return out;
}

absl::StatusOr<int64_t> KernelCall::IntArg(absl::string_view name,
                                           std::optional<int64_t> fallback) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if ((v == nullptr || v->is_none()) && fallback.has_value()) return *fallback;
  if (v != nullptr && v->kind() == Value::Kind::kInt) return v->as_int();
  if (v != nullptr && v->kind() == Value::Kind::kBool) return v->as_bool() ? 1 : 0;
  return Error(absl::StrCat(ArgLabel(name), " should be an int, got ",
                            v == nullptr ? "nothing" : KindName(*v)));
}

absl::StatusOr<double> KernelCall::DoubleArg(absl::string_view name,
                                             std::optional<double> fallback) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if ((v == nullptr || v->is_none()) && fallback.has_value()) return *fallback;
  if (v != nullptr && v->kind() == Value::Kind::kDouble) return v->as_double();
  if (v != nullptr && v->kind() == Value::Kind::kInt) return static_cast<double>(v->as_int());
  if (v != nullptr && v->kind() == Value::Kind::kBool) return v->as_bool() ? 1.0 : 0.0;
  return Error(absl::StrCat(ArgLabel(name), " should be a number, got ",
                            v == nullptr ? "nothing" : KindName(*v)));
}

absl::StatusOr<bool> KernelCall::BoolArg(absl::string_view name,
                                         std::optional<bool> fallback) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if ((v == nullptr || v->is_none()) && fallback.has_value()) return *fallback;
  if (v != nullptr && v->kind() == Value::Kind::kBool) return v->as_bool();
  if (v != nullptr && v->kind() == Value::Kind::kInt) return v->as_int() != 0;
  return Error(absl::StrCat(ArgLabel(name), " should be a bool, got ",
                            v == nullptr ? "nothing" : KindName(*v)));
}

absl::StatusOr<std::vector<int64_t>> KernelCall::IntListArg(absl::string_view name) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if (v != nullptr && v->kind() == Value::Kind::kInt) return std::vector<int64_t>{v->as_int()};
  if (v == nullptr || v->kind() != Value::Kind::kList) {
    return Error(absl::StrCat(ArgLabel(name), " should be a list of ints, got ",
                              v == nullptr ? "nothing" : KindName(*v)));
  }
  std::vector<int64_t> out;
  for (const Value& item : v->items()) {
    if (item.kind() != Value::Kind::kInt) {
      return Error(absl::StrCat(ArgLabel(name), " should be a list of ints, item ", out.size(),
                                " is ", KindName(item)));
    }
    out.push_back(item.as_int());
  }
  return out;
}

absl::StatusOr<std::optional<std::vector<double>>> KernelCall::OptionalDoubleListArg(
    absl::string_view name) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if (v == nullptr || v->is_none()) return std::optional<std::vector<double>>();
  if (v->kind() != Value::Kind::kList) {
    return Error(absl::StrCat(ArgLabel(name), " should be a list of numbers, got ", KindName(*v)));
  }
  std::vector<double> out;
  for (const Value& item : v->items()) {
    if (item.kind() == Value::Kind::kDouble) {
      out.push_back(item.as_double());
    } else if (item.kind() == Value::Kind::kInt) {
      out.push_back(static_cast<double>(item.as_int()));
    } else {
      return Error(absl::StrCat(ArgLabel(name), " should be a list of numbers, item ", out.size(),
                                " is ", KindName(item)));
    }
  }
  return std::optional<std::vector<double>>(std::move(out));
}

absl::StatusOr<std::vector<bool>> KernelCall::BoolListArg(absl::string_view name,
                                                          std::vector<bool> fallback) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if (v == nullptr || v->is_none()) return fallback;
  if (v->kind() != Value::Kind::kList) {
    return Error(absl::StrCat(ArgLabel(name), " should be a list of bools, got ", KindName(*v)));
  }
  std::vector<bool> out;
  for (const Value& item : v->items()) {
    if (item.kind() != Value::Kind::kBool) {
      return Error(absl::StrCat(ArgLabel(name), " should be a list of bools"));
    }
    out.push_back(item.as_bool());
  }
  return out;
}

absl::StatusOr<std::string> KernelCall::StringArg(absl::string_view name,
                                                  std::optional<std::string> fallback) const {
  OVERLAP_RETURN_IF_ERROR(CheckArgs());
  const Value* v = Arg(name);
  if ((v == nullptr || v->is_none()) && fallback.has_value()) return *fallback;
  if (v != nullptr && v->kind() == Value::Kind::kString) return v->as_string();
  return Error(absl::StrCat(ArgLabel(name), " should be a string, got ",
                            v == nullptr ? "nothing" : KindName(*v)));
}

absl::StatusOr<Tensor> KernelCall::NewOutput(DType dtype, absl::Span<const int64_t> shape) {
  absl::StatusOr<Tensor> t = Tensor::Empty(alloc_, dtype, shape, output_pool_);
  if (!t.ok()) return Error(t.status().message());
  return t;
}

absl::StatusOr<Tensor> KernelCall::NewUninitializedOutput(DType dtype,
                                                          absl::Span<const int64_t> shape) {
  absl::StatusOr<Tensor> t = Tensor::Uninitialized(alloc_, dtype, shape, output_pool_);
  if (!t.ok()) return Error(t.status().message());
  return t;
}

absl::StatusOr<Tensor> KernelCall::NewScratch(DType dtype, absl::Span<const int64_t> shape) {
  absl::StatusOr<Tensor> t = Tensor::Empty(alloc_, dtype, shape, Pool::kScratch);
  if (!t.ok()) return Error(t.status().message());
  return t;
}

const Kernel* KernelRegistry::Find(absl::string_view target) const {
  auto it = kernels_.find(target);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::string KernelRegistry::KindOf(absl::string_view target) const {
  auto it = kinds_.find(target);
  return it == kinds_.end() ? "" : it->second;
}

const OpSchema* KernelRegistry::SchemaOf(absl::string_view target) const {
  if (const OpSchema* s = FindOpSchema(target); s != nullptr) return s;
  auto it = schemas_.find(target);
  return it == schemas_.end() ? nullptr : it->second;
}

std::vector<std::string> KernelRegistry::Targets() const {
  std::vector<std::string> out;
  for (const auto& [target, kernel] : kernels_) out.push_back(target);
  std::sort(out.begin(), out.end());
  return out;
}

const KernelRegistry& CpuKernels() {
  static const KernelRegistry* const kRegistry = [] {
    auto* r = new KernelRegistry;
    RegisterViewKernels(*r);
    RegisterElementwiseKernels(*r);
    RegisterReductionKernels(*r);
    RegisterIndexKernels(*r);
    RegisterNnKernels(*r);
    RegisterMaxReductionKernels(*r);
    RegisterChannelKernels(*r);
    RegisterScatterKernels(*r);
    RegisterPoolNdKernels(*r);
    RegisterFactoryKernels(*r);
    return r;
  }();
  return *kRegistry;
}

}  // namespace overlap
