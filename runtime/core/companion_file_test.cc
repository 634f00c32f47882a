#include "runtime/core/companion_file.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(CompanionFileTest, TheVariableAloneWinsElseBesideTheExecutableFirst) {
  setenv("OVERLAP_TEST_COMPANION", "/x/y.so", 1);
  EXPECT_EQ(CompanionFileCandidates("OVERLAP_TEST_COMPANION", "y.so", "tools"),
            std::vector<std::string>{"/x/y.so"});
  unsetenv("OVERLAP_TEST_COMPANION");
  const std::vector<std::string> paths =
      CompanionFileCandidates("OVERLAP_TEST_COMPANION", "y.so", "tools");
  ASSERT_GE(paths.size(), 2u);
  EXPECT_TRUE(absl::EndsWith(paths[0], "/y.so")) << paths[0];
  EXPECT_FALSE(absl::StrContains(paths[0], "runfiles")) << "beside the executable first";
  for (size_t i = 1; i < paths.size(); ++i) {
    EXPECT_TRUE(absl::EndsWith(paths[i], "/overlap/tools/y.so")) << paths[i];
  }
}

}  // namespace
}  // namespace overlap
