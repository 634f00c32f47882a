#include "graph/dc_ops.h"

#include <string>

#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(DcOpsTest, HostTensorsAreOffloadCopiesAndPlaceholdersAReloadReads) {
  // Forward: x offloaded (h), waited on (o), h returned. Backward-like: s reloaded.
  const Graph g = ParseGraphParts(
      PlaceholderJson("x") + "," + PlaceholderJson("s") + "," + PlaceholderJson("t") + "," +
          CallJson("h", "dc.offload_tensor", R"("%x", 0, 0)") + "," +
          CallJson("o", "dc.wait_offload", R"("%h", 0, 0)") + "," +
          CallJson("d", "dc.reload_tensor", R"("%s", 1, 1)") + "," +
          CallJson("v", "dc.wait_reload", R"("%d", 1, 1)") + "," +
          CallJson("y", "aten.add.Tensor", R"("%v", "%t")") + "," + OutputJson(R"(["%y", "%h"])"),
      "");
  for (const std::string host : {"h", "o", "s"}) {
    EXPECT_TRUE(IsHostTensor(g, g.FindNode(host))) << host;
  }
  // The offloaded value itself, the reload's copy and its wait are device memory.
  for (const std::string device : {"x", "t", "d", "v", "y"}) {
    EXPECT_FALSE(IsHostTensor(g, g.FindNode(device))) << device;
  }
}

TEST(DcOpsTest, HostMemoryTargetsAreTheFourHostOps) {
  for (absl::string_view t :
       {kOffloadTarget, kReloadTarget, kWaitReloadTarget, kWaitOffloadTarget}) {
    EXPECT_TRUE(IsHostMemoryTarget(t)) << t;
  }
  for (absl::string_view t :
       {kAllgatherTarget, kWaitTarget, kReleaseTarget, kReduceTarget, kWaitReduceTarget,
        absl::string_view("dc.offload_param"), absl::string_view("aten.add.Tensor")}) {
    EXPECT_FALSE(IsHostMemoryTarget(t)) << t;
  }
}

}  // namespace
}  // namespace overlap
