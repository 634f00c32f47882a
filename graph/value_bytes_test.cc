#include "graph/value_bytes.h"

#include <string>

#include "gmock/gmock.h"
#include "graph/errors.h"
#include "graph/test_graphs.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

// One placeholder "x" with the given meta object text, read by relu "y".
Graph WithMeta(const std::string& meta) {
  return ParseGraphParts(
      R"({"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": )" + meta + "}," +
          CallJson("y", "aten.relu.default", R"("%x")") + "," + OutputJson(R"("%y")"),
      "");
}

int64_t BytesOfX(const std::string& meta) {
  const Graph g = WithMeta(meta);
  absl::StatusOr<int64_t> bytes = ValueBytes(g.node(g.FindNode("x")));
  EXPECT_TRUE(bytes.ok()) << meta << ": " << bytes.status();
  return bytes.value_or(-1);
}

TEST(ValueBytesTest, TensorSizeWhenGivenElseShapeTimesDtype) {
  EXPECT_EQ(BytesOfX(R"({"shape": [2, 3], "dtype": "float32", "tensor_size": 7})"), 7);
  EXPECT_EQ(BytesOfX(R"({"shape": [2, 3], "dtype": "float32"})"), 24);
  EXPECT_EQ(BytesOfX(R"({"shape": [2, 3], "dtype": "bfloat16"})"), 12);
  EXPECT_EQ(BytesOfX(R"({"shape": [], "dtype": "int64"})"), 8);  // a scalar tensor
  EXPECT_EQ(BytesOfX(R"({"shape": [2, 3]})"), 24);               // float32's 4 bytes
  EXPECT_EQ(BytesOfX(R"({"shape": [4611686018427387904, 0], "dtype": "float64"})"), 0);
  EXPECT_EQ(BytesOfX(R"({"dtype": "float32"})"), 0);  // nothing says how many elements
}

TEST(ValueBytesTest, ATupleIsTheSumOfItsDefinedElements) {
  EXPECT_EQ(BytesOfX(R"({"shapes": [[2, 2], null, [3]], "dtypes": ["float16", null, "int32"]})"),
            8 + 12);
  EXPECT_EQ(BytesOfX(R"({"shapes": [[2], [3]], "dtype": "float64"})"), 40);
}

TEST(ValueBytesTest, TheOutputNodeTakesNothing) {
  const Graph g = WithMeta(R"({"shape": [2], "dtype": "float32"})");
  EXPECT_EQ(*ValueBytes(g.node(g.last())), 0);
}

TEST(ValueBytesTest, AShapeBeyond64BitsOrAnUnknownDtypeIsAnErrorNamingTheNode) {
  Graph g = WithMeta(R"({"shape": [2], "dtype": "float32"})");
  NodeMeta& m = g.mutable_node(g.FindNode("x")).mutable_meta();
  for (const Shape& shape : {Shape{int64_t{1} << 40, int64_t{1} << 40}, Shape{int64_t{1} << 61, 4},
                             Shape{int64_t{1} << 62, 2, 0 + 1}}) {
    m.set_shape(shape);
    absl::StatusOr<int64_t> bytes = ValueBytes(g.node(g.FindNode("x")));
    EXPECT_TRUE(IsBadInput(bytes.status())) << bytes.status();
    EXPECT_THAT(std::string(bytes.status().message()),
                HasSubstr("node \"x\": the bytes of [" + std::to_string(shape[0])));
    EXPECT_THAT(std::string(bytes.status().message()), HasSubstr("overflow 64 bits"));
    EXPECT_EQ(VerifiedValueBytes(g.node(g.FindNode("x"))), 0);
  }
  m.set_shape({2});
  m.set_dtype("float33");
  absl::StatusOr<int64_t> bytes = ValueBytes(g.node(g.FindNode("x")));
  EXPECT_TRUE(IsBadInput(bytes.status()));
  EXPECT_THAT(std::string(bytes.status().message()),
              HasSubstr("node \"x\": unknown dtype \"float33\""));
  m.set_tensor_size(8);  // a stated size needs no dtype
  EXPECT_EQ(*ValueBytes(g.node(g.FindNode("x"))), 8);
}

TEST(ValueBytesTest, TheReaderRefusesAGraphWhoseValueSizesOverflow) {
  absl::StatusOr<Graph> g = GraphFromParts(
      R"({"name": "x", "op": "placeholder", "target": "x", "args": [],
          "meta": {"shape": [1099511627776, 1099511627776], "dtype": "float32"}},)" +
          OutputJson(R"("%x")"),
      "");
  EXPECT_TRUE(IsBadInput(g.status()));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("node \"x\": the bytes of"));
  // Two values that fit alone but not together.
  g = GraphFromParts(
      R"({"name": "x", "op": "placeholder", "target": "x", "args": [],
          "meta": {"shape": [1152921504606846976], "dtype": "float32"}},
         {"name": "y", "op": "placeholder", "target": "y", "args": [],
          "meta": {"shape": [1152921504606846976], "dtype": "float32"}},)" +
          OutputJson(R"(["%x", "%y"])"),
      "");
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("node \"y\": the sum of meta.tensor_size over the graph overflows"));
}

}  // namespace
}  // namespace overlap
