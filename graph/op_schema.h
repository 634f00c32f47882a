// The operator schema: one declaration per ATen operator overload, the one place an
// operator's arguments are written down. Each declaration is PyTorch's own schema string
// (native_functions.yaml's form: "addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar
// beta=1, Scalar alpha=1) -> Tensor"), so it reads as ATen's does and can be checked against
// it, plus the facts only overlap needs (what the dtype of the result is, what the op is for,
// its backward in words). Every consumer reads arguments through it by name: the shape rules
// (graph/shape_rules.cc), the CPU and CUDA kernels (runtime/kernels/kernel.h's KernelCall),
// the cost formulas and the AOT backward formulas; docs/ops.md's operator table is generated
// from it (OpsMarkdownTable; //graph:op_schema_test fails when the page differs).
//
//   const OpSchema* s = FindOpSchema("aten.addmm.default");
//   s->Position("mat1");              // 1
//   s->arg(s->Position("beta")).default_value->as_int();   // 1
//   OVERLAP_ASSIGN_OR_RETURN(OpArgs a, OpArgs::Bind(node));  // the node's arguments, by name
//   const Value* beta = a.Get("beta");                      // given, else the default
//
// Why a C++ table rather than a text file read at build time: Bazel 4's genrules would add a
// code generator to every build and a second language to read; a table compiled into
// //graph:op_schema is checked by the compiler, parsed once at first use (microseconds per
// op), and is where a reader of the formulas already looks. docs/ops.md, "The operator
// schema", says how to add an operator.
#ifndef OVERLAP_GRAPH_OP_SCHEMA_H_
#define OVERLAP_GRAPH_OP_SCHEMA_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/graph.h"
#include "graph/value.h"

namespace overlap {

// An argument's type as the schema string writes it, without `?` or a list size.
enum class ArgType {
  kTensor,
  kTensorList,  // Tensor[]
  kInt,         // int, SymInt
  kIntList,     // int[], int[N], SymInt[]
  kFloat,       // float
  kFloatList,   // float[] (upsampling's scale_factors)
  kBool,
  kBoolList,  // bool[N]
  kScalar,    // a number, int or float
  kString,    // str
  kDtype,     // ScalarType
  kOther,     // Layout, Device, MemoryFormat, Generator: read as written, never interpreted
};

// "Tensor", "int[]", ...: how the schema string spells `t`. O(1).
absl::string_view ArgTypeName(ArgType t);

struct ArgSchema {
  std::string name;
  ArgType type = ArgType::kTensor;
  bool optional = false;      // `Type?`: None is a value
  bool keyword_only = false;  // after `*`
  int list_size = 0;          // int[2]: 2 (a single int stands for the list); 0: any
  // The declared default, parsed ("1", "False", "None", "[]", "'none'", "-1", "0.0", "Mean"
  // as the int 1); nullopt: the argument is required.
  std::optional<Value> default_value;
  std::string alias;  // "a" for Tensor(a), "a!" for Tensor(a!); empty otherwise
};

struct ResultSchema {
  std::string name;  // may be empty
  ArgType type = ArgType::kTensor;
  bool optional = false;
  std::string alias;  // "a" when the result is a view of the argument annotated (a)
};

// What dtype the results have, stated for the docs; the shape rules and kernels decide it
// by graph/type_promotion.h.
enum class DtypeRule {
  kFirstTensor,    // every result has the first tensor argument's dtype
  kPromoted,       // ATen's result_type of the tensor and number operands (add, where, cat)
  kPromotedFloat,  // the same, integral and bool to float32 (true division, exp, sigmoid)
  kSameDtype,      // the tensor operands have one dtype, the result's (products, convolution)
  kBool,           // bool (comparisons)
  kFromArgs,       // from an argument (a dtype keyword, input_dtype) or by element (indices
                   // int64, a norm's statistics float32, sum's int64): see the shape rule
};

struct OpSchema {
  std::string target;     // "aten.addmm.default": how graphs name it
  std::string signature;  // as declared
  std::vector<ArgSchema> args;
  std::vector<ResultSchema> results;
  DtypeRule dtype = DtypeRule::kFirstTensor;
  // Documentation, rendered into docs/ops.md.
  std::string used_for;     // what the models and exported graphs use it for
  std::string saved;        // what its backward needs from the forward
  std::string backward;     // its backward, in ATen ops with full arguments
  std::string notes;        // deviations, PyTorch versions
  std::string backward_of;  // for ops only in backward graphs: whose backward emits it
  // ATen's `pointwise` tag: result element i reads element i of each tensor operand (after
  // broadcasting) and nothing else. Such an op's shape rule is derived from its signature and
  // `dtype` (graph/shape_rules.h) and its cost kind defaults to elementwise (graph/annotate.h).
  bool pointwise = false;

