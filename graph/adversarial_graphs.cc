#include "graph/adversarial_graphs.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

constexpr int64_t kParamBytes = 64 << 10;

NodeId AddLiftedParam(Graph& g, int64_t i) {
  const std::string name = absl::StrCat("p_", i);
  const NodeId id = *g.AddNode(Op::kPlaceholder, name, name);
  NodeMeta& m = g.mutable_node(id).mutable_meta();
  m.set_param(absl::StrCat("w", i));
  m.set_tensor_size(kParamBytes);
  overlap::Param p;
  p.name = absl::StrCat("w", i);
  p.owner = name;
  p.bytes = kParamBytes;
  (void)g.AddParam(p);
  return id;
}

NodeId Matmul(Graph& g, NodeId a, NodeId b) {
  const NodeId id = *g.AddNode(Op::kCallFunction, g.UniqueName("mm"), "aten.mm.default",
                               {Value::Ref(a), Value::Ref(b)});
  NodeMeta& m = g.mutable_node(id).mutable_meta();
  m.set_tensor_size(4096);
  m.set_device_time(1e-5);
  return id;
}

}  // namespace

Graph WideOutputGraph(int64_t params, int64_t uses_per_param) {
  Graph g;
  const NodeId x = *g.AddNode(Op::kPlaceholder, "x", "x");
  std::vector<NodeId> ps;
  for (int64_t i = 0; i < params; ++i) ps.push_back(AddLiftedParam(g, i));
  std::vector<Value> returned;
  for (NodeId p : ps) {
    for (int64_t u = 0; u < uses_per_param; ++u) returned.push_back(Value::Ref(Matmul(g, x, p)));
  }
  (void)g.AddNode(Op::kOutput, "output", "output", {Value::List(std::move(returned))});
  return g;
}

Graph MatmulChainGraph(int64_t links) {
  Graph g;
  NodeId h = *g.AddNode(Op::kPlaceholder, "x", "x");
  std::vector<NodeId> ps;
  for (int64_t i = 0; i < links; ++i) ps.push_back(AddLiftedParam(g, i));
  for (NodeId p : ps) h = Matmul(g, h, p);
  (void)g.AddNode(Op::kOutput, "output", "output", {Value::Ref(h)});
  return g;
}

}  // namespace overlap
