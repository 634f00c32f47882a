// Every tiny model's backward graph against finite differences of its forward graph's loss:
// the AOT pair (graph/aot.h) run by the interpreter in double precision, on sampled
// coordinates of every parameter (and of float data inputs' effect through them).
//
// Criterion (docs/runtime.md): central differences on a float64 copy of the parameters, with
// one Richardson step, fd = (4 D(h/2) - D(h)) / 3 for D(h) = (L(p + h) - L(p - h)) / 2h and
// h = 1e-6 * max(1, |p|); |fd - g| <= 1e-6 * max(|fd|, |g|) + 16 eps |L| / h, the last term
// the rounding error of the differences themselves (eps = 2^-52, L the loss). (Plain central
// differences are not enough for resnet18: batch norm over two images at 1 x 1 resolution
// curves the loss so much that their h^2 error reaches 2e-3 at h = 1e-6; Richardson's
// removes that term.)
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "graph/aot.h"
#include "graph/json_reader.h"
#include "graph/models.h"
#include "gtest/gtest.h"
#include "runtime/exec/interpreter.h"
#include "runtime/train/synthetic.h"
#include "runtime/train/train.h"

namespace overlap {
namespace {

class ModelGradientTest : public ::testing::TestWithParam<std::string> {};

// "mlp+sigmoid", "mlp+tanh": the mlp with its ReLUs as another activation (operators no
// built-in model uses).
std::string SwappedActivation(const std::string& model) {
  return model == "mlp+sigmoid" ? "aten.sigmoid.default"
         : model == "mlp+tanh"  ? "aten.tanh.default"
                                : "";
}

// "rnn-ops": the operators a recurrent cell's export uses, in one lifted graph: the input
// projected, split into gate pieces (unsafe_split), squashed (sigmoid, tanh), combined (mul,
// sub, neg), its steps unbound and stacked back in another order, plus a zeros state.
constexpr char kRnnOps[] = R"({"format": "overlap-graph", "version": 1, "name": "rnn-ops",
 "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [3, 4], "dtype": "float32"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [4, 6], "dtype": "float32", "param": "cell.weight"}},
  {"name": "h", "op": "call_function", "target": "aten.mm.default", "args": ["%x", "%w"], "meta": {"shape": [3, 6], "dtype": "float32"}},
  {"name": "gates", "op": "call_function", "target": "aten.unsafe_split.Tensor", "args": ["%h", 2, 1], "meta": {"shapes": [[3, 2], [3, 2], [3, 2]], "dtype": "float32"}},
  {"name": "g0", "op": "call_function", "target": "operator.getitem", "args": ["%gates", 0], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "g1", "op": "call_function", "target": "operator.getitem", "args": ["%gates", 1], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "g2", "op": "call_function", "target": "operator.getitem", "args": ["%gates", 2], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "i", "op": "call_function", "target": "aten.sigmoid.default", "args": ["%g0"], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "c", "op": "call_function", "target": "aten.tanh.default", "args": ["%g1"], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "ic", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%i", "%c"], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "d", "op": "call_function", "target": "aten.sub.Tensor", "args": ["%ic", "%g2"], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "n", "op": "call_function", "target": "aten.neg.default", "args": ["%d"], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "steps", "op": "call_function", "target": "aten.unbind.int", "args": ["%n"], "meta": {"shapes": [[2], [2], [2]], "dtype": "float32"}},
  {"name": "s0", "op": "call_function", "target": "operator.getitem", "args": ["%steps", 0], "meta": {"shape": [2], "dtype": "float32"}},
  {"name": "s2", "op": "call_function", "target": "operator.getitem", "args": ["%steps", 2], "meta": {"shape": [2], "dtype": "float32"}},
  {"name": "z", "op": "call_function", "target": "aten.zeros.default", "args": [[2]], "meta": {"shape": [2], "dtype": "float32"}},
  {"name": "st", "op": "call_function", "target": "aten.stack.default", "args": [["%s2", "%z", "%s0"], 1], "meta": {"shape": [2, 3], "dtype": "float32"}},
  {"name": "sq", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%st", "%st"], "meta": {"shape": [2, 3], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.sum.default", "args": ["%sq"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "cell.weight", "owner": "w", "shape": [4, 6], "dtype": "float32", "bytes": 96}]})";

// "pool-ops": average pooling (DenseNet's transitions) with padding and ceil mode, constant
// padding that crops one side, a roll (Swin's shifted windows), a slice_scatter, and the mean of
// everything.
constexpr char kPoolOps[] = R"({"format": "overlap-graph", "version": 1, "name": "pool-ops",
 "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [1, 2, 6, 5], "dtype": "float32"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [1, 2, 6, 5], "dtype": "float32", "param": "scale"}},
  {"name": "xw", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%w"], "meta": {"shape": [1, 2, 6, 5], "dtype": "float32"}},
  {"name": "p", "op": "call_function", "target": "aten.avg_pool2d.default", "args": ["%xw", [3, 2], [2, 2], [1, 1], true, false], "meta": {"shape": [1, 2, 4, 3], "dtype": "float32"}},
  {"name": "pd", "op": "call_function", "target": "aten.constant_pad_nd.default", "args": ["%p", [1, -1, 2, 0]], "meta": {"shape": [1, 2, 6, 3], "dtype": "float32"}},
  {"name": "r", "op": "call_function", "target": "aten.roll.default", "args": ["%pd", [2, -1], [2, 3]], "meta": {"shape": [1, 2, 6, 3], "dtype": "float32"}},
  {"name": "half", "op": "call_function", "target": "aten.slice.Tensor", "args": ["%pd", 2, 0, 3], "meta": {"shape": [1, 2, 3, 3], "dtype": "float32", "aliases_input": true}},
  {"name": "hh", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%half", "%half"], "meta": {"shape": [1, 2, 3, 3], "dtype": "float32"}},
  {"name": "sc", "op": "call_function", "target": "aten.slice_scatter.default", "args": ["%r", "%hh", 2, 1, 6, 2], "meta": {"shape": [1, 2, 6, 3], "dtype": "float32"}},
  {"name": "pp", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%sc", "%sc"], "meta": {"shape": [1, 2, 6, 3], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.mean.default", "args": ["%pp"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "scale", "owner": "w", "shape": [1, 2, 6, 5], "dtype": "float32", "bytes": 240}]})";

// "volume-ops": pooling over volumes: 3-D max pooling with indices and 3-D average pooling,
// adaptive max pooling to a size with uneven windows and adaptive average pooling to one
// larger than its input along the depth (windows repeat).
constexpr char kVolumeOps[] = R"({"format": "overlap-graph", "version": 1, "name": "volume-ops",
 "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [1, 2, 3, 5, 4], "dtype": "float32"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [1, 2, 3, 5, 4], "dtype": "float32", "param": "scale"}},
  {"name": "xw", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%w"], "meta": {"shape": [1, 2, 3, 5, 4], "dtype": "float32"}},
  {"name": "mp", "op": "call_function", "target": "aten.max_pool3d_with_indices.default", "args": ["%xw", [2, 2, 2], [1, 2, 2]], "meta": {"shapes": [[1, 2, 2, 2, 2], [1, 2, 2, 2, 2]], "dtypes": ["float32", "int64"]}},
  {"name": "m", "op": "call_function", "target": "operator.getitem", "args": ["%mp", 0], "meta": {"shape": [1, 2, 2, 2, 2], "dtype": "float32"}},
  {"name": "ap", "op": "call_function", "target": "aten.avg_pool3d.default", "args": ["%xw", [1, 3, 2], [1, 1, 2], [0, 1, 0]], "meta": {"shape": [1, 2, 3, 5, 2], "dtype": "float32"}},
  {"name": "am", "op": "call_function", "target": "aten.adaptive_max_pool3d.default", "args": ["%ap", [2, 3, 2]], "meta": {"shapes": [[1, 2, 2, 3, 2], [1, 2, 2, 3, 2]], "dtypes": ["float32", "int64"]}},
  {"name": "a", "op": "call_function", "target": "operator.getitem", "args": ["%am", 0], "meta": {"shape": [1, 2, 2, 3, 2], "dtype": "float32"}},
  {"name": "aa", "op": "call_function", "target": "aten._adaptive_avg_pool3d.default", "args": ["%xw", [4, 2, 3]], "meta": {"shape": [1, 2, 4, 2, 3], "dtype": "float32"}},
  {"name": "m2", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%m", "%m"], "meta": {"shape": [1, 2, 2, 2, 2], "dtype": "float32"}},
  {"name": "a2", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%a", "%a"], "meta": {"shape": [1, 2, 2, 3, 2], "dtype": "float32"}},
  {"name": "aa2", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%aa", "%aa"], "meta": {"shape": [1, 2, 4, 2, 3], "dtype": "float32"}},
  {"name": "l1", "op": "call_function", "target": "aten.mean.default", "args": ["%m2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "l2", "op": "call_function", "target": "aten.mean.default", "args": ["%a2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "l3", "op": "call_function", "target": "aten.mean.default", "args": ["%aa2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "l12", "op": "call_function", "target": "aten.add.Tensor", "args": ["%l1", "%l2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.add.Tensor", "args": ["%l12", "%l3"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "scale", "owner": "w", "shape": [1, 2, 3, 5, 4], "dtype": "float32", "bytes": 480}]})";

// "bag-ops": nn.EmbeddingBag's _embedding_bag in its three modes (sum with a padding_idx, mean,
// max) over bags of 3, 3 and 1 indices with repeats (arange floor-divided by 2). (The graph
// runs in float64, where no mode leaves offset2bag empty: EmbeddingBagSumRebuildsOffset2bag
// covers that.)
constexpr char kBagOps[] = R"({"format": "overlap-graph", "version": 1, "name": "bag-ops",
 "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [4, 3], "dtype": "float32"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [4, 3], "dtype": "float32", "param": "table"}},
  {"name": "t", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%w"], "meta": {"shape": [4, 3], "dtype": "float32"}},
  {"name": "a7", "op": "call_function", "target": "aten.arange.start_step", "args": [0, 7, 1], "meta": {"shape": [7], "dtype": "int64"}},
  {"name": "ids", "op": "call_function", "target": "aten.div.Tensor_mode", "args": ["%a7", 2], "kwargs": {"rounding_mode": "floor"}, "meta": {"shape": [7], "dtype": "int64"}},
  {"name": "off", "op": "call_function", "target": "aten.arange.start_step", "args": [0, 7, 3], "meta": {"shape": [3], "dtype": "int64"}},
  {"name": "bs", "op": "call_function", "target": "aten._embedding_bag.default", "args": ["%t", "%ids", "%off", false, 0, false, null, false, 3], "meta": {"shapes": [[3, 3], [7], [3], [3]], "dtypes": ["float32", "int64", "int64", "int64"]}},
  {"name": "bs0", "op": "call_function", "target": "operator.getitem", "args": ["%bs", 0], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "bs2", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%bs0", "%bs0"], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "bsl", "op": "call_function", "target": "aten.mean.default", "args": ["%bs2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "bm", "op": "call_function", "target": "aten._embedding_bag.default", "args": ["%t", "%ids", "%off", false, 1], "meta": {"shapes": [[3, 3], [7], [3], [3]], "dtypes": ["float32", "int64", "int64", "int64"]}},
  {"name": "bm0", "op": "call_function", "target": "operator.getitem", "args": ["%bm", 0], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "bm2", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%bm0", "%bm0"], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "bml", "op": "call_function", "target": "aten.mean.default", "args": ["%bm2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "bx", "op": "call_function", "target": "aten._embedding_bag.default", "args": ["%t", "%ids", "%off", false, 2], "meta": {"shapes": [[3, 3], [7], [3], [3, 3]], "dtypes": ["float32", "int64", "int64", "int64"]}},
  {"name": "bx0", "op": "call_function", "target": "operator.getitem", "args": ["%bx", 0], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "bx2", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%bx0", "%bx0"], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "bxl", "op": "call_function", "target": "aten.mean.default", "args": ["%bx2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "l01", "op": "call_function", "target": "aten.add.Tensor", "args": ["%bsl", "%bml"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.add.Tensor", "args": ["%l01", "%bxl"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "table", "owner": "w", "shape": [4, 3], "dtype": "float32", "bytes": 48}]})";

// "index-ops": a table read by an index buffer (Swin's relative position bias), once with
// repeated rows and once along columns after a None; an accumulating index_put; an as_strided
// window of the result and an as_strided_scatter back into it (ConvNeXt's and Swin's heads as
// torch 1.13 exports them).
constexpr char kIndexOps[] = R"({"format": "overlap-graph", "version": 1, "name": "index-ops",
 "nodes": [
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [6, 3], "dtype": "float32", "param": "table"}},
  {"name": "idx", "op": "placeholder", "target": "idx", "args": [], "meta": {"shape": [4, 2], "dtype": "int64"}},
  {"name": "g", "op": "call_function", "target": "aten.index.Tensor", "args": ["%w", ["%idx"]], "meta": {"shape": [4, 2, 3], "dtype": "float32"}},
  {"name": "gc", "op": "call_function", "target": "aten.index.Tensor", "args": ["%w", [null, "%idx"]], "meta": {"shape": [6, 4, 2], "dtype": "float32"}},
  {"name": "sq", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%w", "%w"], "meta": {"shape": [6, 3], "dtype": "float32"}},
  {"name": "gg", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%g", "%g"], "meta": {"shape": [4, 2, 3], "dtype": "float32"}},
  {"name": "ip", "op": "call_function", "target": "aten.index_put.default", "args": ["%sq", ["%idx"], "%gg", true], "meta": {"shape": [6, 3], "dtype": "float32"}},
  {"name": "win", "op": "call_function", "target": "aten.as_strided.default", "args": ["%ip", [3, 2], [1, 3], 1], "meta": {"shape": [3, 2], "dtype": "float32", "aliases_input": true}},
  {"name": "ww", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%win", "%win"], "meta": {"shape": [3, 2], "dtype": "float32"}},
  {"name": "sc", "op": "call_function", "target": "aten.as_strided_scatter.default", "args": ["%ip", "%ww", [3, 2], [1, 3], 1], "meta": {"shape": [6, 3], "dtype": "float32"}},
  {"name": "pp", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%sc", "%sc"], "meta": {"shape": [6, 3], "dtype": "float32"}},
  {"name": "l1", "op": "call_function", "target": "aten.mean.default", "args": ["%pp"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "cc", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%gc", "%gc"], "meta": {"shape": [6, 4, 2], "dtype": "float32"}},
  {"name": "l2", "op": "call_function", "target": "aten.mean.default", "args": ["%cc"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.add.Tensor", "args": ["%l1", "%l2"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "table", "owner": "w", "shape": [6, 3], "dtype": "float32", "bytes": 72}]})";

// "layer-ops": the zoo's layers in one chain: group norm, hardswish, bilinear upsampling by
// scale, a grouped transposed convolution, adaptive average pooling, nearest upsampling to a
// size, hardsigmoid, split_with_sizes, exp, clamp, clamp_min, a 2-norm over channels, and a
// where between two branches.
constexpr char kLayerOps[] = R"({"format": "overlap-graph", "version": 1, "name": "layer-ops",
 "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [1, 4, 4, 4], "dtype": "float32"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [1, 4, 4, 4], "dtype": "float32", "param": "scale"}},
  {"name": "gw", "op": "placeholder", "target": "gw", "args": [], "meta": {"shape": [4], "dtype": "float32", "param": "gn.weight"}},
  {"name": "gb", "op": "placeholder", "target": "gb", "args": [], "meta": {"shape": [4], "dtype": "float32", "param": "gn.bias"}},
  {"name": "cw", "op": "placeholder", "target": "cw", "args": [], "meta": {"shape": [4, 2, 3, 3], "dtype": "float32", "param": "up.weight"}},
  {"name": "xw", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%w"], "meta": {"shape": [1, 4, 4, 4], "dtype": "float32"}},
  {"name": "gn", "op": "call_function", "target": "aten.native_group_norm.default", "args": ["%xw", "%gw", "%gb", 1, 4, 16, 2, 1e-05], "meta": {"shapes": [[1, 4, 4, 4], [1, 2], [1, 2]], "dtypes": ["float32", "float32", "float32"]}},
  {"name": "gn0", "op": "call_function", "target": "operator.getitem", "args": ["%gn", 0], "meta": {"shape": [1, 4, 4, 4], "dtype": "float32"}},
  {"name": "hs", "op": "call_function", "target": "aten.hardswish.default", "args": ["%gn0"], "meta": {"shape": [1, 4, 4, 4], "dtype": "float32"}},
  {"name": "up", "op": "call_function", "target": "aten.upsample_bilinear2d.vec", "args": ["%hs", null, false, [1.5, 1.5]], "meta": {"shape": [1, 4, 6, 6], "dtype": "float32"}},
  {"name": "ct", "op": "call_function", "target": "aten.convolution.default", "args": ["%up", "%cw", null, [2, 2], [1, 1], [1, 1], true, [1, 1], 2], "meta": {"shape": [1, 4, 12, 12], "dtype": "float32"}},
  {"name": "ap", "op": "call_function", "target": "aten._adaptive_avg_pool2d.default", "args": ["%ct", [5, 5]], "meta": {"shape": [1, 4, 5, 5], "dtype": "float32"}},
  {"name": "un", "op": "call_function", "target": "aten.upsample_nearest2d.vec", "args": ["%ap", [7, 7], null], "meta": {"shape": [1, 4, 7, 7], "dtype": "float32"}},
  {"name": "hg", "op": "call_function", "target": "aten.hardsigmoid.default", "args": ["%un"], "meta": {"shape": [1, 4, 7, 7], "dtype": "float32"}},
  {"name": "parts", "op": "call_function", "target": "aten.split_with_sizes.default", "args": ["%hg", [1, 3], 1], "meta": {"shapes": [[1, 1, 7, 7], [1, 3, 7, 7]], "dtypes": ["float32", "float32"], "aliases_input": true}},
  {"name": "p0", "op": "call_function", "target": "operator.getitem", "args": ["%parts", 0], "meta": {"shape": [1, 1, 7, 7], "dtype": "float32"}},
  {"name": "p1", "op": "call_function", "target": "operator.getitem", "args": ["%parts", 1], "meta": {"shape": [1, 3, 7, 7], "dtype": "float32"}},
  {"name": "e", "op": "call_function", "target": "aten.exp.default", "args": ["%p0"], "meta": {"shape": [1, 1, 7, 7], "dtype": "float32"}},
  {"name": "cl", "op": "call_function", "target": "aten.clamp.default", "args": ["%p1", 0.1, 0.9], "meta": {"shape": [1, 3, 7, 7], "dtype": "float32"}},
  {"name": "cm", "op": "call_function", "target": "aten.clamp_min.default", "args": ["%cl", 0.15], "meta": {"shape": [1, 3, 7, 7], "dtype": "float32"}},
  {"name": "nrm", "op": "call_function", "target": "aten.norm.ScalarOpt_dim", "args": ["%cm", 2, [1]], "meta": {"shape": [1, 7, 7], "dtype": "float32"}},
  {"name": "mask", "op": "call_function", "target": "aten.gt.Scalar", "args": ["%e", 1.6], "meta": {"shape": [1, 1, 7, 7], "dtype": "bool"}},
  {"name": "wh", "op": "call_function", "target": "aten.where.self", "args": ["%mask", "%nrm", "%e"], "meta": {"shape": [1, 1, 7, 7], "dtype": "float32"}},
  {"name": "sq", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%wh", "%wh"], "meta": {"shape": [1, 1, 7, 7], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.mean.default", "args": ["%sq"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "scale", "owner": "w", "shape": [1, 4, 4, 4], "dtype": "float32", "bytes": 256},
            {"name": "gn.weight", "owner": "gw", "shape": [4], "dtype": "float32", "bytes": 16},
            {"name": "gn.bias", "owner": "gb", "shape": [4], "dtype": "float32", "bytes": 16},
            {"name": "up.weight", "owner": "cw", "shape": [4, 2, 3, 3], "dtype": "float32", "bytes": 288}]})";

// "class-ops": the operator classes of exported models that our AOT builder differentiates:
// sin, cos, abs and log; gather and scatter_add at repeated indices (arange floor-divided),
// scatter (src and value) at distinct ones, select_scatter, cumsum and flip; sum over a
// dimension, select and amax.
constexpr char kClassOps[] = R"({"format": "overlap-graph", "version": 1, "name": "class-ops",
 "nodes": [
  {"name": "x", "op": "placeholder", "target": "x", "args": [], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [4, 5], "dtype": "float32", "param": "scale"}},
  {"name": "xw", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%x", "%w"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "sn", "op": "call_function", "target": "aten.sin.default", "args": ["%xw"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "cs", "op": "call_function", "target": "aten.cos.default", "args": ["%xw"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "ab", "op": "call_function", "target": "aten.abs.default", "args": ["%xw"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "ab1", "op": "call_function", "target": "aten.add.Scalar", "args": ["%ab", 1.0], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "lg", "op": "call_function", "target": "aten.log.default", "args": ["%ab1"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "a3", "op": "call_function", "target": "aten.arange.start_step", "args": [0, 6, 2], "meta": {"shape": [3], "dtype": "int64"}},
  {"name": "u3", "op": "call_function", "target": "aten.expand.default", "args": ["%a3", [4, 3]], "meta": {"shape": [4, 3], "dtype": "int64", "aliases_input": true}},
  {"name": "d3", "op": "call_function", "target": "aten.div.Tensor_mode", "args": ["%a3", 4], "kwargs": {"rounding_mode": "floor"}, "meta": {"shape": [3], "dtype": "int64"}},
  {"name": "r3", "op": "call_function", "target": "aten.expand.default", "args": ["%d3", [4, 3]], "meta": {"shape": [4, 3], "dtype": "int64", "aliases_input": true}},
  {"name": "g", "op": "call_function", "target": "aten.gather.default", "args": ["%sn", 1, "%r3"], "meta": {"shape": [4, 3], "dtype": "float32"}},
  {"name": "sa", "op": "call_function", "target": "aten.scatter_add.default", "args": ["%cs", 1, "%r3", "%g"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "ss", "op": "call_function", "target": "aten.scatter.src", "args": ["%lg", 1, "%u3", "%g"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "sv", "op": "call_function", "target": "aten.scatter.value", "args": ["%sa", 1, "%u3", 0.5], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "rs", "op": "call_function", "target": "aten.sum.dim_IntList", "args": ["%xw", [0], true], "meta": {"shape": [1, 5], "dtype": "float32"}},
  {"name": "row", "op": "call_function", "target": "aten.select.int", "args": ["%rs", 0, -1], "meta": {"shape": [5], "dtype": "float32", "aliases_input": true}},
  {"name": "sel", "op": "call_function", "target": "aten.select_scatter.default", "args": ["%ss", "%row", 0, 2], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "cu", "op": "call_function", "target": "aten.cumsum.default", "args": ["%sv", 1], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "fl", "op": "call_function", "target": "aten.flip.default", "args": ["%sel", [0, 1]], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "am", "op": "call_function", "target": "aten.amax.default", "args": ["%fl", [1]], "meta": {"shape": [4], "dtype": "float32"}},
  {"name": "amc", "op": "call_function", "target": "aten.unsqueeze.default", "args": ["%am", 1], "meta": {"shape": [4, 1], "dtype": "float32", "aliases_input": true}},
  {"name": "fm", "op": "call_function", "target": "aten.sub.Tensor", "args": ["%fl", "%amc"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "both", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%cu", "%fm"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "sq", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%both", "%both"], "meta": {"shape": [4, 5], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.mean.default", "args": ["%sq"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "scale", "owner": "w", "shape": [4, 5], "dtype": "float32", "bytes": 80}]})";

TEST_P(ModelGradientTest, BackwardMatchesFiniteDifferencesOfTheForwardLoss) {
  const std::string model = GetParam();
  ModelOptions o;
  o.style = ParamStyle::kLifted;
  const std::string activation = SwappedActivation(model);
  const std::map<std::string, const char*> graphs = {
      {"rnn-ops", kRnnOps},    {"pool-ops", kPoolOps},   {"volume-ops", kVolumeOps},
      {"bag-ops", kBagOps},    {"index-ops", kIndexOps}, {"layer-ops", kLayerOps},
      {"class-ops", kClassOps}};
  auto it = graphs.find(model);
  absl::StatusOr<Graph> g = it != graphs.end()
                                ? ReadGraphJson(it->second)
                                : BuildModel(activation.empty() ? model : "mlp", o, Preset::kTiny);
  ASSERT_TRUE(g.ok()) << g.status();
  if (!activation.empty()) {
    int swapped = 0;
    for (NodeId id : g->order()) {
      if (g->node(id).target() != "aten.relu.default") continue;
      g->set_target(id, activation);
      ++swapped;
    }
    ASSERT_GT(swapped, 0);
  }
  absl::StatusOr<AotPair> pair = BuildAotPair(*g);
  ASSERT_TRUE(pair.ok()) << pair.status();
  Allocator alloc;
  absl::StatusOr<TensorMap> seeded = SeededInputs(pair->forward, 3, alloc);
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  // Everything floating in float64, parameters by name.
  TensorMap params, data;
  for (NodeId id : pair->forward.order()) {
    const Node& n = pair->forward.node(id);
    if (n.op() != Op::kPlaceholder) continue;
    const Tensor& t = seeded->at(n.name());
    Tensor d = t;
    if (t.dtype() == DType::kFloat32) {
      d = *Tensor::Empty(alloc, DType::kFloat64, t.shape());
      ASSERT_TRUE(CopyConvert(t, d).ok());
    }
    (IsParameterPlaceholder(pair->forward, id) ? params[ParamNameOf(n)] : data[n.name()]) = d;
  }
  InterpreterOptions in_double;
  in_double.compute_in_double = true;
  absl::StatusOr<AotStepResult> step = RunAotStep(*pair, params, data, in_double);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_FALSE(step->grads.empty());

  auto loss = [&](const TensorMap& p) {
    TensorMap in = p;
    for (const auto& [k, v] : data) in[k] = v;
    absl::StatusOr<RunResult> r = Interpret(pair->forward, in, in_double);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? GetElement(r->outputs[0], 0) : NAN;
  };
  Rng rng(11);
  int checked = 0;
  double worst = 0;
  double largest = 0;  // of the sampled gradients: a check of zeros against zeros says nothing
  for (const auto& entry : step->grads) {  // not a structured binding: lambdas capture name
    const std::string& name = entry.first;
    const Tensor& grad = entry.second;
    ASSERT_EQ(grad.dtype(), DType::kFloat64) << name;
    const Tensor& p = params.at(name);
    for (int s = 0; s < 3; ++s) {
      const int64_t i = rng.Below(p.numel());
      const double x = GetElement(p, i);
      auto central = [&](double h) {
        TensorMap plus = params, minus = params;
        Tensor pp = *Tensor::Empty(alloc, DType::kFloat64, p.shape());
        Tensor pm = *Tensor::Empty(alloc, DType::kFloat64, p.shape());
        EXPECT_TRUE(CopyConvert(p, pp).ok() && CopyConvert(p, pm).ok());
        SetElement(pp, i, x + h);
        SetElement(pm, i, x - h);
        plus[name] = pp;
        minus[name] = pm;
        return (loss(plus) - loss(minus)) / (2 * h);
      };
      const double h = 1e-6 * std::max(1.0, std::fabs(x));
      const double fd = (4 * central(h / 2) - central(h)) / 3;
      const double an = GetElement(grad, i);
      largest = std::max(largest, std::fabs(an));
      const double err = std::fabs(fd - an);
      const double rounding = 16 * 2.220446049250313e-16 * std::fabs(step->loss) / h;
      EXPECT_LE(err, 1e-6 * std::max(std::fabs(fd), std::fabs(an)) + rounding)
          << model << " " << name << "[" << i << "]: fd " << fd << " backward " << an;
      worst = std::max(worst, err / std::max({std::fabs(fd), std::fabs(an), 1e-3}));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * static_cast<int>(step->grads.size()));  // three per parameter
  EXPECT_GT(largest, 0) << model << ": every sampled gradient is zero";
  RecordProperty("coordinates", checked);
  std::printf("%s: %d coordinates, worst |fd - g| / max(|fd|, |g|, 1e-3) %.2e\n", model.c_str(),
              checked, worst);
}

std::vector<std::string> Cases() {
  std::vector<std::string> cases = ModelNames();
  cases.push_back("mlp+sigmoid");
  cases.push_back("mlp+tanh");
  cases.push_back("rnn-ops");
  cases.push_back("pool-ops");
  cases.push_back("volume-ops");
  cases.push_back("bag-ops");
  cases.push_back("index-ops");
  cases.push_back("layer-ops");
  cases.push_back("class-ops");
  return cases;
}

// In float32, ATen's sum-mode _embedding_bag leaves offset2bag empty, and the formula rebuilds
// it from the offsets. The loss weighs bag b by b + 1, so table row r's gradient is the sum of
// (bag + 1) over the indices reading it: ids [0, 0, 1, 1, 2, 2, 3] in bags [0, 3), [3, 6),
// [6, 7) give rows 2, 1 + 2, 2 + 2, 3 (an offset2bag of zeros, or one counted from 1, gives
// other sums).
TEST(EmbeddingBagFormulaTest, SumRebuildsOffset2bagFromTheOffsets) {
  constexpr char kBagSum[] = R"({"format": "overlap-graph", "version": 1, "name": "bag-sum",
 "nodes": [
  {"name": "w", "op": "placeholder", "target": "w", "args": [], "meta": {"shape": [4, 3], "dtype": "float32", "param": "table"}},
  {"name": "a7", "op": "call_function", "target": "aten.arange.start_step", "args": [0, 7, 1], "meta": {"shape": [7], "dtype": "int64"}},
  {"name": "ids", "op": "call_function", "target": "aten.div.Tensor_mode", "args": ["%a7", 2], "kwargs": {"rounding_mode": "floor"}, "meta": {"shape": [7], "dtype": "int64"}},
  {"name": "off", "op": "call_function", "target": "aten.arange.start_step", "args": [0, 7, 3], "meta": {"shape": [3], "dtype": "int64"}},
  {"name": "bs", "op": "call_function", "target": "aten._embedding_bag.default", "args": ["%w", "%ids", "%off"], "meta": {"shapes": [[3, 3], [0], [3], [3]], "dtypes": ["float32", "int64", "int64", "int64"]}},
  {"name": "out", "op": "call_function", "target": "operator.getitem", "args": ["%bs", 0], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "a3", "op": "call_function", "target": "aten.arange.start_step", "args": [1, 4, 1], "meta": {"shape": [3], "dtype": "int64"}},
  {"name": "coef", "op": "call_function", "target": "aten.unsqueeze.default", "args": ["%a3", 1], "meta": {"shape": [3, 1], "dtype": "int64", "aliases_input": true}},
  {"name": "weighted", "op": "call_function", "target": "aten.mul.Tensor", "args": ["%out", "%coef"], "meta": {"shape": [3, 3], "dtype": "float32"}},
  {"name": "loss", "op": "call_function", "target": "aten.sum.default", "args": ["%weighted"], "meta": {"shape": [], "dtype": "float32"}},
  {"name": "output", "op": "output", "target": "output", "args": [["%loss"]]}
 ],
 "params": [{"name": "table", "owner": "w", "shape": [4, 3], "dtype": "float32", "bytes": 48}]})";
  absl::StatusOr<Graph> g = ReadGraphJson(kBagSum);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<AotPair> pair = BuildAotPair(*g);
  ASSERT_TRUE(pair.ok()) << pair.status();
  int cumsums = 0;
  for (NodeId id : pair->backward.order()) {
    cumsums += pair->backward.node(id).target() == "aten.cumsum.default";
  }
  EXPECT_EQ(cumsums, 1);
  Allocator alloc;
  absl::StatusOr<TensorMap> seeded = SeededInputs(pair->forward, 3, alloc);
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  TensorMap params = {{"table", seeded->at("w")}};
  absl::StatusOr<AotStepResult> step = RunAotStep(*pair, params, {}, InterpreterOptions());
  ASSERT_TRUE(step.ok()) << step.status();
  const Tensor& grad = step->grads.at("table");
  const double want[4] = {2, 3, 4, 3};
  for (int64_t i = 0; i < grad.numel(); ++i) EXPECT_EQ(GetElement(grad, i), want[i / 3]) << i;
}

INSTANTIATE_TEST_SUITE_P(TinyModels, ModelGradientTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (c == '-' || c == '+') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace overlap
