// The unary math ops (sin, cos, log, abs, sgn), tensor comparisons, sub.Scalar, the
// factories (ones, empty, arange), _to_copy and the random draws (bernoulli), the ops
// transformers' and timm's models reach (bitwise / logical masks, new_ones / new_full /
// full_like, minimum / maximum, argmax / argmin, repeat), against values computed here; and the
// interpreter's random streams: reproducible from the seed, distinct per seed, replaced by a given
// draw.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "graph/graph.h"
#include "graph/json_reader.h"
#include "gtest/gtest.h"
#include "runtime/core/random.h"
#include "runtime/core/tensor.h"
#include "runtime/exec/interpreter.h"
#include "runtime/kernels/kernel.h"

namespace overlap {
namespace {

// Runs `target` on tensors (placeholders in order) and constants: the kernel's results.
class Runner {
 public:
  Tensor Make(DType d, std::vector<int64_t> shape, std::vector<double> values) {
    Tensor t = *Tensor::Empty(alloc_, d, shape);
    for (size_t i = 0; i < values.size(); ++i) SetElement(t, static_cast<int64_t>(i), values[i]);
    return t;
  }
  absl::StatusOr<std::vector<Tensor>> Run(const std::string& target, std::vector<Tensor> tensors,
                                          std::vector<Value> constants = {}, ValueDict kwargs = {},
                                          KernelCall::Random random = {}, bool in_double = false) {
    Graph g;
    std::vector<Value> args;
    absl::flat_hash_map<NodeId, Tensor> by_id;
    for (size_t i = 0; i < tensors.size(); ++i) {
      NodeId id = *g.AddNode(Op::kPlaceholder, absl::StrCat("p", i), "p");
      by_id[id] = tensors[i];
      args.push_back(Value::Ref(id));
    }
    for (Value& v : constants) args.push_back(std::move(v));
    NodeId n = *g.AddNode(Op::kCallFunction, "op", target, args, kwargs);
    const Kernel* k = CpuKernels().Find(target);
    if (k == nullptr) return absl::NotFoundError(target);
    KernelCall c(g.node(n), alloc_, [&](NodeId id) -> const Tensor* {
      auto it = by_id.find(id);
      return it == by_id.end() ? nullptr : &it->second;
    });
    c.set_random(random);
    c.set_in_double(in_double);
    return (*k)(c);
  }
  Allocator alloc_;
};

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(GetElement(t, i));
  return v;
}

TEST(UnaryOpsTest, SinCosLogMatchLibm) {
  Runner r;
  const std::vector<double> xs = {-2.5, -0.3, 0.0, 0.7, 3.1};
  for (DType d : {DType::kFloat64, DType::kFloat32}) {
    Tensor x = r.Make(d, {5}, xs);
    for (const char* op : {"aten.sin.default", "aten.cos.default"}) {
      absl::StatusOr<std::vector<Tensor>> y = r.Run(op, {x});
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ((*y)[0].dtype(), d);
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want =
            std::string(op) == "aten.sin.default" ? std::sin(xs[i]) : std::cos(xs[i]);
        EXPECT_NEAR(GetElement((*y)[0], i), want, d == DType::kFloat64 ? 1e-15 : 1e-6) << op;
      }
    }
  }
  Tensor pos = r.Make(DType::kFloat64, {3}, {0.5, 1.0, 7.0});
  EXPECT_EQ(Values((*r.Run("aten.log.default", {pos}))[0]),
            (std::vector<double>{std::log(0.5), 0.0, std::log(7.0)}));
  // log(0) = -inf, log(-1) = NaN, as IEEE and ATen.
  std::vector<double> edge =
      Values((*r.Run("aten.log.default", {r.Make(DType::kFloat64, {2}, {0, -1})}))[0]);
  EXPECT_EQ(edge[0], -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(edge[1]));
  // Integers compute in float32 (ATen's floating unary rule).
  absl::StatusOr<std::vector<Tensor>> si =
      r.Run("aten.sin.default", {r.Make(DType::kInt64, {2}, {1, 2})});
  ASSERT_TRUE(si.ok()) << si.status();
  EXPECT_EQ((*si)[0].dtype(), DType::kFloat32);
  EXPECT_NEAR(GetElement((*si)[0], 1), std::sin(2.0), 1e-6);
}

