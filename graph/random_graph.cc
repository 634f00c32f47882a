#include "graph/random_graph.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace overlap {

uint64_t SeededChoices::Below(uint64_t bound) {
  state_ += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  // Multiply-shift maps 64 random bits onto [0, bound) without a division.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(z) * bound) >> 64);
}

uint64_t ByteChoices::Below(uint64_t bound) {
  if (bound <= 1) return 0;
  uint64_t v = 0;
  for (uint64_t range = bound - 1; range > 0; range >>= 8) {
    v = (v << 8) | (pos_ < data_.size() ? data_[pos_++] : 0);
  }
  return v % bound;
}

namespace {

constexpr const char* kDtypes[] = {"float32", "bfloat16", "float16", "int64"};
constexpr int64_t kDtypeBytes[] = {4, 2, 2, 8};

struct FunctionOp {
  const char* target;
  bool alias;
};
constexpr FunctionOp kFunctions[] = {
    {"aten.add.Tensor", false},      {"aten.mul.Tensor", false},
    {"aten.mm.default", false},      {"aten.relu.default", false},
    {"aten.gelu.default", false},    {"aten.cat.default", false},
    {"aten.sum.dim_IntList", false}, {"aten.view.default", true},
    {"aten.t.default", true},        {"aten.transpose.int", true},
    {"aten.clone.default", false},   {"aten.addmm.default", false},
    {"operator.getitem", false},     {"aten.native_layer_norm.default", false},
};
constexpr const char* kMethods[] = {"view", "transpose", "contiguous", "size", "t"};

class Generator {
 public:
  Generator(ChoiceSource& c, int64_t max_nodes, bool lifted, bool full_meta)
      : c_(c),
        max_nodes_(std::max<int64_t>(2, max_nodes)),
        lifted_(lifted),
        full_meta_(full_meta) {}

  Graph Run() {
    g_.set_name("random");
    g_.set_has_params_key(true);
    g_.ReserveNodes(max_nodes_);
    const int64_t budget = max_nodes_ - 1;  // the output node is extra
    const int64_t inputs = 1 + static_cast<int64_t>(c_.Below(3));
    for (int64_t i = 0; i < inputs && count_ < budget; ++i) {
      NodeId id = Add(Op::kPlaceholder, absl::StrCat("x", i), absl::StrCat("x", i), {}, {});
      values_.push_back(id);
    }
    if (lifted_) {
      const int64_t params = std::min<int64_t>(1 + budget / 8, 1 + c_.Below(budget / 4 + 2));
      for (int64_t i = 0; i < params && count_ < budget; ++i) LiftedParam();
    }
    while (count_ < budget && !c_.Exhausted()) Step();
    AddOutput();
    return std::move(g_);
  }

 private:
  NodeId Add(Op op, const std::string& base, std::string target, std::vector<Value> args,
             ValueDict kwargs, bool alias = false) {
    absl::StatusOr<NodeId> id =
        g_.AddNode(op, g_.UniqueName(base), std::move(target), std::move(args), std::move(kwargs));
    // Names come from UniqueName and references from earlier nodes: cannot fail.
    NodeId n = *id;
    ++count_;
    if (op != Op::kOutput) SetMeta(n, alias);
    return n;
  }

  void SetMeta(NodeId id, bool alias) {
    if (!full_meta_ && c_.Chance(1, 2)) return;
    NodeMeta& m = g_.mutable_node(id).mutable_meta();
    const int rank = 1 + static_cast<int>(c_.Below(3));
    Shape shape;
    int64_t numel = 1;
    for (int i = 0; i < rank; ++i) {
      int64_t d = 1 + static_cast<int64_t>(c_.Below(1024));
      shape.push_back(d);
      numel *= d;
    }
    const int dt = static_cast<int>(c_.Below(4));
    m.set_shape(std::move(shape));
    m.set_dtype(kDtypes[dt]);
    m.set_tensor_size(numel * kDtypeBytes[dt]);
    m.set_device_time(alias ? 0.0 : static_cast<double>(c_.Below(1000000)) / 1e9);
    if (alias) m.set_aliases_input(true);
    if (c_.Chance(1, 64)) m.extra.emplace_back("stack_trace", "\"model.py:42 in forward\"");
  }

  // A value to read: usually a recent one (real graphs are local), sometimes any.
  NodeId PickValue() {
    const uint64_t n = values_.size();
    if (c_.Chance(3, 4)) return values_[n - 1 - c_.Below(std::min<uint64_t>(n, 8))];
    return values_[c_.Below(n)];
  }

