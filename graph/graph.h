// The graph IR: a torch.fx-style dataflow graph with tensor metadata and a parameter table.
//
// A Graph is an ordered list of nodes (the order is the execution order and must be
// topological) plus a table of parameters. Nodes carry FX's six ops, a target, faithful
// `args` / `kwargs` (see value.h), and metadata (shape, dtype, tensor_size in bytes,
// device_time in seconds, plus any unknown keys, kept verbatim). Each node's data inputs and
// users are derived from its arguments and kept up to date by every mutation.
//
// Design for size: nodes live in fixed-size chunks (stable addresses), the order is an intrusive
// doubly-linked list (O(1) insert / erase / move), and names map to ids in a hash map (O(1)
// lookup). A million-node graph with full metadata takes a few hundred bytes per node.
//
//   Graph g;
//   NodeId x = *g.AddNode(Op::kPlaceholder, "x", "x");
//   NodeId y = *g.AddNode(Op::kCallFunction, "relu", "aten.relu.default", {Value::Ref(x)});
//   g.AddNode(Op::kOutput, "output", "output", {Value::Ref(y)});
//   for (NodeId id : g.order()) std::cout << g.node(id).name() << "\n";  // or print.h
//
// The Graph itself checks what it must to stay consistent (names unique and well formed,
// references to live nodes); the full structural contract is checked by Verify()
// (verifier.h), which every pass and test runs.
#ifndef OVERLAP_GRAPH_GRAPH_H_
#define OVERLAP_GRAPH_GRAPH_H_

#include <cstdint>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/value.h"

namespace overlap {

// FX's six node kinds.
enum class Op : uint8_t {
  kPlaceholder,
  kGetAttr,
  kCallFunction,
  kCallModule,
  kCallMethod,
  kOutput,
};

// The interchange name of an op ("call_function"), and its inverse (false if unknown).
absl::string_view OpName(Op op);
bool ParseOp(absl::string_view s, Op* op);

// Unknown JSON keys at some level of the file: (key, raw JSON text of the value), in file
// order. Kept so that a round trip loses nothing; the raw text is valid JSON.
using Extras = std::vector<std::pair<std::string, std::string>>;

// A tensor shape. Almost every shape has at most four dimensions, which then live inside
// the metadata instead of in a heap block per node.
using Shape = absl::InlinedVector<int64_t, 4>;

// A node's metadata. Every field may be absent; `has_*` says whether it was given (so a
// round trip writes back exactly what was read).
struct NodeMeta {
  Shape shape;
  std::string dtype;
  int64_t tensor_size = 0;  // bytes of the result
  double device_time = 0;   // seconds on the device
  bool aliases_input = false;
  std::string param;    // placeholder standing for this parameter (lifted graphs)
  std::string grad_of;  // backward node computing this parameter's gradient
  bool has_shape = false;
  bool has_dtype = false;
  bool has_tensor_size = false;
  bool has_device_time = false;
  bool has_aliases_input = false;
  bool has_param = false;
  bool has_grad_of = false;
  Extras extra;  // unknown meta keys (e.g. `shapes`, `dtypes`, exporter data)

  // Setters that also mark the field present.
  void set_shape(Shape s) {
    shape = std::move(s);
    has_shape = true;
  }
  void set_dtype(std::string d) {
    dtype = std::move(d);
    has_dtype = true;
  }
  void set_tensor_size(int64_t b) {
    tensor_size = b;
    has_tensor_size = true;
  }
  void set_device_time(double t) {
    device_time = t;
    has_device_time = true;
  }
  void set_aliases_input(bool a) {
    aliases_input = a;
    has_aliases_input = true;
  }
  void set_param(std::string p) {
    param = std::move(p);
    has_param = true;
  }
  void set_grad_of(std::string p) {
    grad_of = std::move(p);
    has_grad_of = true;
  }
  bool empty() const;
  friend bool operator==(const NodeMeta& a, const NodeMeta& b);
};

// A node's inputs or users: most nodes have at most four, which then live inside the node
// (the same 24 bytes a std::vector takes) instead of in two heap blocks per node; a split of
// a million-node graph makes 3 million fewer allocations.
using NodeList = absl::InlinedVector<NodeId, 4>;

// One node. Read through Graph::node(); changed only through Graph's mutation methods
// (which keep inputs and users consistent), except metadata, which is free to edit.
class Node {
 public:
  NodeId id() const { return id_; }
  const std::string& name() const { return name_; }
  Op op() const { return op_; }
  const std::string& target() const { return *target_; }
  const std::vector<Value>& args() const { return args_; }
  const ValueDict& kwargs() const { return kwargs_; }
  const NodeMeta& meta() const { return meta_; }
  NodeMeta& mutable_meta() { return meta_; }
  const Extras& extra() const { return extra_; }
  Extras& mutable_extra() { return extra_; }
  // Whether the file gave `kwargs` / `meta` explicitly even though empty; for exact round
  // trips (the writer writes non-empty ones regardless).
  bool has_kwargs_key() const { return has_kwargs_key_; }
  bool has_meta_key() const { return has_meta_key_; }
  void set_has_kwargs_key(bool b) { has_kwargs_key_ = b; }
  void set_has_meta_key(bool b) { has_meta_key_ = b; }

