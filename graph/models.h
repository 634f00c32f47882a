// Built-in models: realistic forward graphs with exact parameter tables.
//
// Each builder emits the graph torch.fx (module style) or AOTAutograd (lifted style) would
// give for the model, with ATen-style targets (docs/ops.md lists them), real parameter
// shapes, sizes and dtypes, and per-node metadata: shape, dtype, tensor_size (bytes) and
// device_time from the roofline CostModel (cost_model.h).
//
//   module style: parameters are owned by call_module nodes (Linear, LayerNorm, ...), as
//                 torch.fx.symbolic_trace shows them to DDPOptimizer;
//   lifted style: each parameter is a placeholder with meta.param, used by call_function
//                 ATen ops (t + addmm, native_layer_norm, embedding, ...), as ZeRO-3 and AOT
//                 graphs have them. Tied weights share one placeholder.
//
//   absl::StatusOr<Graph> g = BuildModel("llama-7b", ModelOptions{});
//
// Parameter counts (unique storages) are exact: gpt2 124,439,808; llama-7b 6,738,415,616;
// llama-70b 68,976,648,192; resnet18 11,689,512. Cost: O(nodes) time and memory.
#ifndef OVERLAP_GRAPH_MODELS_H_
#define OVERLAP_GRAPH_MODELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "graph/cost_model.h"
#include "graph/graph.h"

