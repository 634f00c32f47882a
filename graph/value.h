// Argument values of graph nodes, kept as faithfully as torch.fx keeps them.
//
// A node's `args` and `kwargs` hold constants (None, bools, ints, floats, strings), nested
// lists (FX tuples and lists), dicts with ordered string keys, slices, and references to
// other nodes of the same graph. A `Value` is one of those, by value: copying a Value copies
// the whole tree. References hold a NodeId, which stays valid while that node is alive.
//
//   Value add = Value::List({Value::Ref(x), Value::Int(1)});
//   add.ForEachRef([&](NodeId id) { ... });   // depth-first, left to right
#ifndef OVERLAP_GRAPH_VALUE_H_
#define OVERLAP_GRAPH_VALUE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/functional/function_ref.h"

namespace overlap {

// Identifies a node for the lifetime of its graph. Ids are dense from 0 in creation order
// and never reused; an erased node's id is dead.
using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

class Value;

// A dict argument: keys in their original order (FX keeps insertion order, and the data
// inputs of a node follow it).
using ValueDict = std::vector<std::pair<std::string, Value>>;

// One argument value. Small (40 bytes); nested containers live on the heap.
class Value {
 public:
  enum class Kind : uint8_t {
    kNone,  // Python None / JSON null
    kBool,
    kInt,     // any JSON integer that fits in int64
    kDouble,  // any other JSON number
    kString,  // a string constant (never a reference)
    kRef,     // a reference to another node's result
    kList,    // an FX tuple or list
    kDict,    // a dict with string keys, ordered
    kSlice,   // slice(start, stop, step): exactly three items
  };

  // None.
  Value() = default;
  static Value Bool(bool b) { return Value(Storage(b)); }
  static Value Int(int64_t i) { return Value(Storage(i)); }
  static Value Double(double d) { return Value(Storage(d)); }
  static Value String(std::string s) { return Value(Storage(std::move(s))); }
  static Value Ref(NodeId id) { return Value(Storage(RefBox{id})); }
  static Value List(std::vector<Value> items) { return Value(Storage(ListBox{std::move(items)})); }
  static Value Dict(ValueDict entries) { return Value(Storage(DictBox{std::move(entries)})); }
  // A slice of exactly three items (start, stop, step); any item may be None or a Ref.
  static Value Slice(Value start, Value stop, Value step);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_ref() const { return kind() == Kind::kRef; }

  // Accessors: precondition kind() matches (checked by std::get).
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  NodeId as_ref() const { return std::get<RefBox>(v_).id; }
  // Items of a list or of a slice (three items).
  const std::vector<Value>& items() const;
  std::vector<Value>& mutable_items();
  const ValueDict& dict() const { return std::get<DictBox>(v_).entries; }
  ValueDict& mutable_dict() { return std::get<DictBox>(v_).entries; }

  // Calls `fn` on every node reference in this value, depth-first, left to right (dict values
  // in key order). Cost: O(size of the value).
  void ForEachRef(absl::FunctionRef<void(NodeId)> fn) const;
  // Replaces every reference to `from` by `to`; returns how many were replaced.
  int ReplaceRef(NodeId from, NodeId to);
  // Rewrites every reference through `map` (called once per reference).
  void MapRefs(absl::FunctionRef<NodeId(NodeId)> map);

  friend bool operator==(const Value& a, const Value& b) { return a.v_ == b.v_; }
  friend bool operator!=(const Value& a, const Value& b) { return !(a == b); }

 private:
  struct RefBox {
    NodeId id;
    friend bool operator==(const RefBox& a, const RefBox& b) { return a.id == b.id; }
  };
  struct ListBox {
    std::vector<Value> items;
    friend bool operator==(const ListBox& a, const ListBox& b) { return a.items == b.items; }
  };
  struct DictBox {
    ValueDict entries;
    friend bool operator==(const DictBox& a, const DictBox& b) { return a.entries == b.entries; }
  };
  struct SliceBox {
    std::vector<Value> items;
    friend bool operator==(const SliceBox& a, const SliceBox& b) { return a.items == b.items; }
  };
  // Alternative order must match Kind.
  using Storage = std::variant<std::monostate, bool, int64_t, double, std::string, RefBox, ListBox,
                               DictBox, SliceBox>;
  explicit Value(Storage v) : v_(std::move(v)) {}

  Storage v_;
};

}  // namespace overlap

#endif  // OVERLAP_GRAPH_VALUE_H_