  Value MakeArg(int depth) {
    switch (c_.Below(16)) {
      case 10:
        return Value::Int(static_cast<int64_t>(c_.Below(2048)) - 1024);
      case 11:
        return Value::Double(static_cast<double>(c_.Below(4096)) / 8.0 - 100.0);
      case 12:
        return Value::String(c_.Chance(1, 4) ? "%not_a_ref" : absl::StrCat("s", c_.Below(100)));
      case 13:
        return c_.Chance(1, 2) ? Value() : Value::Bool(c_.Chance(1, 2));
      case 14: {
        if (depth >= 3) return Value::Ref(PickValue());
        std::vector<Value> items;
        const int n = static_cast<int>(c_.Below(4));
        for (int i = 0; i < n; ++i) items.push_back(MakeArg(depth + 1));
        return Value::List(std::move(items));
      }
      case 15: {
        auto item = [&]() -> Value {
          switch (c_.Below(3)) {
            case 0:
              return Value();
            case 1:
              return Value::Int(static_cast<int64_t>(c_.Below(64)));
            default:
              return Value::Ref(PickValue());
          }
        };
        Value a = item(), b = item(), s = item();
        return Value::Slice(std::move(a), std::move(b), std::move(s));
      }
      default:
        return Value::Ref(PickValue());
    }
  }

  std::vector<Value> MakeArgs() {
    std::vector<Value> args = {Value::Ref(PickValue())};
    const int extra = static_cast<int>(c_.Below(3));
    for (int i = 0; i < extra; ++i) args.push_back(MakeArg(1));
    return args;
  }

  ValueDict MakeKwargs() {
    ValueDict kw;
    if (!c_.Chance(1, 6)) return kw;
    kw.emplace_back("dim", Value::Int(static_cast<int64_t>(c_.Below(4))));
    if (c_.Chance(1, 2)) kw.emplace_back("other", Value::Ref(PickValue()));
    if (c_.Chance(1, 4)) {
      kw.emplace_back("opts",
                      Value::Dict({{"memory_format", Value::String("torch.contiguous_format")},
                                   {"src", Value::Ref(PickValue())}}));
    }
    return kw;
  }

  // A parameter of `bytes`, possibly tied to an earlier one, frozen or ignored.
  Param NewParam(std::string name, std::string owner) {
    Param p;
    p.name = std::move(name);
    p.owner = std::move(owner);
    static constexpr int64_t kScales[] = {1 << 10, 1 << 16, 1 << 20, 1 << 25};
    p.bytes = 4 * (1 + static_cast<int64_t>(c_.Below(kScales[c_.Below(4)] / 4)));
    p.dtype = "float32";
    p.has_dtype = c_.Chance(1, 2);
    p.shape = {p.bytes / 4};
    p.has_shape = p.has_dtype;
    if (!params_.empty() && c_.Chance(1, 10)) {  // tied to an earlier parameter
      const Param& t = g_.params()[params_[c_.Below(params_.size())]];
      p.bytes = t.bytes;
      p.shape = t.shape;
      p.storage = t.storage_key();
      p.has_storage = true;
      p.requires_grad = t.requires_grad;  // one tensor, one requires_grad and ignore flag
      p.has_requires_grad = !t.requires_grad || t.has_requires_grad;
      p.ddp_ignored = t.ddp_ignored;
      p.has_ddp_ignored = t.ddp_ignored;
      return p;
    } else if (c_.Chance(1, 8)) {
      p.storage = p.name;  // explicit but equal to the default
      p.has_storage = true;
    }
    if (c_.Chance(1, 10)) {
      p.requires_grad = false;
      p.has_requires_grad = true;
    } else if (c_.Chance(1, 10)) {
      p.has_requires_grad = true;
    }
    if (c_.Chance(1, 20)) {
      p.ddp_ignored = true;
      p.has_ddp_ignored = true;
    }
    return p;
  }

  void AddParam(Param p) {
    params_.push_back(static_cast<int>(g_.params().size()));
    (void)g_.AddParam(std::move(p));  // (owner, name) pairs are fresh by construction
  }

  void LiftedParam() {
    const int64_t k = next_param_++;
    const std::string name = absl::StrCat("w", k, ".weight");
    NodeId id = Add(Op::kPlaceholder, absl::StrCat("p_w", k), absl::StrCat("p_w", k), {}, {});
    Param p = NewParam(name, g_.node(id).name());
    g_.mutable_node(id).mutable_meta().set_param(p.name);
    std::string tied_name = absl::StrCat("w", k, ".alias");
    const bool tie_twice = c_.Chance(1, 16);
    const std::string storage = p.storage_key();
    const int64_t bytes = p.bytes;
    const bool requires_grad = p.requires_grad;
    const bool ignored = p.ddp_ignored;
    AddParam(std::move(p));
    if (c_.Chance(1, 12)) {
      // A row of the whole model's table that this graph does not read (an AOT backward
      // lists every parameter; its owner placeholder is absent here: graph.h).
      AddParam(NewParam(absl::StrCat("w", k, ".absent"), absl::StrCat("absent_w", k)));
    }
    if (tie_twice) {  // a second name for the same placeholder (tied weights in AOT graphs)
      Param q;
      q.name = tied_name;
      q.owner = g_.node(id).name();
      q.bytes = bytes;
      q.storage = storage;
      q.has_storage = true;
      q.requires_grad = requires_grad;
      q.has_requires_grad = !requires_grad;
      q.ddp_ignored = ignored;
      q.has_ddp_ignored = ignored;
      AddParam(std::move(q));
    }
    values_.push_back(id);
  }

