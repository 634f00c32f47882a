#include "graph/op_schema.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph/shape_rules.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

TEST(OpSchemaTest, EveryDeclarationParses) {
  ASSERT_TRUE(VerifyOpSchemaTable().ok()) << VerifyOpSchemaTable();
  EXPECT_GE(OpSchemas().size(), 99u);
}

TEST(OpSchemaTest, ParsesPyTorchsForm) {
  const OpSchema* s = FindOpSchema("aten.addmm.default");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->args.size(), 5u);
  EXPECT_EQ(s->Position("mat1"), 1);
  EXPECT_TRUE(s->arg(s->Position("beta")).keyword_only);
  EXPECT_EQ(s->arg(s->Position("alpha")).default_value->as_int(), 1);
  EXPECT_EQ(s->ViewOf(), -1);
  EXPECT_EQ(s->results.size(), 1u);

  const OpSchema* view = FindOpSchema("aten.transpose.int");
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->ViewOf(), 0);
  EXPECT_EQ(FindOpSchema("aten.split.Tensor")->ViewOf(), 0);  // Tensor(a -> *)
  EXPECT_TRUE(FindOpSchema("aten.index_add_.default")->MutatesFirst());
  EXPECT_EQ(FindOpSchema("aten.index_add_.default")->ViewOf(), 0);  // written in place

  const OpSchema* pool = FindOpSchema("aten.max_pool2d_with_indices.default");
  const ArgSchema& stride = pool->arg(pool->Position("stride"));
  EXPECT_EQ(stride.type, ArgType::kIntList);
  EXPECT_EQ(stride.list_size, 2);
  EXPECT_TRUE(stride.default_value->items().empty());
  EXPECT_EQ(pool->results.size(), 2u);
  const OpSchema* gelu = FindOpSchema("aten.gelu.default");
  EXPECT_EQ(gelu->arg(gelu->Position("approximate")).default_value->as_string(), "none");
  const OpSchema* mse = FindOpSchema("aten.mse_loss.default");
  EXPECT_EQ(mse->arg(mse->Position("reduction")).default_value->as_int(), 1);  // Mean
  const OpSchema* ln = FindOpSchema("aten.native_layer_norm.default");
  EXPECT_TRUE(ln->arg(ln->Position("weight")).optional);
  EXPECT_EQ(FindOpSchema("operator.getitem"), nullptr);
}

TEST(OpSchemaTest, BadSchemasAreRefusedByPosition) {
  EXPECT_FALSE(ParseOpSchema("aten.mm.default", "mm(Tensor self, Tensor mat2)").ok());
  EXPECT_FALSE(ParseOpSchema("aten.mm.default", "mm(Blob self) -> Tensor").ok());
  EXPECT_FALSE(ParseOpSchema("aten.mm.default", "mm(Tensor self, Tensor self) -> Tensor").ok());
  absl::StatusOr<OpSchema> wrong = ParseOpSchema("aten.mm.default", "bmm(Tensor self) -> Tensor");
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("names aten.bmm.default"));
}

// Binds by name: positional, keyword, default; refuses what the schema does not allow.
TEST(OpSchemaTest, BindsANodesArgumentsByName) {
  Graph g;
  const NodeId x = *g.AddNode(Op::kPlaceholder, "x", "x", {}, {});
  const NodeId y = *g.AddNode(Op::kPlaceholder, "y", "y", {}, {});
  const NodeId add = *g.AddNode(Op::kCallFunction, "add", "aten.add.Tensor",
                                {Value::Ref(x), Value::Ref(y)}, {{"alpha", Value::Int(2)}});
  absl::StatusOr<OpArgs> a = OpArgs::Bind(g.node(add));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->Get("other")->as_ref(), y);
  EXPECT_EQ(a->Get("alpha")->as_int(), 2);
  EXPECT_EQ(a->Get("nonesuch"), nullptr);

  const NodeId plain =
      *g.AddNode(Op::kCallFunction, "plain", "aten.add.Tensor", {Value::Ref(x), Value::Ref(y)}, {});
  EXPECT_EQ(OpArgs::Bind(g.node(plain))->Get("alpha")->as_int(), 1);  // the default

  // alpha is keyword-only: by position it is refused, naming it.
  const NodeId positional = *g.AddNode(Op::kCallFunction, "positional", "aten.add.Tensor",
                                       {Value::Ref(x), Value::Ref(y), Value::Int(2)}, {});
  absl::StatusOr<OpArgs> bad = OpArgs::Bind(g.node(positional));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("`alpha` is keyword-only"));
  const NodeId unknown = *g.AddNode(Op::kCallFunction, "unknown", "aten.add.Tensor",
                                    {Value::Ref(x), Value::Ref(y)}, {{"beta", Value::Int(2)}});
  EXPECT_THAT(std::string(OpArgs::Bind(g.node(unknown)).status().message()),
              HasSubstr("node \"unknown\" (aten.add.Tensor): argument `beta` is not an argument"));
  const NodeId twice = *g.AddNode(Op::kCallFunction, "twice", "aten.add.Tensor",
                                  {Value::Ref(x), Value::Ref(y)}, {{"other", Value::Ref(x)}});
  EXPECT_FALSE(OpArgs::Bind(g.node(twice)).ok());
  const NodeId many = *g.AddNode(Op::kCallFunction, "many", "aten.relu.default",
                                 {Value::Ref(x), Value::Ref(y)}, {});
  EXPECT_FALSE(OpArgs::Bind(g.node(many)).ok());
  const NodeId undeclared = *g.AddNode(Op::kCallFunction, "u", "mylib.op.default", {}, {});
  EXPECT_THAT(std::string(OpArgs::Bind(g.node(undeclared)).status().message()),
              HasSubstr("no operator schema declares"));
}

// Shape rules and declarations name the same operators.
TEST(OpSchemaTest, EveryShapeRuleHasADeclarationAndBack) {
  for (const OpSchema& s : OpSchemas()) {
    EXPECT_TRUE(HasShapeRule(s.target)) << s.target << " is declared but has no shape rule";
  }
  for (const std::string& t : ShapeRuleTargets()) {
    if (t == "operator.getitem") continue;
    EXPECT_NE(FindOpSchema(t), nullptr) << t << " has a shape rule but no declaration";
  }
}

TEST(OpSchemaTest, TheDocsPageIsRenderedFromTheSchema) {
  std::ifstream in("docs/ops.md");
  ASSERT_TRUE(in.good());
  std::stringstream page;
  page << in.rdbuf();
  absl::StatusOr<std::string> current = WithOpsTable(page.str());
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_TRUE(*current == page.str())
      << "docs/ops.md's operator table differs from graph/op_schema.cc: run `bazel run "
         "//graph:ops_doc`";
  EXPECT_FALSE(WithOpsTable("no markers").ok());
}

}  // namespace
}  // namespace overlap
