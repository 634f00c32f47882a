#include "graph/value.h"

namespace overlap {

Value Value::Slice(Value start, Value stop, Value step) {
  std::vector<Value> items;
  items.reserve(3);
  items.push_back(std::move(start));
  items.push_back(std::move(stop));
  items.push_back(std::move(step));
  return Value(Storage(SliceBox{std::move(items)}));
}

const std::vector<Value>& Value::items() const {
  if (auto* s = std::get_if<SliceBox>(&v_)) return s->items;
  return std::get<ListBox>(v_).items;
}

std::vector<Value>& Value::mutable_items() {
  if (auto* s = std::get_if<SliceBox>(&v_)) return s->items;
  return std::get<ListBox>(v_).items;
}

void Value::ForEachRef(absl::FunctionRef<void(NodeId)> fn) const {
  switch (kind()) {
    case Kind::kRef:
      fn(as_ref());
      return;
    case Kind::kList:
    case Kind::kSlice:
      for (const Value& v : items()) v.ForEachRef(fn);
      return;
    case Kind::kDict:
      for (const auto& [key, v] : dict()) v.ForEachRef(fn);
      return;
    default:
      return;
  }
}

void Value::MapRefs(absl::FunctionRef<NodeId(NodeId)> map) {
  switch (kind()) {
    case Kind::kRef:
      std::get<RefBox>(v_).id = map(as_ref());
      return;
    case Kind::kList:
    case Kind::kSlice:
      for (Value& v : mutable_items()) v.MapRefs(map);
      return;
    case Kind::kDict:
      for (auto& [key, v] : mutable_dict()) v.MapRefs(map);
      return;
    default:
      return;
  }
}

int Value::ReplaceRef(NodeId from, NodeId to) {
  int n = 0;
  MapRefs([&](NodeId id) {
    if (id != from) return id;
    ++n;
    return to;
  });
  return n;
}

}  // namespace overlap