  const ArgSchema& arg(int position) const { return args[position]; }
  // The position of argument `name`; -1 when the schema has none. O(args).
  int Position(absl::string_view name) const;
  // The argument whose storage the first result shares, -1 when none: a view (Tensor(a) ->
  // Tensor(a)) or the argument an in-place op writes and returns (Tensor(a!)). The kernels'
  // contract (such a result allocates nothing) and the simulator's (it shares storage).
  int ViewOf() const;
  // Whether the first argument is written in place (Tensor(a!)).
  bool MutatesFirst() const;
  // Whether the op draws random numbers: it declares ATen's `Generator? generator`
  // (bernoulli_); its kernels read KernelCall::random(). O(args).
  bool Random() const;
};

// Every declared operator, in the table's order (forward ops first). Parsed on first use;
// O(1) after.
absl::Span<const OpSchema> OpSchemas();
// The declaration of `target`; nullptr when undeclared (operator.getitem, ZeRO-3's dc.*
// ops, a user's own kernels). O(1) expected.
const OpSchema* FindOpSchema(absl::string_view target);

// Parses every declaration of the table: the first that does not parse (OpSchemas() leaves
// such a line out), or OK. O(ops).
absl::Status VerifyOpSchemaTable();

// A schema string parsed alone (tests; adding an operator): InvalidArgument naming the
// position of what does not parse.
absl::StatusOr<OpSchema> ParseOpSchema(absl::string_view target, absl::string_view signature);

// A node's arguments bound to its operator's schema: by name, positionally given or as a
// keyword, else the declared default. O(args) to bind; O(args) per lookup.
class OpArgs {
 public:
  // InvalidArgument naming the node when its target is undeclared, when it passes more
  // positional arguments than declared, a keyword the schema does not have, an argument
  // both by position and keyword, or a keyword-only argument positionally.
  static absl::StatusOr<OpArgs> Bind(const Node& node);
  // The same against a given schema (kernels registered for an undeclared target use the
  // schema of the op they implement).
  static absl::StatusOr<OpArgs> Bind(const Node& node, const OpSchema& schema);

  const OpSchema& schema() const { return *schema_; }
  const Node& node() const { return *node_; }
  // The argument `name`: given, else its default (a None value for `Type? x=None`);
  // nullptr when neither (a required argument missing) or the schema has no such name.
  const Value* Get(absl::string_view name) const;
  // Whether `name` is absent or None.
  bool IsNone(absl::string_view name) const;
  // InvalidArgument "node "n" (target): argument `name`: what", the one error form.
  absl::Status Error(absl::string_view name, absl::string_view what) const;

 private:
  const Node* node_ = nullptr;
  const OpSchema* schema_ = nullptr;
  std::vector<const Value*> values_;  // by position; nullptr: not given
};

// docs/ops.md's operator table, rendered from the schema: the forward operators (signature,
// view, dtype, used for, saved, backward, notes), then those only backward graphs use.
// Deterministic. O(ops).
std::string OpsMarkdownTable();

// `page` (docs/ops.md) with the text between its kOpsTableBegin and kOpsTableEnd lines
// replaced by OpsMarkdownTable(): the page is current when this returns it unchanged.
// InvalidArgument when the markers are missing or out of order. O(page).
inline constexpr char kOpsTableBegin[] =
    "<!-- generated from graph/op_schema.cc by `bazel run //graph:ops_doc`: edit the schema -->";
inline constexpr char kOpsTableEnd[] = "<!-- end of the generated table -->";
absl::StatusOr<std::string> WithOpsTable(absl::string_view page);

}  // namespace overlap

#endif  // OVERLAP_GRAPH_OP_SCHEMA_H_
