#include "runtime/train/synthetic.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/shape_rules.h"
#include "graph/status_macros.h"

namespace overlap {

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }

int64_t Rng::Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }

double Rng::Normal() {
  const double u1 = 1.0 - Uniform(), u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

bool IsParameterPlaceholder(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  return n.op() == Op::kPlaceholder && (n.meta().has_param || !g.ParamsOwnedBy(n.name()).empty());
}

namespace {

// The first dimension of a stated shape, -1 when unknown.
int64_t Dim(const Node& n, int64_t d) {
  const std::vector<TensorType> types = StatedTypes(n);
  if (types.empty()) return -1;
  const Shape& s = types[0].shape;
  if (d < 0) d += static_cast<int64_t>(s.size());
  return d >= 0 && d < static_cast<int64_t>(s.size()) ? s[d] : -1;
}

int64_t BoundThrough(const Graph& g, NodeId id, int depth) {
  if (depth > 8) return -1;
  for (NodeId u : g.node(id).users()) {
    const Node& user = g.node(u);
    const std::string& t = user.target();
    const std::vector<Value>& a = user.args();
    auto arg_is = [&](size_t i) { return a.size() > i && a[i].is_ref() && a[i].as_ref() == id; };
    if (t == "aten.embedding.default" && arg_is(1) && a[0].is_ref()) {
      return Dim(g.node(a[0].as_ref()), 0);
    }
    if ((t == "aten.nll_loss_forward.default" && arg_is(1)) && a[0].is_ref()) {
      return Dim(g.node(a[0].as_ref()), -1);
    }
    if (SharesInputStorage(user) && !user.inputs().empty() && user.inputs()[0] == id) {
      const int64_t b = BoundThrough(g, u, depth + 1);
      if (b > 0) return b;
    }
  }
  return -1;
}

// A batch norm's running statistic bound by an exporter's meta.buffer ("bn1.running_var"):
// the value PyTorch starts it at (variance 1, mean 0). Drawn from a normal, a variance
// is negative half the time and evaluation-mode batch norm takes its square root: NaN.
std::optional<double> BatchNormStatistic(const Node& placeholder) {
  for (const auto& [key, value] : placeholder.meta().extra) {
    if (key != "buffer") continue;
    if (absl::EndsWith(value, "running_var\"")) return 1.0;
    if (absl::EndsWith(value, "running_mean\"")) return 0.0;
  }
  return std::nullopt;
}

}  // namespace

int64_t IndexBound(const Graph& g, NodeId placeholder) {
  const int64_t b = BoundThrough(g, placeholder, 0);
  return b > 0 ? b : 2;
}

absl::StatusOr<TensorMap> SeededInputs(const Graph& g, uint64_t seed, Allocator& alloc,
                                       const SeededInputsOptions& options) {
  TensorMap out;
  int64_t k = 0;
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    ++k;
    if (!(IsParameterPlaceholder(g, id) ? options.parameters : options.data)) continue;
    if (options.skip.contains(n.name())) continue;
    // A tensor constant's value is data the exporter wrote (constant/<name>), never drawn:
    // left out, its placeholder is a missing input that names the key.
    if (std::any_of(n.meta().extra.begin(), n.meta().extra.end(),
                    [](const auto& kv) { return kv.first == "constant"; })) {
      continue;
    }
    const std::vector<TensorType> types = StatedTypes(n);
    if (types.empty() || types[0].dtype.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("placeholder '", n.name(), "' has no shape or dtype in meta"));
    }
    absl::StatusOr<DType> dtype = ParseDType(types[0].dtype);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("placeholder '", n.name(), "': ", dtype.status().message()));
    }
    const std::vector<int64_t> shape(types[0].shape.begin(), types[0].shape.end());
    OVERLAP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(alloc, *dtype, shape));
    // One stream per placeholder (by position), so adding one does not reshuffle others.
    Rng rng(seed * 1000003 + k);
    const int64_t numel = t.numel();
    if (!IsFloatingPoint(*dtype)) {
      const int64_t bound = IndexBound(g, id);
      for (int64_t i = 0; i < numel; ++i) SetElement(t, i, static_cast<double>(rng.Below(bound)));
    } else if (IsParameterPlaceholder(g, id)) {
      const std::string name = n.meta().has_param ? n.meta().param : n.name();
      if (shape.size() >= 2) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(
                                       std::max<int64_t>(shape[0] > 0 ? numel / shape[0] : 1, 1)));
        for (int64_t i = 0; i < numel; ++i) SetElement(t, i, (2 * rng.Uniform() - 1) * bound);
      } else {
        const double v = absl::StrContains(name, "bias") ? 0.0 : 1.0;
        for (int64_t i = 0; i < numel; ++i) SetElement(t, i, v);
      }
    } else if (const std::optional<double> v = BatchNormStatistic(n)) {
      for (int64_t i = 0; i < numel; ++i) SetElement(t, i, *v);
    } else {
      for (int64_t i = 0; i < numel; ++i) SetElement(t, i, rng.Normal());
    }
    out[n.name()] = std::move(t);
  }
  return out;
}

}  // namespace overlap