  // Data inputs: every node referenced in args (depth-first, left to right), then in kwargs
  // (key order), each node once (FX's all_input_nodes).
  const NodeList& inputs() const { return inputs_; }
  // The first part of inputs(): the nodes referenced from args alone.
  absl::Span<const NodeId> arg_inputs() const {
    return absl::MakeConstSpan(inputs_).first(num_arg_inputs_);
  }
  // Nodes whose inputs contain this node, each once, in the order they started using it.
  const NodeList& users() const { return users_; }
  bool alive() const { return alive_; }

 private:
  friend class Graph;
  NodeId id_ = kNoNode;
  Op op_ = Op::kCallFunction;
  bool alive_ = true;
  bool has_kwargs_key_ = false;
  bool has_meta_key_ = false;
  uint32_t num_arg_inputs_ = 0;
  std::string name_;
  // Interned in the owning graph's pool: a graph has many nodes but few distinct targets,
  // so a node pays 8 bytes and no allocation for it.
  const std::string* target_ = &EmptyTarget();
  static const std::string& EmptyTarget();
  std::vector<Value> args_;
  ValueDict kwargs_;
  NodeMeta meta_;
  Extras extra_;
  NodeList inputs_;
  NodeList users_;
};

// Whether `n` is a view (meta.aliases_input true): its result shares storage with its first
// input, so it allocates nothing and its readers keep that input's storage alive. Aliasing
// is a property of the IR; every pass asks this one function. (DeepCompile's last-use rule
// counts exactly these as aliases: docs/deepcompile.md.)
inline bool IsView(const Node& n) { return n.meta().has_aliases_input && n.meta().aliases_input; }
// Whether `n`'s result lives in its first input's storage: a view, or an operator.getitem,
// whose result is an element of its tuple input. The memory model's rule (the simulator,
// replay and the interpreter): executing the graphs showed that counting getitem results as
// buffers of their own counted tuple elements twice. O(1).
inline bool SharesInputStorage(const Node& n) {
  return IsView(n) || (n.op() == Op::kCallFunction && n.target() == "operator.getitem");
}
// Whether `n` is a view of `input` (its first input): a reader of `input` that reads no data.
inline bool IsViewOf(const Node& n, NodeId input) {
  return IsView(n) && !n.inputs().empty() && n.inputs()[0] == input;
}

// One entry of the parameter table (see the format doc for the meaning of each field).
struct Param {
  std::string name;   // qualified parameter name, e.g. "layer1.0.conv1.weight"
  std::string owner;  // call_module target, get_attr target, or placeholder name
  Shape shape;
  std::string dtype;
  int64_t bytes = 0;  // storage size in bytes (what DDP counts)
  bool requires_grad = true;
  bool ddp_ignored = false;
  std::string storage;  // tied parameters share one storage value; empty means `name`
  // Presence of the optional keys, for exact round trips. The writer also writes a key
  // whose value differs from the default (requires_grad false, ddp_ignored true, a
  // storage set), so forgetting a has_* flag never loses information.
  bool has_shape = false;
  bool has_dtype = false;
  bool has_requires_grad = false;
  bool has_ddp_ignored = false;
  bool has_storage = false;
  Extras extra;