TEST(UnaryOpsTest, AbsAndSgnKeepTheDtype) {
  Runner r;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = r.Make(DType::kFloat64, {5}, {-2.5, -0.0, 0.0, 3.0, nan});
  std::vector<double> a = Values((*r.Run("aten.abs.default", {x}))[0]);
  EXPECT_EQ(a[0], 2.5);
  EXPECT_FALSE(std::signbit(a[1]));
  EXPECT_TRUE(std::isnan(a[4]));
  EXPECT_EQ(Values((*r.Run("aten.sgn.default", {x}))[0]), (std::vector<double>{-1, 0, 0, 1, 0}));
  // Integers exactly: beyond 2^53, and the most negative value wraps as in ATen.
  Tensor big = *Tensor::Empty(r.alloc_, DType::kInt64, {3});
  big.data<int64_t>()[0] = -(int64_t{1} << 60) - 1;
  big.data<int64_t>()[1] = std::numeric_limits<int64_t>::min();
  big.data<int64_t>()[2] = 7;
  Tensor ab = (*r.Run("aten.abs.default", {big}))[0];
  ASSERT_EQ(ab.dtype(), DType::kInt64);
  EXPECT_EQ(ab.data<int64_t>()[0], (int64_t{1} << 60) + 1);
  EXPECT_EQ(ab.data<int64_t>()[1], std::numeric_limits<int64_t>::min());
  Tensor sg = (*r.Run("aten.sgn.default", {big}))[0];
  EXPECT_EQ(sg.data<int64_t>()[0], -1);
  EXPECT_EQ(sg.data<int64_t>()[2], 1);
  // abs of bool is refused naming the node; sgn of bool is the identity.
  absl::StatusOr<std::vector<Tensor>> bad =
      r.Run("aten.abs.default", {r.Make(DType::kBool, {2}, {1, 0})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("node 'op'"), std::string::npos) << bad.status();
  EXPECT_EQ(Values((*r.Run("aten.sgn.default", {r.Make(DType::kBool, {2}, {1, 0})}))[0]),
            (std::vector<double>{1, 0}));
}

TEST(CompareTensorTest, BroadcastsAndPromotes) {
  Runner r;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = r.Make(DType::kFloat32, {2, 3}, {1, 2, 3, 4, nan, 6});
  Tensor b = r.Make(DType::kFloat32, {3}, {1, 5, 6});
  Tensor eq = (*r.Run("aten.eq.Tensor", {a, b}))[0];
  ASSERT_EQ(eq.dtype(), DType::kBool);
  ASSERT_EQ(eq.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values(eq), (std::vector<double>{1, 0, 0, 0, 0, 1}));
  EXPECT_EQ(Values((*r.Run("aten.ne.Tensor", {a, b}))[0]), (std::vector<double>{0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(Values((*r.Run("aten.lt.Tensor", {a, b}))[0]), (std::vector<double>{0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(Values((*r.Run("aten.ge.Tensor", {a, b}))[0]), (std::vector<double>{1, 0, 0, 1, 0, 1}));
  // int64 against float32 compares in float32: 2^24 + 1 rounds to 2^24 there.
  Tensor i = *Tensor::Empty(r.alloc_, DType::kInt64, {1});
  i.data<int64_t>()[0] = (1 << 24) + 1;
  Tensor f = r.Make(DType::kFloat32, {1}, {16777216.0});
  EXPECT_EQ(Values((*r.Run("aten.eq.Tensor", {i, f}))[0]), (std::vector<double>{1}));
  // int64 against int64: exact.
  Tensor j = *Tensor::Empty(r.alloc_, DType::kInt64, {1});
  j.data<int64_t>()[0] = (int64_t{1} << 60);
  Tensor k = *Tensor::Empty(r.alloc_, DType::kInt64, {1});
  k.data<int64_t>()[0] = (int64_t{1} << 60) + 1;
  EXPECT_EQ(Values((*r.Run("aten.eq.Tensor", {j, k}))[0]), (std::vector<double>{0}));
  absl::StatusOr<std::vector<Tensor>> bad =
      r.Run("aten.eq.Tensor", {a, r.Make(DType::kFloat32, {2}, {})});
  EXPECT_FALSE(bad.ok());
}

TEST(FactoryTest, SubScalarOnesEmptyToCopy) {
  Runner r;
  Tensor x = r.Make(DType::kFloat64, {3}, {1, 2, 3});
  EXPECT_EQ(
      Values((*r.Run("aten.sub.Scalar", {x}, {Value::Int(1)}, {{"alpha", Value::Double(0.5)}}))[0]),
      (std::vector<double>{0.5, 1.5, 2.5}));
  Tensor ones = (*r.Run("aten.ones.default", {}, {Value::List({Value::Int(2), Value::Int(2)})}))[0];
  EXPECT_EQ(ones.dtype(), DType::kFloat32);
  EXPECT_EQ(Values(ones), (std::vector<double>{1, 1, 1, 1}));
  Tensor e = (*r.Run("aten.empty.memory_format", {}, {Value::List({Value::Int(3)})},
                     {{"dtype", Value::String("torch.int64")}}))[0];
  EXPECT_EQ(e.dtype(), DType::kInt64);
  EXPECT_EQ(Values(e), (std::vector<double>{0, 0, 0}));
  EXPECT_FALSE(r.Run("aten.ones.default", {}, {Value::List({Value::Int(-1)})}).ok());
  Tensor y = r.Make(DType::kFloat32, {4}, {-1.7, 1.7, 0.0, 2.0});
  Tensor as_int =
      (*r.Run("aten._to_copy.default", {y}, {}, {{"dtype", Value::String("torch.int64")}}))[0];
  EXPECT_EQ(as_int.dtype(), DType::kInt64);
  EXPECT_EQ(Values(as_int), (std::vector<double>{-1, 1, 0, 2}));
  Tensor as_bool =
      (*r.Run("aten._to_copy.default", {y}, {}, {{"dtype", Value::String("torch.bool")}}))[0];
  EXPECT_EQ(Values(as_bool), (std::vector<double>{1, 1, 0, 1}));
  Tensor same = (*r.Run("aten._to_copy.default", {y}))[0];
  EXPECT_EQ(same.dtype(), DType::kFloat32);
  EXPECT_FALSE(same.SharesStorageWith(y));
}

TEST(FactoryTest, ArangeStartStep) {
  Runner r;
  Tensor a =
      (*r.Run("aten.arange.start_step", {}, {Value::Int(1), Value::Int(13), Value::Int(2)}))[0];
  EXPECT_EQ(a.dtype(), DType::kInt64);
  EXPECT_EQ(Values(a), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  Tensor b =
      (*r.Run("aten.arange.start_step", {}, {Value::Int(0), Value::Int(1), Value::Double(0.3)}))[0];
  EXPECT_EQ(b.dtype(), DType::kFloat32);
  ASSERT_EQ(b.numel(), 4);
  EXPECT_FLOAT_EQ(static_cast<float>(GetElement(b, 3)), 0.9f);
  EXPECT_EQ(Values((*r.Run("aten.arange.start_step", {},
                           {Value::Int(5), Value::Int(0), Value::Int(-2)}))[0]),
            (std::vector<double>{5, 3, 1}));
  EXPECT_EQ((*r.Run("aten.arange.start_step", {}, {Value::Int(3), Value::Int(3)}))[0].numel(), 0);
  EXPECT_EQ(Values((*r.Run("aten.arange.default", {}, {Value::Int(3)}))[0]),
            (std::vector<double>{0, 1, 2}));
  absl::StatusOr<std::vector<Tensor>> zero =
      r.Run("aten.arange.start_step", {}, {Value::Int(0), Value::Int(3), Value::Int(0)});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("step"), std::string::npos);
  EXPECT_FALSE(
      r.Run("aten.arange.start_step", {}, {Value::Int(3), Value::Int(0), Value::Int(1)}).ok());
}

TEST(BernoulliTest, DrawsFromTheKeyReproducibly) {
  Runner r;
  const int64_t n = 20000;
  Tensor self = *Tensor::Empty(r.alloc_, DType::kFloat32, {n});
  KernelCall::Random random{RandomKey(1, "bernoulli_"), nullptr};
  absl::StatusOr<std::vector<Tensor>> m =
      r.Run("aten.bernoulli_.float", {self}, {Value::Double(0.75)}, {}, random);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)[0].SharesStorageWith(self));  // in place: self, returned
  double ones = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = GetElement(self, i);
    ASSERT_TRUE(v == 0 || v == 1);
    ones += v;
    ASSERT_EQ(v, RandomUniform01(random.key, i) < 0.75f ? 1.0 : 0.0);
  }
  EXPECT_NEAR(ones / n, 0.75, 5 * std::sqrt(0.75 * 0.25 / n));
  // The same key gives the same mask; another key another.
  Tensor again = *Tensor::Empty(r.alloc_, DType::kFloat32, {n});
  ASSERT_TRUE(r.Run("aten.bernoulli_.float", {again}, {Value::Double(0.75)}, {}, random).ok());
  EXPECT_EQ(Values(again), Values(self));
  Tensor other = *Tensor::Empty(r.alloc_, DType::kFloat32, {n});
  ASSERT_TRUE(r.Run("aten.bernoulli_.float", {other}, {Value::Double(0.75)}, {},
                    {RandomKey(2, "bernoulli_"), nullptr})
                  .ok());
  EXPECT_NE(Values(other), Values(self));
  // The functional form draws into a new tensor.
  Tensor fresh = (*r.Run("aten.bernoulli.p", {self}, {Value::Double(0.75)}, {}, random))[0];
  EXPECT_FALSE(fresh.SharesStorageWith(self));
  EXPECT_EQ(Values(fresh), Values(self));
}

TEST(BernoulliTest, GivenDrawAndBadArguments) {
  Runner r;
  Tensor self = *Tensor::Empty(r.alloc_, DType::kFloat32, {2, 2});
  Tensor given = r.Make(DType::kFloat32, {2, 2}, {1, 0, 0, 1});
  ASSERT_TRUE(r.Run("aten.bernoulli_.float", {self}, {Value::Double(0.5)}, {}, {7, &given}).ok());
  EXPECT_EQ(Values(self), (std::vector<double>{1, 0, 0, 1}));
  Tensor wrong = r.Make(DType::kFloat32, {3}, {1, 0, 1});
  absl::StatusOr<std::vector<Tensor>> bad =
      r.Run("aten.bernoulli_.float", {self}, {Value::Double(0.5)}, {}, {7, &wrong});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("random/op"), std::string::npos) << bad.status();
  absl::StatusOr<std::vector<Tensor>> p =
      r.Run("aten.bernoulli_.float", {self}, {Value::Double(1.5)});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("[0, 1]"), std::string::npos) << p.status();
}

// dropout as torch 1.13 exports it: empty_like, bernoulli_ with the keep probability, a
// scaled multiply.
constexpr char kDropout[] = R"({"format": "overlap-graph", "version": 1, "name": "drop", "nodes": [
 {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [64, 64], "dtype": "float32"}},
 {"name": "empty_like", "op": "call_function", "target": "aten.empty_like.default", "args": ["%x"], "meta": {"shape": [64, 64], "dtype": "float32"}},
 {"name": "bernoulli_", "op": "call_function", "target": "aten.bernoulli_.float", "args": ["%empty_like", 0.75], "meta": {"shape": [64, 64], "dtype": "float32", "aliases_input": true}},
 {"name": "div", "op": "call_function", "target": "aten.div.Scalar", "args": ["%bernoulli_", 0.75], "meta": {"shape": [64, 64], "dtype": "float32"}},
 {"name": "mul", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%div"], "meta": {"shape": [64, 64], "dtype": "float32"}},
 {"name": "output", "op": "output", "target": "output", "args": [["%mul"]]}]})";

