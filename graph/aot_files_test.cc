#include "graph/aot_files.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "graph/json_writer.h"
#include "graph/models.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

std::string Write(const Graph& g, const std::string& name) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << WriteGraphJson(g);
  return path;
}

TEST(AotFilesTest, ReadsAPairAndRefusesTheForwardAsItsBackward) {
  ModelOptions mo;
  mo.style = ParamStyle::kLifted;
  absl::StatusOr<Graph> g = BuildModel("mlp", mo, Preset::kTiny);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AotPair> built = BuildAotPair(*g);
  ASSERT_TRUE(built.ok()) << built.status();
  const std::string f = Write(built->forward, "f.json"), b = Write(built->backward, "b.json");
  absl::StatusOr<AotPair> read = ReadAotPairFiles(f, b);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(WriteGraphJson(read->forward), WriteGraphJson(built->forward));
  EXPECT_EQ(WriteGraphJson(read->backward), WriteGraphJson(built->backward));
  absl::StatusOr<AotPair> same = ReadAotPairFiles(f, f);
  ASSERT_FALSE(same.ok());
  EXPECT_THAT(same.status().message(), ::testing::HasSubstr("is the forward graph itself"));
  absl::StatusOr<AotPair> missing = ReadAotPairFiles(f, f + ".nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), ::testing::HasSubstr(".nope"));
}

}  // namespace
}  // namespace overlap