  // The storage identity: `storage` when set, else `name`.
  const std::string& storage_key() const { return storage.empty() ? name : storage; }
  friend bool operator==(const Param& a, const Param& b);
};

namespace internal {

// Node storage with stable addresses: fixed-size chunks, so appending never moves a node
// (names are viewed by the name index) and costs one allocation per 256 nodes, not per
// node as std::deque does for objects this large. Chunks are raw memory and nodes are
// constructed as they are added, so a small graph touches only the pages it uses (a split
// makes thousands of small graphs).
class NodeStore {
 public:
  NodeStore() = default;
  ~NodeStore() { Clear(); }
  NodeStore(const NodeStore& other) { *this = other; }
  NodeStore& operator=(const NodeStore& other) {
    if (this == &other) return *this;
    Clear();
    for (size_t i = 0; i < other.size_; ++i) emplace_back() = other[i];
    return *this;
  }
  NodeStore(NodeStore&& other) noexcept : chunks_(std::move(other.chunks_)), size_(other.size_) {
    other.chunks_.clear();
    other.size_ = 0;
  }
  NodeStore& operator=(NodeStore&& other) noexcept {
    if (this == &other) return *this;
    Clear();
    chunks_ = std::move(other.chunks_);
    size_ = other.size_;
    other.chunks_.clear();
    other.size_ = 0;
    return *this;
  }

  size_t size() const { return size_; }
  Node& operator[](size_t i) { return chunks_[i >> kShift][i & kMask]; }
  const Node& operator[](size_t i) const { return chunks_[i >> kShift][i & kMask]; }
  Node& emplace_back() {
    if ((size_ & kMask) == 0) {
      chunks_.push_back(static_cast<Node*>(::operator new(sizeof(Node) * (kMask + 1))));
    }
    Node* slot = &(*this)[size_];
    new (slot) Node();
    ++size_;
    return *slot;
  }
  // Undoes the last emplace_back.
  void pop_back() {
    --size_;
    (*this)[size_].~Node();
    if ((size_ & kMask) == 0) {
      ::operator delete(chunks_.back());
      chunks_.pop_back();
    }
  }

 private:
  void Clear() {
    while (size_ > 0) pop_back();
    for (Node* c : chunks_) ::operator delete(c);
    chunks_.clear();
  }
  static constexpr size_t kShift = 8;
  static constexpr size_t kMask = (size_t{1} << kShift) - 1;
  std::vector<Node*> chunks_;
  size_t size_ = 0;
};

}  // namespace internal

// Where AddNode puts a new node.
struct InsertPoint {
  enum class Where : uint8_t { kEnd, kBefore, kAfter };
  Where where = Where::kEnd;
  NodeId anchor = kNoNode;
  static InsertPoint End() { return {}; }
  static InsertPoint Before(NodeId id) { return {Where::kBefore, id}; }
  static InsertPoint After(NodeId id) { return {Where::kAfter, id}; }
};

class Graph {
 public:
  Graph() = default;
  // Deep copy (ids are preserved).
  Graph(const Graph& other);
  Graph& operator=(const Graph& other);
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  // --- Nodes -------------------------------------------------------------------------------

  // Adds a node at `at`. Fails (InvalidArgument, naming the node) if the name is malformed or
  // taken, or an argument references a dead or unknown node. It does not check order: a
  // reference to a node placed later is legal here and caught by Verify(). O(size of args).
  absl::StatusOr<NodeId> AddNode(Op op, std::string name, std::string target,
                                 std::vector<Value> args = {}, ValueDict kwargs = {},
                                 InsertPoint at = InsertPoint::End());

  // Replaces a node's args and kwargs, updating inputs and users. Same checks as AddNode.
  absl::Status SetArgs(NodeId id, std::vector<Value> args, ValueDict kwargs);
  // Renames a node. Fails if the name is malformed or taken by another node.
  absl::Status Rename(NodeId id, std::string name);
  void set_target(NodeId id, std::string target) { nodes_[id].target_ = Intern(std::move(target)); }

  // Rewrites every use of `from` to `to` in the args and kwargs of `from`'s users, for those
  // users `keep_user` accepts (all by default) and never in `to` itself (so inserting a node
  // after `from` and redirecting `from`'s users to it works, as in FX). Returns how many
  // users were rewritten. Cost: O(total size of the rewritten users' args).
  int ReplaceAllUsesWith(NodeId from, NodeId to,
                         absl::FunctionRef<bool(const Node& user)> keep_user);
  int ReplaceAllUsesWith(NodeId from, NodeId to);

  // Erases a node. Fails (FailedPrecondition) while it still has users. O(inputs).
  absl::Status Erase(NodeId id);