TEST(BernoulliTest, InterpreterSeedsEachNodeAndTakesGivenDraws) {
  absl::StatusOr<Graph> g = ReadGraphJson(kDropout);
  ASSERT_TRUE(g.ok()) << g.status();
  Allocator alloc;
  TensorMap in;
  in["x"] = *Tensor::Empty(alloc, DType::kFloat32, {64, 64});
  for (int64_t i = 0; i < 64 * 64; ++i) SetElement(in["x"], i, 1.0);
  auto run = [&](uint64_t seed, const TensorMap& inputs) {
    InterpreterOptions o;
    o.random_seed = seed;
    absl::StatusOr<RunResult> res = Interpret(*g, inputs, o);
    EXPECT_TRUE(res.ok()) << res.status();
    return res.ok() ? Values(res->outputs[0]) : std::vector<double>{};
  };
  const std::vector<double> a = run(11, in), b = run(11, in), c = run(12, in);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (double v : a) EXPECT_TRUE(v == 0 || std::fabs(v - 1 / 0.75) < 1e-6) << v;
  // Element i of the mask is the node's key's draw i.
  const uint64_t key = RandomKey(11, "bernoulli_");
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(a[i] != 0, RandomUniform01(key, i) < 0.75f) << i;
  // torch's mask, given as random/bernoulli_, is used instead.
  TensorMap fed = in;
  fed["random/bernoulli_"] = *Tensor::Empty(alloc, DType::kFloat32, {64, 64});
  SetElement(fed["random/bernoulli_"], 5, 1.0);
  const std::vector<double> d = run(11, fed);
  for (int64_t i = 0; i < 64 * 64; ++i) EXPECT_EQ(d[i] != 0, i == 5) << i;
}

