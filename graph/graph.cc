#include "graph/graph.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"

namespace overlap {

namespace {
constexpr absl::string_view kOpNames[] = {"placeholder", "get_attr",    "call_function",
                                          "call_module", "call_method", "output"};
}  // namespace

absl::string_view OpName(Op op) { return kOpNames[static_cast<int>(op)]; }

bool ParseOp(absl::string_view s, Op* op) {
  for (int i = 0; i < 6; ++i) {
    if (s == kOpNames[i]) {
      *op = static_cast<Op>(i);
      return true;
    }
  }
  return false;
}

bool IsValidNodeName(absl::string_view name) {
  if (name.empty()) return false;
  unsigned char c0 = name[0];
  if (!(absl::ascii_isalpha(c0) || c0 == '_')) return false;
  for (unsigned char c : name) {
    if (!(absl::ascii_isalnum(c) || c == '_' || c == '.')) return false;
  }
  return true;
}

bool NodeMeta::empty() const {
  return !has_shape && !has_dtype && !has_tensor_size && !has_device_time && !has_aliases_input &&
         !has_param && !has_grad_of && extra.empty();
}

bool operator==(const NodeMeta& a, const NodeMeta& b) {
  auto same = [](bool ha, bool hb, auto&& va, auto&& vb) { return ha == hb && (!ha || va == vb); };
  return same(a.has_shape, b.has_shape, a.shape, b.shape) &&
         same(a.has_dtype, b.has_dtype, a.dtype, b.dtype) &&
         same(a.has_tensor_size, b.has_tensor_size, a.tensor_size, b.tensor_size) &&
         same(a.has_device_time, b.has_device_time, a.device_time, b.device_time) &&
         same(a.has_aliases_input, b.has_aliases_input, a.aliases_input, b.aliases_input) &&
         same(a.has_param, b.has_param, a.param, b.param) &&
         same(a.has_grad_of, b.has_grad_of, a.grad_of, b.grad_of) && a.extra == b.extra;
}

bool operator==(const Param& a, const Param& b) {
  return a.name == b.name && a.owner == b.owner && a.has_shape == b.has_shape &&
         (!a.has_shape || a.shape == b.shape) && a.has_dtype == b.has_dtype &&
         (!a.has_dtype || a.dtype == b.dtype) && a.bytes == b.bytes &&
         a.requires_grad == b.requires_grad &&
         (a.has_requires_grad || !a.requires_grad) == (b.has_requires_grad || !b.requires_grad) &&
         a.ddp_ignored == b.ddp_ignored &&
         (a.has_ddp_ignored || a.ddp_ignored) == (b.has_ddp_ignored || b.ddp_ignored) &&
         (a.has_storage || !a.storage.empty()) == (b.has_storage || !b.storage.empty()) &&
         a.storage_key() == b.storage_key() && a.extra == b.extra;
}

const std::string& Node::EmptyTarget() {
  static const auto* empty = new std::string();
  return *empty;
}

const std::string* Graph::Intern(std::string s) {
  if (targets_ == nullptr) {  // a moved-from graph being reused
    targets_ = std::make_unique<absl::node_hash_set<std::string>>();
  }
  return &*targets_->insert(std::move(s)).first;
}

Graph::Graph(const Graph& other) { *this = other; }

Graph& Graph::operator=(const Graph& other) {
  if (this == &other) return *this;
  nodes_ = other.nodes_;
  // The copied nodes point into other's pool: re-point them into ours.
  targets_ = std::make_unique<absl::node_hash_set<std::string>>();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].target_ = Intern(*nodes_[i].target_);
  }
  head_ = other.head_;
  tail_ = other.tail_;
  next_ = other.next_;
  prev_ = other.prev_;
  live_ = other.live_;
  params_ = other.params_;
  name_ = other.name_;
  has_name_ = other.has_name_;
  has_params_key_ = other.has_params_key_;
  extra_ = other.extra_;
  RebuildIndexes();
  return *this;
}

void Graph::RebuildIndexes() {
  by_name_.clear();
  by_name_.reserve(live_);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.alive_) by_name_.emplace(n.name_, n.id_);
  }
  params_by_owner_.clear();
  params_by_name_.clear();
  param_names_by_owner_.clear();  // rebuilt on demand by AddParam
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) {
    params_by_owner_[params_[i].owner].push_back(i);
    params_by_name_.emplace(params_[i].name, i);
  }
}