  // Moves a live node right before / after another live node. O(1).
  void MoveBefore(NodeId id, NodeId anchor);
  void MoveAfter(NodeId id, NodeId anchor);
  // Sets the whole order. `order` must be a permutation of the live nodes (InvalidArgument
  // otherwise); topological validity is Verify()'s business. O(N).
  absl::Status SetOrder(absl::Span<const NodeId> order);

  // Lookups, O(1). FindNode returns kNoNode when no live node has that name.
  NodeId FindNode(absl::string_view name) const;
  const Node& node(NodeId id) const { return nodes_[id]; }
  Node& mutable_node(NodeId id) { return nodes_[id]; }
  // Whether `id` names a node of this graph that has not been erased.
  bool IsLive(NodeId id) const {
    return id >= 0 && id < static_cast<NodeId>(nodes_.size()) && nodes_[id].alive_;
  }
  // Live nodes.
  int64_t size() const { return live_; }
  // Entries in the name index (equals size() unless the Graph itself is broken).
  int64_t name_index_size() const { return static_cast<int64_t>(by_name_.size()); }
  // One past the largest id ever used (dead ids included): size id-indexed side tables so.
  NodeId id_bound() const { return static_cast<NodeId>(nodes_.size()); }
  NodeId first() const { return head_; }
  NodeId last() const { return tail_; }
  NodeId next(NodeId id) const { return next_[id]; }
  NodeId prev(NodeId id) const { return prev_[id]; }

  // Iterates live node ids in order: `for (NodeId id : g.order())`. Valid while the order is
  // not changed.
  class OrderRange {
   public:
    class iterator {
     public:
      using iterator_category = std::forward_iterator_tag;
      using value_type = NodeId;
      using difference_type = std::ptrdiff_t;
      using pointer = const NodeId*;
      using reference = NodeId;
      iterator(const Graph* g, NodeId id) : g_(g), id_(id) {}
      NodeId operator*() const { return id_; }
      iterator& operator++() {
        id_ = g_->next(id_);
        return *this;
      }
      bool operator==(const iterator& o) const { return id_ == o.id_; }
      bool operator!=(const iterator& o) const { return id_ != o.id_; }

     private:
      const Graph* g_;
      NodeId id_;
    };
    explicit OrderRange(const Graph* g) : g_(g) {}
    iterator begin() const { return iterator(g_, g_->first()); }
    iterator end() const { return iterator(g_, kNoNode); }

   private:
    const Graph* g_;
  };
  OrderRange order() const { return OrderRange(this); }
  // The order as a vector. O(N).
  std::vector<NodeId> OrderVector() const;

  // Returns `base` if free, else a free name made the way FX makes one: a trailing `_<n>` is
  // incremented until free, otherwise `_1` is appended (then `_2`, ...). Characters that are
  // not allowed in names become '_'. O(1) expected per try.
  std::string UniqueName(absl::string_view base) const;

  // --- Parameters ----------------------------------------------------------------------------

  // Appends a parameter. Fails when (owner, name) is already listed, a name is empty, or
  // bytes is negative. Consistency with nodes and between tied entries is Verify()'s.
  absl::Status AddParam(Param p);
  const std::vector<Param>& params() const { return params_; }
  Param& mutable_param(int index) { return params_[index]; }
  // Indices of the parameters with this owner, in table order (empty span if none).
  absl::Span<const int> ParamsOwnedBy(absl::string_view owner) const;
  // Index of some parameter with this name (the first listed), or -1.
  int FindParam(absl::string_view name) const;

  // --- Graph-level fields ----------------------------------------------------------------------
  const std::string& name() const { return name_; }
  void set_name(std::string n) {
    name_ = std::move(n);
    has_name_ = true;
  }
  bool has_name() const { return has_name_; }
  void clear_name() {
    name_.clear();
    has_name_ = false;
  }
  bool has_params_key() const { return has_params_key_; }
  void set_has_params_key(bool b) { has_params_key_ = b; }
  const Extras& extra() const { return extra_; }
  Extras& mutable_extra() { return extra_; }

  // Preallocates for `n` nodes (the reader calls it with an estimate).
  void ReserveNodes(int64_t n);

  // Structural equality: same nodes (names, ops, targets, args with references compared by
  // the referenced node's name, kwargs, meta, extras) in the same order, same parameters,
  // same graph-level fields. Ids may differ. O(N).
  friend bool operator==(const Graph& a, const Graph& b);
  friend bool operator!=(const Graph& a, const Graph& b) { return !(a == b); }