namespace overlap {

enum class ParamStyle { kModule, kLifted };

// The loss a model's forward graph ends in. With a loss, the graph takes a targets
// placeholder (`labels`, int64 class indices, for cross-entropy; `targets`, like the output,
// for MSE) and returns the scalar loss (mean reduction) alone; without one it returns the
// model's output. Cross-entropy is written as AOTAutograd decomposes F.cross_entropy:
// aten._log_softmax over the classes, then aten.nll_loss_forward (ignore_index -100), the
// logits viewed as [N, classes] first; MSE as aten.mse_loss. Both parameter styles use
// these ATen ops (docs/ops.md).
enum class LossKind {
  kDefault,  // cross-entropy for the language models and resnet18, MSE for mlp
  kNone,
  kCrossEntropy,
  kMse,
};

// "cross_entropy", "mse", "none" (and "default"); InvalidArgument listing them otherwise.
absl::StatusOr<LossKind> ParseLossKind(absl::string_view name);
absl::string_view LossKindName(LossKind kind);

struct ModelOptions {
  ParamStyle style = ParamStyle::kModule;
  DeviceSpec device;
  LossKind loss = LossKind::kDefault;
  // BuildModel only: > 0 replaces the preset's batch (data-parallel ranks each build the
  // model at their share of the global batch).
  int64_t batch = 0;
  // BuildModel only: > 0 replaces the preset's layer count (transformers; mlp: its linear
  // layers) and mlp's hidden width (ResizeMlp); InvalidArgument for a model without them.
  int64_t layers = 0, width = 0;
};

// A decoder-only transformer (GPT-2, LLaMA, and a mixture-of-experts variant).
struct TransformerConfig {
  std::string name;
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t kv_heads = 12;  // < heads: grouped-query attention
  int64_t ffn = 3072;     // feed-forward width (per expert for MoE)
  int64_t vocab = 50257;
  int64_t seq = 1024;
  int64_t batch = 8;
  int64_t max_positions = 0;  // > 0: learned position embeddings (GPT-2)
  bool layer_norm = true;     // false: RMSNorm (LLaMA)
  bool swiglu = false;        // gated SiLU MLP (LLaMA) instead of GELU
  bool bias = true;           // biases in linear layers
  bool tied_embeddings = false;
  int64_t experts = 0;  // > 0: every layer's MLP is a mixture of experts
  int64_t top_k = 0;    // experts per token
  std::string dtype = "float32";
};

// Preset sizes. kDefault is the real model; kTiny keeps its structure (norms, activations,
// attention with grouped KV heads where the model has them, experts, tied weights) at sizes
// whose forward and backward run in milliseconds on a CPU, all in float32: what the executor
// and the PyTorch comparisons run.
enum class Preset { kDefault, kTiny };
// "default" or "tiny"; InvalidArgument listing them otherwise.
absl::StatusOr<Preset> ParsePreset(absl::string_view name);

// Presets. gpt2: 12 x 768, 12 heads, vocab 50257, fp32, tied lm_head, batch 8 x 1024.
// llama-7b: 32 x 4096, 32 heads, ffn 11008, bf16, batch 1 x 4096. llama-70b: 80 x 8192,
// 64 heads with 8 KV heads, ffn 28672, bf16, batch 1 x 4096. moe: 8 x 2048, 16 heads,
// 16 experts (ffn 1408) with top-2 routing, bf16, batch 4 x 2048.
// Tiny: 2 layers x 32 hidden, 4 heads (llama-70b: 2 KV heads), seq 16, batch 2, vocab 101
// (gpt2: 97, 16 positions); moe: 4 experts of ffn 24, top-2, seq 8.
TransformerConfig Gpt2Config(Preset preset = Preset::kDefault);
TransformerConfig Llama7bConfig(Preset preset = Preset::kDefault);
TransformerConfig Llama70bConfig(Preset preset = Preset::kDefault);
TransformerConfig MoeConfig(Preset preset = Preset::kDefault);

// The parameter count (elements, tied storage once) a config implies; for tests and docs.
int64_t TransformerParamCount(const TransformerConfig& c);

// Fails (InvalidArgument, naming the field) on sizes <= 0, heads not dividing hidden, kv
// heads not dividing heads (or differing from them in GPT-2 style, max_positions > 0, whose
// QKV projection is fused), top_k outside [1, experts], or sizes whose products overflow.
absl::StatusOr<Graph> BuildTransformer(const TransformerConfig& c, const ModelOptions& o);

// A multilayer perceptron with ReLUs, modules named net.0, net.2, ... as nn.Sequential names
// them. Default widths are the DDPOptimizer test model: 10 -> 5000 -> 5000 -> 5000 -> 5.
struct MlpConfig {
  std::vector<int64_t> widths = {10, 5000, 5000, 5000, 5};
  int64_t batch = 20;
  std::string dtype = "float32";
};
// Tiny: 8 -> 16 -> 16 -> 4, batch 4.
MlpConfig MlpPreset(Preset preset);
// `c` with `layers` linear layers (0: as many as it has) whose hidden widths are `width`
// (0: its middle width), its input and output widths kept: the deep chains of
// `gen mlp --layers L --width W`. O(layers).
MlpConfig ResizeMlp(const MlpConfig& c, int64_t layers, int64_t width);
absl::StatusOr<Graph> BuildMlp(const MlpConfig& c, const ModelOptions& o);

// torchvision's ResNet with BasicBlocks; blocks {2,2,2,2} is ResNet-18.
struct ResNetConfig {
  std::vector<int64_t> blocks = {2, 2, 2, 2};
  int64_t batch = 32;
  int64_t image = 224;
  int64_t classes = 1000;
  int64_t width = 64;  // the stem's channels; stage s has width << s
  std::string dtype = "float32";
};
// Tiny: ResNet-18's blocks at width 8, 32 x 32 images, 10 classes, batch 2.
ResNetConfig ResNetPreset(Preset preset);
absl::StatusOr<Graph> BuildResNet(const ResNetConfig& c, const ModelOptions& o);

// The CLI's model names: mlp, gpt2, llama-7b, llama-70b, resnet18, moe.
const std::vector<std::string>& ModelNames();
inline constexpr absl::string_view kDefaultModel = "gpt2";

// Builds a model by name at a preset's sizes. NotFound for an unknown name (listing the
// names).
absl::StatusOr<Graph> BuildModel(absl::string_view name, const ModelOptions& o,
                                 Preset preset = Preset::kDefault);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_MODELS_H_