void Graph::ReserveNodes(int64_t n) {
  by_name_.reserve(n);
  next_.reserve(n);
  prev_.reserve(n);
}

absl::Status Graph::CheckName(absl::string_view name) const {
  if (!IsValidNodeName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node name \"", name, "\" is malformed (must match [A-Za-z_][A-Za-z0-9_.]*)"));
  }
  if (by_name_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate node name \"", name, "\""));
  }
  return absl::OkStatus();
}

absl::Status Graph::CheckRefs(const std::string& node_name, const std::vector<Value>& args,
                              const ValueDict& kwargs) const {
  NodeId bad = kNoNode;
  bool found = false;
  auto check = [&](NodeId id) {
    if (!found && !IsLive(id)) {
      found = true;
      bad = id;
    }
  };
  for (const Value& v : args) v.ForEachRef(check);
  for (const auto& [k, v] : kwargs) v.ForEachRef(check);
  if (found) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node \"", node_name, "\": argument references a missing node (id ", bad, ")"));
  }
  return absl::OkStatus();
}

void CollectDataInputs(const std::vector<Value>& args, const ValueDict& kwargs, NodeList* inputs,
                       uint32_t* num_arg_inputs) {
  inputs->clear();
  // Short lists (almost every node) dedup by scanning; long ones (an output node returning
  // thousands of gradients) switch to a hash set so the cost stays linear.
  constexpr size_t kScanLimit = 16;
  absl::flat_hash_set<NodeId> seen;
  auto add = [&](NodeId in) {
    if (inputs->size() < kScanLimit) {
      if (std::find(inputs->begin(), inputs->end(), in) == inputs->end()) inputs->push_back(in);
      return;
    }
    if (seen.empty()) seen.insert(inputs->begin(), inputs->end());
    if (seen.insert(in).second) inputs->push_back(in);
  };
  for (const Value& v : args) v.ForEachRef(add);
  *num_arg_inputs = static_cast<uint32_t>(inputs->size());
  for (const auto& [k, v] : kwargs) v.ForEachRef(add);
}

void Graph::LinkInputs(NodeId id) {
  Node& n = nodes_[id];
  CollectDataInputs(n.args_, n.kwargs_, &n.inputs_, &n.num_arg_inputs_);
  for (NodeId in : n.inputs_) nodes_[in].users_.push_back(id);
}

void Graph::UnlinkInputs(NodeId id) {
  Node& n = nodes_[id];
  for (NodeId in : n.inputs_) {
    auto& users = nodes_[in].users_;
    users.erase(std::find(users.begin(), users.end(), id));
  }
  n.inputs_.clear();
  n.num_arg_inputs_ = 0;
}

void Graph::Unlink(NodeId id) {
  if (prev_[id] != kNoNode)
    next_[prev_[id]] = next_[id];
  else
    head_ = next_[id];
  if (next_[id] != kNoNode)
    prev_[next_[id]] = prev_[id];
  else
    tail_ = prev_[id];
  prev_[id] = next_[id] = kNoNode;
}

void Graph::LinkBefore(NodeId id, NodeId anchor) {
  next_[id] = anchor;
  prev_[id] = prev_[anchor];
  if (prev_[anchor] != kNoNode)
    next_[prev_[anchor]] = id;
  else
    head_ = id;
  prev_[anchor] = id;
}

void Graph::LinkAfter(NodeId id, NodeId anchor) {
  prev_[id] = anchor;
  next_[id] = next_[anchor];
  if (next_[anchor] != kNoNode)
    prev_[next_[anchor]] = id;
  else
    tail_ = id;
  next_[anchor] = id;
}