  void Step() {
    const uint64_t r = c_.Below(100);
    if (!lifted_ && r < 18) return CallModule();
    if (!lifted_ && r < 23) return GetAttr();
    if (r < 33) {
      const char* m = kMethods[c_.Below(std::size(kMethods))];
      values_.push_back(Add(Op::kCallMethod, m, m, MakeArgs(), MakeKwargs()));
      return;
    }
    const FunctionOp& f = kFunctions[c_.Below(std::size(kFunctions))];
    std::string base = f.target;
    base = base.substr(base.find('.') + 1);
    base = base.substr(0, base.find('.'));
    values_.push_back(Add(Op::kCallFunction, base, f.target, MakeArgs(), MakeKwargs(), f.alias));
  }

  void CallModule() {
    std::string path;
    if (!modules_.empty() && c_.Chance(1, 5)) {
      path = modules_[c_.Below(modules_.size())];  // a module called again
    } else {
      const int64_t k = next_module_++;
      path = c_.Chance(1, 3) ? absl::StrCat("block", k / 4, ".fc", k) : absl::StrCat("m", k);
      const int n = static_cast<int>(c_.Below(4));
      for (int i = 0; i < n; ++i) {
        AddParam(NewParam(absl::StrCat(path, i == 0 ? ".weight" : absl::StrCat(".w", i)), path));
      }
      modules_.push_back(path);
    }
    std::string base = path;
    std::replace(base.begin(), base.end(), '.', '_');
    values_.push_back(Add(Op::kCallModule, base, path, MakeArgs(), MakeKwargs()));
  }

  void GetAttr() {
    std::string target;
    const uint64_t r = c_.Below(3);
    if (r == 0 && !params_.empty()) {
      target = g_.params()[params_[c_.Below(params_.size())]].name;
    } else if (r == 1) {
      target = absl::StrCat("attr", next_attr_++, ".weight");
      AddParam(NewParam(target, target));
    } else {
      target = absl::StrCat("buffer", next_attr_++);  // not a parameter
    }
    std::string base = target;
    std::replace(base.begin(), base.end(), '.', '_');
    values_.push_back(Add(Op::kGetAttr, base, target, {}, {}));
  }

  void AddOutput() {
    std::vector<Value> outs;
    for (auto it = values_.rbegin(); it != values_.rend() && outs.size() < 8; ++it) {
      if (g_.node(*it).users().empty() && g_.node(*it).op() != Op::kPlaceholder) {
        outs.push_back(Value::Ref(*it));
      }
    }
    if (outs.empty()) outs.push_back(Value::Ref(values_.back()));
    Value ret;
    const uint64_t shape = c_.Below(8);
    if (shape == 0 && outs.size() == 1) {
      ret = std::move(outs[0]);
    } else if (shape == 1 && outs.size() >= 2) {
      Value tail = std::move(outs.back());
      outs.pop_back();
      ret = Value::List({Value::List(std::move(outs)), std::move(tail)});
    } else {
      ret = Value::List(std::move(outs));
    }
    (void)g_.AddNode(Op::kOutput, g_.UniqueName("output"), "output", {std::move(ret)});
  }

  ChoiceSource& c_;
  const int64_t max_nodes_;
  const bool lifted_;
  const bool full_meta_;
  Graph g_;
  int64_t count_ = 0;
  std::vector<NodeId> values_;
  std::vector<int> params_;
  std::vector<std::string> modules_;
  int64_t next_module_ = 0;
  int64_t next_param_ = 0;
  int64_t next_attr_ = 0;
};

}  // namespace

Graph GenerateGraph(ChoiceSource& choices, int64_t max_nodes, bool lifted, bool full_meta) {
  return Generator(choices, max_nodes, lifted, full_meta).Run();
}

Graph RandomGraph(const RandomGraphOptions& options) {
  SeededChoices choices(options.seed);
  return GenerateGraph(choices, options.nodes, options.lifted, options.full_meta);
}

Graph GraphFromBytes(absl::Span<const uint8_t> data, int64_t max_nodes) {
  const uint8_t style = data.empty() ? 0 : data[0];
  ByteChoices choices(data.empty() ? data : data.subspan(1));
  return GenerateGraph(choices, max_nodes, (style & 1) != 0, (style & 2) == 0);
}

}  // namespace overlap