TEST(MaskOpsTest, BitwiseAndLogicalBroadcastAndPromote) {
  Runner r;
  Tensor a = r.Make(DType::kBool, {2, 2}, {1, 0, 1, 1});
  Tensor b = r.Make(DType::kBool, {2}, {1, 0});
  Tensor both = (*r.Run("aten.bitwise_and.Tensor", {a, b}))[0];
  ASSERT_EQ(both.dtype(), DType::kBool);
  EXPECT_EQ(Values(both), (std::vector<double>{1, 0, 1, 0}));
  EXPECT_EQ(Values((*r.Run("aten.bitwise_or.Tensor", {a, b}))[0]),
            (std::vector<double>{1, 0, 1, 1}));
  EXPECT_EQ(Values((*r.Run("aten.bitwise_xor.Tensor", {a, b}))[0]),
            (std::vector<double>{0, 0, 0, 1}));
  // Integers: bit by bit, in the promoted dtype (bool with int64 is int64).
  Tensor i = r.Make(DType::kInt64, {2}, {12, 10});
  Tensor ib = (*r.Run("aten.bitwise_and.Tensor", {i, b}))[0];
  EXPECT_EQ(ib.dtype(), DType::kInt64);
  EXPECT_EQ(Values(ib), (std::vector<double>{0, 0}));
  EXPECT_EQ(Values((*r.Run("aten.bitwise_xor.Tensor", {i, r.Make(DType::kInt64, {1}, {6})}))[0]),
            (std::vector<double>{10, 12}));
  // Floating operands: refused naming the node, as ATen refuses them.
  absl::StatusOr<std::vector<Tensor>> bad =
      r.Run("aten.bitwise_and.Tensor", {r.Make(DType::kFloat32, {2}, {1, 0}), b});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("node 'op'"), std::string::npos) << bad.status();
  // logical_*: any dtype read as nonzero (NaN is), bool out.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor f = r.Make(DType::kFloat32, {3}, {0.0, nan, 2.5});
  Tensor g = r.Make(DType::kInt64, {3}, {3, 0, 1});
  Tensor land = (*r.Run("aten.logical_and.default", {f, g}))[0];
  ASSERT_EQ(land.dtype(), DType::kBool);
  EXPECT_EQ(Values(land), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(Values((*r.Run("aten.logical_or.default", {f, g}))[0]), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(Values((*r.Run("aten.logical_xor.default", {f, g}))[0]),
            (std::vector<double>{1, 1, 0}));
}

TEST(MaskOpsTest, NewOnesNewFullFullLike) {
  Runner r;
  Tensor x = r.Make(DType::kInt64, {2}, {5, 6});
  Tensor ones =
      (*r.Run("aten.new_ones.default", {x}, {Value::List({Value::Int(2), Value::Int(3)})}))[0];
  EXPECT_EQ(ones.dtype(), DType::kInt64);  // self's dtype
  EXPECT_EQ(ones.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values(ones), (std::vector<double>(6, 1)));
  Tensor full =
      (*r.Run("aten.new_full.default", {x}, {Value::List({Value::Int(2)}), Value::Double(-2.5)},
              {{"dtype", Value::String("torch.float32")}}))[0];
  EXPECT_EQ(full.dtype(), DType::kFloat32);
  EXPECT_EQ(Values(full), (std::vector<double>{-2.5, -2.5}));
  Tensor like =
      (*r.Run("aten.full_like.default", {r.Make(DType::kFloat64, {2, 2}, {})}, {Value::Int(7)}))[0];
  EXPECT_EQ(like.dtype(), DType::kFloat64);
  EXPECT_EQ(Values(like), (std::vector<double>{7, 7, 7, 7}));
  EXPECT_FALSE(r.Run("aten.new_ones.default", {x}, {Value::List({Value::Int(-1)})}).ok());
  // A run in float64 makes a float32 it is asked for as float64, so it meets float64 operands.
  Tensor wide =
      (*r.Run("aten.new_full.default", {x}, {Value::List({Value::Int(1)}), Value::Double(1)},
              {{"dtype", Value::String("torch.float32")}}, {}, /*in_double=*/true))[0];
  EXPECT_EQ(wide.dtype(), DType::kFloat64);
  Tensor ints = (*r.Run("aten.new_ones.default", {x}, {Value::List({Value::Int(1)})}, {}, {},
                        /*in_double=*/true))[0];
  EXPECT_EQ(ints.dtype(), DType::kInt64);  // only float32 widens
  // So does a reduction's dtype keyword (EdgeNeXt's cumsum(dtype=torch.float32) of a mask).
  Tensor mask = r.Make(DType::kBool, {3}, {1, 1, 1});
  const ValueDict as_float = {{"dtype", Value::String("torch.float32")}};
  Tensor narrow = (*r.Run("aten.cumsum.default", {mask}, {Value::Int(0)}, as_float))[0];
  EXPECT_EQ(narrow.dtype(), DType::kFloat32);
  Tensor summed = (*r.Run("aten.cumsum.default", {mask}, {Value::Int(0)}, as_float, {},
                          /*in_double=*/true))[0];
  EXPECT_EQ(summed.dtype(), DType::kFloat64);
  EXPECT_EQ(Values(summed), (std::vector<double>{1, 2, 3}));
}

TEST(MaskOpsTest, MinimumMaximumPropagateNaNAndPromote) {
  Runner r;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = r.Make(DType::kFloat32, {2, 2}, {1, 5, nan, -2});
  Tensor b = r.Make(DType::kFloat32, {2}, {3, 4});
  std::vector<double> lo = Values((*r.Run("aten.minimum.default", {a, b}))[0]);
  EXPECT_EQ(lo[0], 1);
  EXPECT_EQ(lo[1], 4);
  EXPECT_TRUE(std::isnan(lo[2]));
  EXPECT_EQ(lo[3], -2);
  std::vector<double> hi = Values((*r.Run("aten.maximum.default", {a, b}))[0]);
  EXPECT_EQ(hi[0], 3);
  EXPECT_TRUE(std::isnan(hi[2]));
  // int64: exact beyond 2^53; int64 with float32 promotes to float32.
  Tensor big = *Tensor::Empty(r.alloc_, DType::kInt64, {1});
  big.data<int64_t>()[0] = (int64_t{1} << 60) + 1;
  Tensor big2 = *Tensor::Empty(r.alloc_, DType::kInt64, {1});
  big2.data<int64_t>()[0] = (int64_t{1} << 60);
  Tensor m = (*r.Run("aten.maximum.default", {big, big2}))[0];
  ASSERT_EQ(m.dtype(), DType::kInt64);
  EXPECT_EQ(m.data<int64_t>()[0], (int64_t{1} << 60) + 1);
  EXPECT_EQ((*r.Run("aten.minimum.default", {r.Make(DType::kInt64, {1}, {3}), b}))[0].dtype(),
            DType::kFloat32);
}

TEST(MaskOpsTest, ArgmaxArgminFirstExtremeAndFlattened) {
  Runner r;
  Tensor x = r.Make(DType::kFloat32, {2, 3}, {1, 7, 7, 4, -1, -1});
  Tensor by_row = (*r.Run("aten.argmax.default", {x}, {Value::Int(1)}))[0];
  ASSERT_EQ(by_row.dtype(), DType::kInt64);
  EXPECT_EQ(Values(by_row), (std::vector<double>{1, 0}));  // the first of equal maxima
  EXPECT_EQ(Values((*r.Run("aten.argmin.default", {x}, {Value::Int(1)}))[0]),
            (std::vector<double>{0, 1}));
  Tensor kept = (*r.Run("aten.argmax.default", {x}, {Value::Int(0), Value::Bool(true)}))[0];
  EXPECT_EQ(kept.shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Values(kept), (std::vector<double>{1, 0, 0}));
  Tensor flat = (*r.Run("aten.argmax.default", {x}))[0];  // dim None: the flattened index
  EXPECT_EQ(flat.dim(), 0);
  EXPECT_EQ(Values(flat), (std::vector<double>{1}));
  Tensor flat_kept = (*r.Run("aten.argmin.default", {x}, {Value(), Value::Bool(true)}))[0];
  EXPECT_EQ(flat_kept.shape(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(Values(flat_kept), (std::vector<double>{4}));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(Values((*r.Run("aten.argmax.default", {r.Make(DType::kFloat64, {3}, {1, nan, 9})}))[0]),
            (std::vector<double>{1}));  // NaN is the maximum
  EXPECT_FALSE(r.Run("aten.argmax.default", {r.Make(DType::kFloat32, {0}, {})}).ok());
  EXPECT_FALSE(r.Run("aten.argmax.default", {x}, {Value::Int(2)}).ok());
}

TEST(MaskOpsTest, RepeatTilesAndPadsLeadingDimensions) {
  Runner r;
  Tensor x = r.Make(DType::kFloat32, {2, 2}, {1, 2, 3, 4});
  Tensor t = (*r.Run("aten.repeat.default", {x},
                     {Value::List({Value::Int(2), Value::Int(1), Value::Int(2)})}))[0];
  ASSERT_EQ(t.shape(), (std::vector<int64_t>{2, 2, 4}));
  EXPECT_EQ(Values(t), (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4}));
  Tensor s = (*r.Run("aten.repeat.default", {r.Make(DType::kInt64, {}, {5})},
                     {Value::List({Value::Int(3)})}))[0];
  EXPECT_EQ(Values(s), (std::vector<double>{5, 5, 5}));
  EXPECT_EQ((*r.Run("aten.repeat.default", {x}, {Value::List({Value::Int(0), Value::Int(2)})}))[0]
                .numel(),
            0);
  EXPECT_FALSE(r.Run("aten.repeat.default", {x}, {Value::List({Value::Int(2)})}).ok());
  EXPECT_FALSE(
      r.Run("aten.repeat.default", {x}, {Value::List({Value::Int(-1), Value::Int(1)})}).ok());
  EXPECT_EQ(Values((*r.Run("aten.arange.start", {}, {Value::Int(2), Value::Int(5)}))[0]),
            (std::vector<double>{2, 3, 4}));
}

}  // namespace
}  // namespace overlap
