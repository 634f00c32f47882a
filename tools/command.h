// The CLI's command framework: each command is declared once, as a CommandSpec with a flag
// table, from which its usage text, the flags it accepts and which of them are switches all
// come. Commands read their flags through an Invocation, which records the first malformed
// value as a usage error (exit 2) and turns a Status into exit 1 with its message.
//
//   constexpr FlagSpec kFlags[] = {{"output", 'o', "FILE", "write to FILE"}, ...};
//   int Run(Invocation& in) {
//     const int64_t n = in.Int("nodes", 2, int64_t{1} << 30, 100);
//     if (in.has_usage_error()) return in.UsageError();
//     ...
//   }
#ifndef OVERLAP_TOOLS_COMMAND_H_
#define OVERLAP_TOOLS_COMMAND_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace overlap {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 1;
inline constexpr int kExitUsage = 2;

// The model names `gen` and `demo` accept, for usage texts.
inline constexpr char kModelList[] = "mlp, gpt2, llama-7b, llama-70b, resnet18, moe, random";

// One flag: --name (and -<short_name> when set) with a value named `value` in the usage
// text, or a switch when `value` is empty. `help` may hold several lines ("\n"); the usage
// text indents the continuation lines. `data_output`: the value names a file the command
// writes data to, where "-" means stdout (then the human summary goes to stderr).
struct FlagSpec {
  absl::string_view name;
  char short_name = 0;
  absl::string_view value;
  absl::string_view help;
  bool data_output = false;
};

class Invocation;

// One command.
struct CommandSpec {
  absl::string_view name;
  absl::string_view synopsis;     // after "overlap <name> ", e.g. "FILE [options]"
  absl::string_view summary;      // one line, for `overlap help`
  absl::string_view description;  // the paragraph(s) after the usage line
  // The accepted flags, in groups (a command's own, then shared ones like the collectives').
  std::vector<absl::Span<const FlagSpec>> flags;
  absl::string_view footer;  // text after the options (e.g. what SIZE means)
  // How many positional arguments it takes (Parse rejects other counts), and what to call
  // one in that message ("file", "model name").
  int min_positional = 0;
  int max_positional = 0;
  absl::string_view positional_name;
  // Runs the parsed command; returns the exit code (kExitOk, kExitBadInput, kExitUsage).
  int (*run)(Invocation& in) = nullptr;
  // Instead of `run`: a command served by another program, handed the whole command line
  // unparsed (its own flags and `help NAME`); it parses, prints usage and exits itself.
  int (*hand_off)(const std::vector<std::string>& args, std::FILE* out, std::FILE* err) = nullptr;
};

// Runs `args` (argv without the program name) against `commands`, listed in that order by
// `help`: the command's flags parsed and checked (usage errors: exit 2), `help [COMMAND]`,
// --help, out of memory as one line (exit 1), a failed write to `out` as exit 1.
int RunCommandLine(absl::Span<const CommandSpec* const> commands,
                   const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

// The usage text of `spec`: usage line, description, the options table, footer.
std::string UsageText(const CommandSpec& spec);

// Resolves a path the user typed: relative paths are relative to $BUILD_WORKING_DIRECTORY
// when set (under `bazel run`); "-" (stdin / stdout) and absolute paths stay as they are.
std::string ResolvePath(const std::string& path);

// A parsed command line for one command, with typed, validated readers.
class Invocation {
 public:
  Invocation(const CommandSpec& spec, std::FILE* out, std::FILE* err)
      : spec_(spec), out_(out), err_(err) {}

  // Parses argv[start...]. Unknown flags, a value given to a switch, a missing value, a flag
  // given twice, two data outputs to stdout and a wrong number of positional arguments are
  // usage errors. Returns false
  // on one (the error is recorded; UsageError() prints it).
  bool Parse(const std::vector<std::string>& argv, size_t start);

  const CommandSpec& spec() const { return spec_; }
  std::FILE* out() const { return out_; }
  std::FILE* err() const { return err_; }
  // Where human-readable summaries go: stdout, unless a data output flag sends data there
  // ("-o -", "--json -"), in which case stderr, so `... -o - | overlap inspect -` works.
  std::FILE* summary() const { return data_to_stdout_ ? err_ : out_; }
  const std::vector<std::string>& positional() const { return positional_; }
  bool help() const { return help_; }

  // Whether --name was given.
  bool Has(absl::string_view name) const;
  // Switches: whether given.
  bool Switch(absl::string_view name) const { return Has(name); }
  // The raw value, if given.
  std::optional<std::string> String(absl::string_view name) const;
  // A path value, resolved with ResolvePath.
  std::optional<std::string> Path(absl::string_view name) const;
  // An integer in [min, max] (fallback when absent).
  int64_t Int(absl::string_view name, int64_t min, int64_t max, int64_t fallback);
  // A finite number in (0, max] (fallback when absent).
  double Positive(absl::string_view name, double max, double fallback);
  // A finite number in [min, max] (fallback when absent).
  double Bounded(absl::string_view name, double min, double max, double fallback);
  // A finite number in [0, max] (fallback when absent).
  double NonNegative(absl::string_view name, double max, double fallback);
  // A size with an optional unit (graph/size.h), when given.
  std::optional<int64_t> Size(absl::string_view name);
  // The same, where 0 would silently mean "none": a usage error "--NAME must be > 0 (omit
  // it for OMITTED)" and nullopt for 0.
  std::optional<int64_t> PositiveSize(absl::string_view name, absl::string_view omitted);
  // Records a usage error (only the first is kept).
  void AddUsageError(std::string message);

  bool has_usage_error() const { return usage_error_.has_value(); }
  // Prints "overlap: <error>" and the usage text to stderr; returns kExitUsage.
  int UsageError();
  // Prints "overlap: error: <message>" to stderr; returns kExitBadInput.
  int BadInput(const absl::Status& s);

 private:
  const CommandSpec& spec_;
  std::FILE* out_;
  std::FILE* err_;
  std::vector<std::string> positional_;
  std::map<std::string, std::string, std::less<>> flags_;
  bool help_ = false;
  bool data_to_stdout_ = false;
  std::optional<std::string> usage_error_;
};

}  // namespace overlap

#endif  // OVERLAP_TOOLS_COMMAND_H_