absl::StatusOr<NodeId> Graph::AddNode(Op op, std::string name, std::string target,
                                      std::vector<Value> args, ValueDict kwargs, InsertPoint at) {
  if (!IsValidNodeName(name)) return CheckName(name);
  OVERLAP_RETURN_IF_ERROR(CheckRefs(name, args, kwargs));
  if (at.where != InsertPoint::Where::kEnd && !IsLive(at.anchor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node \"", name, "\": insertion anchor is not a live node"));
  }
  const NodeId id = static_cast<NodeId>(nodes_.size());
  Node& n = nodes_.emplace_back();
  n.name_ = std::move(name);
  // One hash operation both checks uniqueness and indexes the name (the key views the
  // node's own string, which never moves).
  if (!by_name_.try_emplace(n.name_, id).second) {
    absl::Status dup = CheckName(n.name_);
    nodes_.pop_back();
    return dup;
  }
  next_.push_back(kNoNode);
  prev_.push_back(kNoNode);
  n.id_ = id;
  n.op_ = op;
  n.target_ = Intern(std::move(target));
  n.args_ = std::move(args);
  n.kwargs_ = std::move(kwargs);
  switch (at.where) {
    case InsertPoint::Where::kEnd:
      if (tail_ == kNoNode) {
        head_ = tail_ = id;
      } else {
        LinkAfter(id, tail_);
      }
      break;
    case InsertPoint::Where::kBefore:
      LinkBefore(id, at.anchor);
      break;
    case InsertPoint::Where::kAfter:
      LinkAfter(id, at.anchor);
      break;
  }
  ++live_;
  LinkInputs(id);
  return id;
}

absl::Status Graph::SetArgs(NodeId id, std::vector<Value> args, ValueDict kwargs) {
  if (!IsLive(id)) return absl::InvalidArgumentError("SetArgs on a dead node");
  OVERLAP_RETURN_IF_ERROR(CheckRefs(nodes_[id].name_, args, kwargs));
  UnlinkInputs(id);
  nodes_[id].args_ = std::move(args);
  nodes_[id].kwargs_ = std::move(kwargs);
  LinkInputs(id);
  return absl::OkStatus();
}

absl::Status Graph::Rename(NodeId id, std::string name) {
  if (!IsLive(id)) return absl::InvalidArgumentError("Rename of a dead node");
  if (nodes_[id].name_ == name) return absl::OkStatus();
  OVERLAP_RETURN_IF_ERROR(CheckName(name));
  by_name_.erase(nodes_[id].name_);
  nodes_[id].name_ = std::move(name);
  by_name_.emplace(nodes_[id].name_, id);
  return absl::OkStatus();
}

int Graph::ReplaceAllUsesWith(NodeId from, NodeId to) {
  return ReplaceAllUsesWith(from, to, [](const Node&) { return true; });
}

int Graph::ReplaceAllUsesWith(NodeId from, NodeId to,
                              absl::FunctionRef<bool(const Node& user)> keep_user) {
  if (from == to) return 0;
  // Only the edges that change are touched: a rewritten user leaves `from`'s users and joins
  // `to`'s; its other inputs keep their users lists as they are. (Unlinking and relinking
  // every input of every user made this O(users x degree of their other inputs): quadratic
  // when many users share an input.) Cost: O(sum of the rewritten users' argument sizes).
  const NodeList users = nodes_[from].users_;  // copy: the loop edits the list
  NodeList kept;
  int rewritten = 0;
  for (NodeId u : users) {
    if (u == to || !keep_user(nodes_[u])) {
      kept.push_back(u);
      continue;
    }
    Node& n = nodes_[u];
    const bool reads_to = std::find(n.inputs_.begin(), n.inputs_.end(), to) != n.inputs_.end();
    for (Value& v : n.args_) v.ReplaceRef(from, to);
    for (auto& [k, v] : n.kwargs_) v.ReplaceRef(from, to);
    CollectDataInputs(n.args_, n.kwargs_, &n.inputs_, &n.num_arg_inputs_);
    if (!reads_to) nodes_[to].users_.push_back(u);
    ++rewritten;
  }
  nodes_[from].users_ = std::move(kept);
  return rewritten;
}

absl::Status Graph::Erase(NodeId id) {
  if (!IsLive(id)) return absl::InvalidArgumentError("Erase of a dead node");
  Node& n = nodes_[id];
  if (!n.users_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot erase node \"", n.name_, "\": it has ", n.users_.size(),
                     " user(s), first \"", nodes_[n.users_[0]].name_, "\""));
  }
  UnlinkInputs(id);
  Unlink(id);
  by_name_.erase(n.name_);
  n.alive_ = false;
  n.args_.clear();
  n.kwargs_.clear();
  --live_;
  return absl::OkStatus();
}

void Graph::MoveBefore(NodeId id, NodeId anchor) {
  if (id == anchor) return;
  Unlink(id);
  LinkBefore(id, anchor);
}