 private:
  absl::Status CheckName(absl::string_view name) const;
  absl::Status CheckRefs(const std::string& node_name, const std::vector<Value>& args,
                         const ValueDict& kwargs) const;
  // Recomputes `id`'s inputs from its args / kwargs and registers it with each input.
  void LinkInputs(NodeId id);
  // Removes `id` from each of its inputs' users and clears its inputs.
  void UnlinkInputs(NodeId id);
  void Unlink(NodeId id);  // from the order list
  void LinkBefore(NodeId id, NodeId anchor);
  void LinkAfter(NodeId id, NodeId anchor);
  void RebuildIndexes();
  // The pooled copy of `s` (stable address for the graph's lifetime). O(1) expected.
  const std::string* Intern(std::string s);

  internal::NodeStore nodes_;
  // Distinct targets; node_hash_set keeps element addresses stable, and the unique_ptr keeps
  // them stable across moves of the Graph.
  std::unique_ptr<absl::node_hash_set<std::string>> targets_ =
      std::make_unique<absl::node_hash_set<std::string>>();
  // UniqueName's per-stem search start (a cache: correctness never depends on it).
  mutable absl::flat_hash_map<std::string, int64_t> name_hints_;
  absl::flat_hash_map<absl::string_view, NodeId> by_name_;  // keys view nodes_' names
  NodeId head_ = kNoNode;
  NodeId tail_ = kNoNode;
  // The order's links by node id, apart from the nodes: walking the order then reads a
  // small array instead of chasing pointers through node-sized records (half the time of a
  // pass over a graph larger than the cache).
  std::vector<NodeId> next_, prev_;
  int64_t live_ = 0;

  std::vector<Param> params_;
  absl::flat_hash_map<std::string, std::vector<int>> params_by_owner_;
  absl::flat_hash_map<std::string, int> params_by_name_;
  // The names owned by each owner with many parameters (kScanParams in graph.cc), built on
  // demand, so that AddParam's duplicate check is O(1) expected however many an owner has
  // (a scan of the owner's entries made 10^5 parameters of one owner quadratic).
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> param_names_by_owner_;

  std::string name_;
  bool has_name_ = false;
  bool has_params_key_ = false;
  Extras extra_;
};

// Computes a node's data inputs from its arguments: every reference in `args` depth-first,
// left to right, then in `kwargs`, each node once; `*num_arg_inputs` gets how many came from
// `args`. O(number of references) expected (a hash set dedups long argument lists).
void CollectDataInputs(const std::vector<Value>& args, const ValueDict& kwargs, NodeList* inputs,
                       uint32_t* num_arg_inputs);

// Whether two argument values are equal, comparing references by the referenced node's name
// (so values of different graphs compare). NaN equals NaN. O(size of the values).
bool SameValue(const Graph& ga, const Value& a, const Graph& gb, const Value& b);

// Whether `name` is a legal node name: non-empty, [A-Za-z_][A-Za-z0-9_.]*.
bool IsValidNodeName(absl::string_view name);

// Parameter ownership: where a graph holds its parameters.
//
// A graph is module-style when it has a call_module node or a parameter owned by a get_attr
// node (torch.fx.symbolic_trace: owners are module paths); otherwise it is lifted
// (AOTAutograd / ZeRO-3: each parameter an input placeholder, its owner the placeholder's
// name). A lifted graph's table may be the whole model's: an AOT backward graph takes only
// the primals its formulas read, yet lists every parameter so that ds_ids (table indices)
// agree with the forward graph's. A row whose owner names no node of a lifted graph is
// *absent*: valid, not read by this graph, skipped by every pass. In a module-style graph
// every owner must exist (a misspelt module path is an error Verify reports).
struct ParamOwnership {
  bool lifted = false;
  // Per table row: whether its owner is a node of the graph (a call_module or get_attr
  // target, or a placeholder's name or target).
  std::vector<char> present;
  int64_t absent = 0;  // rows not present
};
// Classifies `g`'s parameters as above. O(N + P) expected time and memory.
ParamOwnership ClassifyParams(const Graph& g);

// The first parameter (in graph order) owned by a module: by a call_module node or named by a
// get_attr node, with that node; nullopt when every parameter is lifted. Passes that need
// lifted parameters (ZeRO-3, backward graphs) name it in their errors. O(N) expected.
struct ModuleOwnedParam {
  int param = -1;
  NodeId node = kNoNode;
};
std::optional<ModuleOwnedParam> FirstModuleOwnedParam(const Graph& g);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_GRAPH_H_
