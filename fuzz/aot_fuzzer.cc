// Fuzz target: AOT pairs (graph/aot.h) of built-in model architectures at sizes the bytes
// choose: transformers (GPT-2 / LLaMA style, grouped KV heads, experts, tied embeddings,
// biases or not), MLPs and ResNets, with every loss and both dtypes. Input: byte 0 picks
// the family, byte 1 the loss, the rest the sizes (read cyclically; an empty rest gives the
// smallest model). Every model the builders accept must give a pair that satisfies
// graph/aot_invariants.h (verifies, passes the strict shape check, follows the calling
// convention). Any violation aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "graph/aot.h"
#include "graph/aot_invariants.h"
#include "graph/models.h"
#include "graph/verifier.h"

namespace overlap {
namespace {

void Fail(const std::string& what) {
  std::fprintf(stderr, "aot_fuzzer: %s\n", what.c_str());
  std::abort();
}

// Bytes read cyclically as small numbers.
class Knobs {
 public:
  Knobs(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // A number in [lo, hi].
  int64_t In(int64_t lo, int64_t hi) {
    const uint8_t b = size_ == 0 ? 0 : data_[i_++ % size_];
    return lo + b % (hi - lo + 1);
  }
  bool Bit() { return In(0, 1) == 1; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t i_ = 0;
};

absl::StatusOr<Graph> Model(int family, Knobs& k, const ModelOptions& o) {
  const std::string dtype = k.Bit() ? "bfloat16" : "float32";
  if (family == 0) {
    TransformerConfig c;
    c.name = "fuzz";
    c.layers = k.In(1, 2);
    c.kv_heads = k.In(1, 3);
    c.heads = c.kv_heads * k.In(1, 3);
    c.hidden = c.heads * k.In(1, 4);
    c.ffn = k.In(1, 12);
    c.vocab = k.In(2, 17);
    c.seq = k.In(1, 6);
    c.batch = k.In(1, 3);
    c.layer_norm = k.Bit();
    c.swiglu = k.Bit();
    c.bias = k.Bit();
    c.tied_embeddings = k.Bit();
    c.max_positions = k.Bit() ? c.seq + k.In(0, 3) : 0;
    if (k.In(0, 3) == 0) {
      c.experts = k.In(1, 4);
      c.top_k = k.In(1, c.experts);
    }
    c.dtype = dtype;
    return BuildTransformer(c, o);
  }
  if (family == 1) {
    MlpConfig c;
    c.widths.clear();
    for (int64_t i = 0, n = k.In(2, 5); i < n; ++i) c.widths.push_back(k.In(1, 12));
    c.batch = k.In(1, 4);
    c.dtype = dtype;
    return BuildMlp(c, o);
  }
  ResNetConfig c;
  for (int64_t& b : c.blocks) b = k.In(1, 2);
  c.width = k.In(1, 4);
  c.image = k.In(32, 40);
  c.classes = k.In(1, 5);
  c.batch = k.In(1, 2);
  c.dtype = dtype;
  return BuildResNet(c, o);
}

}  // namespace
}  // namespace overlap

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  if (size < 2) return 0;
  const int family = data[0] % 3;
  const LossKind losses[] = {LossKind::kDefault, LossKind::kCrossEntropy, LossKind::kMse,
                             LossKind::kNone};
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  o.loss = losses[data[1] % 4];
  Knobs k(data + 2, size - 2);
  absl::StatusOr<Graph> f = Model(family, k, o);
  if (!f.ok()) return 0;  // a configuration the builders refuse (they say why)
  if (!Verify(*f).ok()) Fail("the model does not verify: " + std::string(Verify(*f).message()));
  absl::StatusOr<AotPair> pair = BuildAotPair(*f);
  if (!pair.ok()) Fail("no AOT pair: " + std::string(pair.status().message()));
  if (absl::Status s = CheckAotPair(*f, *pair); !s.ok()) Fail(std::string(s.message()));
  return 0;
}
