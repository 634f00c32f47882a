#include "graph/saved_rewrites.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/aot.h"
#include "graph/aot_invariants.h"
#include "graph/dc_ops.h"
#include "graph/models.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

// A built-in model's tiny AOT pair; records a failure and returns an empty pair on error.
AotPair TinyPair(const std::string& name, Graph* forward_in = nullptr) {
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> g = BuildModel(name, o, Preset::kTiny);
  EXPECT_TRUE(g.ok()) << name;
  if (!g.ok()) return AotPair();
  absl::StatusOr<AotPair> pair = BuildAotPair(*g);
  EXPECT_TRUE(pair.ok()) << pair.status();
  if (forward_in != nullptr) *forward_in = std::move(*g);
  return pair.ok() ? std::move(*pair) : AotPair();
}

// Recomputing every candidate of every built-in model's pair keeps the calling convention
// (with num_saved and saved_bytes updated by its rule) and leaves a copy of each forward node
// in the backward that reads only what the backward holds or other copies.
TEST(SavedRewritesTest, RecomputedSavedTensorsKeepTheConvention) {
  int64_t total = 0;
  for (const std::string& name : ModelNames()) {
    SCOPED_TRACE(name);
    Graph f;
    AotPair p = TinyPair(name, &f);
    AotPair* pair = &p;
    ASSERT_GT(pair->forward.size(), 0);
    const std::vector<RecomputeCandidate> candidates =
        RecomputeCandidates(pair->forward, pair->backward);
    std::vector<std::string> names;
    for (const RecomputeCandidate& c : candidates) names.push_back(c.name);
    absl::StatusOr<int64_t> done = RecomputeSaved(&pair->forward, &pair->backward, names);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(*done > 0, !names.empty());
    EXPECT_LE(*done, static_cast<int64_t>(names.size()));
    total += *done;
    // num_saved and saved_bytes by the convention's rule: the values past the outputs, their
    // distinct storages.
    const std::vector<Value>& rets = pair->forward.node(pair->forward.last()).args()[0].items();
    pair->num_saved = static_cast<int64_t>(rets.size()) - pair->num_outputs;
    absl::flat_hash_set<NodeId> bases;
    pair->saved_bytes = 0;
    for (size_t i = pair->num_outputs; i < rets.size(); ++i) {
      NodeId base = rets[i].as_ref();
      while (IsView(pair->forward.node(base))) base = pair->forward.node(base).inputs()[0];
      if (bases.insert(base).second) {
        pair->saved_bytes += pair->forward.node(base).meta().tensor_size;
      }
    }
    absl::Status s = CheckAotPair(f, *pair);
    EXPECT_TRUE(s.ok()) << s;
    int64_t copies = 0;
    for (NodeId id : pair->backward.order()) {
      const Node& n = pair->backward.node(id);
      if (!absl::StrContains(n.name(), "__recomputed")) continue;
      ++copies;
      EXPECT_FALSE(absl::StartsWith(n.target(), "dc.")) << n.name();
      for (NodeId in : n.inputs()) {  // what the backward holds, or copies made for it
        const Node& x = pair->backward.node(in);
        EXPECT_TRUE(x.op() == Op::kPlaceholder || absl::StrContains(x.name(), "__recomputed"))
            << n.name();
      }
    }
    EXPECT_GE(copies, *done);
    // Applying them again changes nothing: they are no longer saved.
    absl::StatusOr<int64_t> again = RecomputeSaved(&pair->forward, &pair->backward, names);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, 0);
  }
  EXPECT_GT(total, 10);
}