void Graph::MoveAfter(NodeId id, NodeId anchor) {
  if (id == anchor) return;
  Unlink(id);
  LinkAfter(id, anchor);
}

absl::Status Graph::SetOrder(absl::Span<const NodeId> order) {
  if (static_cast<int64_t>(order.size()) != live_) {
    return absl::InvalidArgumentError(
        absl::StrCat("order has ", order.size(), " nodes, graph has ", live_));
  }
  std::vector<bool> seen(nodes_.size(), false);
  for (NodeId id : order) {
    if (!IsLive(id))
      return absl::InvalidArgumentError(absl::StrCat("order names dead node id ", id));
    if (seen[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("order lists node \"", nodes_[id].name_, "\" twice"));
    }
    seen[id] = true;
  }
  head_ = tail_ = kNoNode;
  for (NodeId id : order) {
    prev_[id] = tail_;
    next_[id] = kNoNode;
    if (tail_ != kNoNode)
      next_[tail_] = id;
    else
      head_ = id;
    tail_ = id;
  }
  return absl::OkStatus();
}

NodeId Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? kNoNode : it->second;
}

std::vector<NodeId> Graph::OrderVector() const {
  std::vector<NodeId> out;
  out.reserve(live_);
  for (NodeId id : order()) out.push_back(id);
  return out;
}

std::string Graph::UniqueName(absl::string_view base) const {
  std::string candidate(base);
  for (char& c : candidate) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) c = '_';
  }
  if (candidate.empty() || absl::ascii_isdigit(static_cast<unsigned char>(candidate[0]))) {
    candidate.insert(candidate.begin(), '_');
  }
  if (!by_name_.contains(candidate)) return candidate;
  // FX: "name_<n>" increments n; anything else gets "_1".
  std::string stem = candidate;
  int64_t n = 0;
  size_t us = candidate.rfind('_');
  if (us != std::string::npos && us + 1 < candidate.size() &&
      std::all_of(candidate.begin() + us + 1, candidate.end(),
                  [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) &&
      absl::SimpleAtoi(absl::string_view(candidate).substr(us + 1), &n) &&
      n < std::numeric_limits<int64_t>::max() / 2) {
    stem = candidate.substr(0, us);
  } else {
    n = 0;  // not "<stem>_<n>", or n too close to overflow: count from "<candidate>_1"
  }
  // Remember where each stem's search ended, so naming many nodes "add" stays O(1) each
  // (FX keeps the same kind of per-base counter).
  int64_t& hint = name_hints_[stem];
  if (n < hint) n = hint;
  while (true) {
    ++n;
    std::string name = absl::StrCat(stem, "_", n);
    if (!by_name_.contains(name)) {
      hint = n;
      return name;
    }
  }
}

absl::Status Graph::AddParam(Param p) {
  if (p.name.empty()) return absl::InvalidArgumentError("parameter with an empty name");
  if (p.bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter \"", p.name, "\": bytes is negative (", p.bytes, ")"));
  }
  auto& owned = params_by_owner_[p.owner];
  // A scan of the owner's few entries; a hash set of its names once it has many (a module may
  // own 10^5 parameters, and a scan per entry would be quadratic).
  constexpr size_t kScanParams = 16;
  bool listed = false;
  if (owned.size() < kScanParams) {
    for (int i : owned) listed = listed || params_[i].name == p.name;
  } else {
    absl::flat_hash_set<std::string>& names = param_names_by_owner_[p.owner];
    if (names.empty()) {
      for (int i : owned) names.insert(params_[i].name);
    }
    listed = !names.insert(p.name).second;
  }
  if (listed) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter \"", p.name, "\" with owner \"", p.owner, "\" is listed twice"));
  }
  const int index = static_cast<int>(params_.size());
  owned.push_back(index);
  params_by_name_.emplace(p.name, index);
  params_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Span<const int> Graph::ParamsOwnedBy(absl::string_view owner) const {
  auto it = params_by_owner_.find(owner);
  if (it == params_by_owner_.end()) return {};
  return it->second;
}

int Graph::FindParam(absl::string_view name) const {
  auto it = params_by_name_.find(name);
  return it == params_by_name_.end() ? -1 : it->second;
}

