// overlap gen: a built-in model's graph in the interchange format.
#include "graph/json_writer.h"
#include "tools/commands.h"
#include "tools/shared_flags.h"

namespace overlap {
namespace {

constexpr FlagSpec kFlags[] = {
    {"output", 'o', "FILE", "write to FILE (default: stdout)", true},
    {"backward", 0, "",
     "the model's AOT backward graph instead (implies --lifted; graph/aot.h):\n"
     "primals it reads, saved activations and tangents in, one gradient\n"
     "(meta.grad_of) or null per forward placeholder out; random graphs get\n"
     "a structural backward (graph/structural_backward.h)"},
};

int Run(Invocation& in) {
  absl::StatusOr<Graph> g =
      BuildModelFromFlags(in, in.positional()[0],
                          in.Switch("backward") ? ModelGraph::kBackward : ModelGraph::kAsFlagged);
  if (in.has_usage_error()) return in.UsageError();
  if (!g.ok()) return in.BadInput(g.status());
  const std::string path = in.Path("output").value_or("-");
  absl::Status s = WriteGraphFile(in, path, *g);
  return s.ok() ? kExitOk : in.BadInput(s);
}

}  // namespace

const CommandSpec& GenCommand() {
  static const CommandSpec spec = [] {
    CommandSpec s;
    s.name = "gen";
    s.synopsis = "<model> [options] [-o FILE]";
    s.summary = "write a built-in model's graph (JSON) to FILE or stdout";
    s.description =
        "Writes a graph of a built-in model in the interchange format (docs/format.md):\n"
        "the forward as torch.fx traces it (parameters owned by modules, for DDP), or\n"
        "with --lifted / --backward the forward / backward of its AOT pair\n"
        "(graph/aot.h: the forward returns the loss, then the tensors the backward\n"
        "saves; the backward takes the primals it reads, the saved tensors and the\n"
        "tangents, and returns one gradient or null per forward placeholder).\n\n"
        "models: mlp, gpt2, llama-7b, llama-70b, resnet18, moe, random\n";
    s.flags = {kFlags, ModelFlags(), DeviceFlags()};
    s.min_positional = 1;
    s.max_positional = 1;
    s.positional_name = "model name";
    s.run = &Run;
    return s;
  }();
  return spec;
}

}  // namespace overlap