// Offloading every candidate of every built-in model's pair: each saved value the backward
// read now arrives through dc.offload_tensor -> host placeholder -> dc.reload_tensor ->
// dc.wait_reload under the names and ids graph/saved_rewrites.h gives, both graphs verify,
// and nothing is left to offload.
TEST(SavedRewritesTest, OffloadedSavedTensorsTravelThroughTheHost) {
  int64_t total = 0;
  for (const std::string& name : ModelNames()) {
    SCOPED_TRACE(name);
    AotPair pair = TinyPair(name);
    Graph& f = pair.forward;
    Graph& b = pair.backward;
    ASSERT_GT(f.size(), 0);
    std::vector<std::string> names;
    for (const OffloadCandidate& c : OffloadCandidates(f, b)) {
      EXPECT_GT(c.bytes, 0) << c.name;
      EXPECT_GT(c.copy_bytes, 0) << c.name;
      names.push_back(c.name);
    }
    absl::StatusOr<int64_t> done = OffloadSaved(&f, &b, names);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(*done, static_cast<int64_t>(names.size()));
    total += *done;
    ASSERT_TRUE(Verify(f).ok()) << Verify(f);
    ASSERT_TRUE(Verify(b).ok()) << Verify(b);
    // Each offloaded value: its copy in the forward, returned in its place, and waited on.
    absl::flat_hash_set<int64_t> ids;
    int64_t offloads = 0;
    for (NodeId id : f.order()) {
      const Node& h = f.node(id);
      if (h.target() != kOffloadTarget) continue;
      ++offloads;
      ASSERT_EQ(h.args().size(), 3u);
      const std::string value = f.node(h.inputs()[0]).name();
      EXPECT_EQ(h.name(), absl::StrCat(value, "__host"));
      EXPECT_EQ(h.args()[kGraphIdArg].as_int(), 0);
      const int64_t ds = h.args()[kDsIdArg].as_int();
      EXPECT_TRUE(ids.insert(ds).second) << "id " << ds << " twice";
      EXPECT_TRUE(IsHostTensor(f, id));
      const NodeId wait = f.FindNode(absl::StrCat(value, "__offloaded"));
      ASSERT_NE(wait, kNoNode);
      EXPECT_EQ(f.node(wait).target(), kWaitOffloadTarget);
      ASSERT_EQ(f.node(wait).inputs().size(), 1u);
      EXPECT_EQ(f.node(wait).inputs()[0], id);
      // The backward's placeholder is the host copy; only its reload reads it, and only the
      // reload's wait reads the reload.
      const NodeId p = b.FindNode(h.name());
      ASSERT_NE(p, kNoNode);
      EXPECT_EQ(b.node(p).op(), Op::kPlaceholder);
      EXPECT_EQ(b.FindNode(value), kNoNode);
      ASSERT_EQ(b.node(p).users().size(), 1u);
      const Node& r = b.node(b.node(p).users()[0]);
      EXPECT_EQ(r.name(), absl::StrCat(value, "__reload"));
      EXPECT_EQ(r.target(), kReloadTarget);
      EXPECT_EQ(r.args()[kGraphIdArg].as_int(), 1);
      EXPECT_EQ(r.args()[kDsIdArg].as_int(), ds);
      ASSERT_EQ(r.users().size(), 1u);
      const Node& w = b.node(r.users()[0]);
      EXPECT_EQ(w.name(), absl::StrCat(value, "__reloaded"));
      EXPECT_EQ(w.target(), kWaitReloadTarget);
      EXPECT_EQ(w.args()[kDsIdArg].as_int(), ds);
    }
    EXPECT_GE(offloads, *done);
    EXPECT_TRUE(OffloadCandidates(f, b).empty());
    absl::StatusOr<int64_t> again = OffloadSaved(&f, &b, names);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, 0);
  }
  EXPECT_GT(total, 10);
}

// Names that are not saved values, or whose group cannot be recomputed, leave both graphs as
// they are.
TEST(SavedRewritesTest, NamesThatAreNoCandidateAreSkipped) {
  AotPair pair = TinyPair("mlp");
  ASSERT_GT(pair.forward.size(), 0);
  const int64_t f_size = pair.forward.size(), b_size = pair.backward.size();
  const std::vector<std::string> names = {"no_such_node", "tangents_1"};
  absl::StatusOr<int64_t> r = RecomputeSaved(&pair.forward, &pair.backward, names);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 0);
  absl::StatusOr<int64_t> o = OffloadSaved(&pair.forward, &pair.backward, names);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o, 0);
  EXPECT_EQ(pair.forward.size(), f_size);
  EXPECT_EQ(pair.backward.size(), b_size);
}

}  // namespace
}  // namespace overlap