// Compares two values, references by the referenced node's name.
bool SameValue(const Graph& ga, const Value& a, const Graph& gb, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kRef:
      return ga.node(a.as_ref()).name() == gb.node(b.as_ref()).name();
    case Value::Kind::kList:
    case Value::Kind::kSlice: {
      const auto& ia = a.items();
      const auto& ib = b.items();
      if (ia.size() != ib.size()) return false;
      for (size_t i = 0; i < ia.size(); ++i) {
        if (!SameValue(ga, ia[i], gb, ib[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const auto& da = a.dict();
      const auto& db = b.dict();
      if (da.size() != db.size()) return false;
      for (size_t i = 0; i < da.size(); ++i) {
        if (da[i].first != db[i].first || !SameValue(ga, da[i].second, gb, db[i].second)) {
          return false;
        }
      }
      return true;
    }
    case Value::Kind::kDouble: {
      double x = a.as_double(), y = b.as_double();
      return x == y || (x != x && y != y);
    }
    default:
      return a == b;
  }
}

bool operator==(const Graph& a, const Graph& b) {
  if (a.size() != b.size() || a.has_name_ != b.has_name_ || a.name_ != b.name_ ||
      (a.has_params_key_ || !a.params_.empty()) != (b.has_params_key_ || !b.params_.empty()) ||
      a.params_ != b.params_ || a.extra_ != b.extra_) {
    return false;
  }
  NodeId x = a.first(), y = b.first();
  for (; x != kNoNode && y != kNoNode; x = a.next(x), y = b.next(y)) {
    const Node& m = a.node(x);
    const Node& n = b.node(y);
    if (m.name() != n.name() || m.op() != n.op() || m.target() != n.target() ||
        m.args().size() != n.args().size() || m.kwargs().size() != n.kwargs().size() ||
        (m.has_kwargs_key() || !m.kwargs().empty()) !=
            (n.has_kwargs_key() || !n.kwargs().empty()) ||
        (m.has_meta_key() || !m.meta().empty()) != (n.has_meta_key() || !n.meta().empty()) ||
        !(m.meta() == n.meta()) || m.extra() != n.extra()) {
      return false;
    }
    for (size_t i = 0; i < m.args().size(); ++i) {
      if (!SameValue(a, m.args()[i], b, n.args()[i])) return false;
    }
    for (size_t i = 0; i < m.kwargs().size(); ++i) {
      if (m.kwargs()[i].first != n.kwargs()[i].first ||
          !SameValue(a, m.kwargs()[i].second, b, n.kwargs()[i].second)) {
        return false;
      }
    }
  }
  return x == kNoNode && y == kNoNode;
}

ParamOwnership ClassifyParams(const Graph& g) {
  ParamOwnership out;
  const auto& params = g.params();
  out.present.assign(params.size(), 0);
  absl::flat_hash_set<absl::string_view> owners, get_attr_targets;
  bool has_call_module = false;
  if (!params.empty()) {
    for (NodeId id : g.order()) {
      const Node& n = g.node(id);
      switch (n.op()) {
        case Op::kCallModule:
          has_call_module = true;
          owners.insert(n.target());
          break;
        case Op::kGetAttr:
          owners.insert(n.target());
          get_attr_targets.insert(n.target());
          break;
        case Op::kPlaceholder:
          owners.insert(n.name());
          owners.insert(n.target());
          break;
        default:
          break;
      }
    }
  }
  bool owned_by_get_attr = false;
  for (size_t i = 0; i < params.size(); ++i) {
    out.present[i] = owners.contains(params[i].owner);
    out.absent += !out.present[i];
    owned_by_get_attr |= get_attr_targets.contains(params[i].owner);
  }
  out.lifted = !has_call_module && !owned_by_get_attr;
  return out;
}

std::optional<ModuleOwnedParam> FirstModuleOwnedParam(const Graph& g) {
  for (NodeId id : g.order()) {
    const Node& n = g.node(id);
    int owned = -1;
    if (n.op() == Op::kCallModule && !g.ParamsOwnedBy(n.target()).empty()) {
      owned = g.ParamsOwnedBy(n.target())[0];
    } else if (n.op() == Op::kGetAttr) {
      owned = g.FindParam(n.target());
    }
    if (owned >= 0) return ModuleOwnedParam{owned, id};
  }
  return std::nullopt;
}

}  // namespace overlap
