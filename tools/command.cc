#include "tools/command.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "graph/size.h"
#include "graph/text.h"

namespace overlap {
namespace {

constexpr size_t kHelpColumn = 27;

const FlagSpec* FindFlag(const CommandSpec& spec, absl::string_view name, char short_name) {
  for (absl::Span<const FlagSpec> group : spec.flags) {
    for (const FlagSpec& f : group) {
      if ((!name.empty() && f.name == name) || (short_name != 0 && f.short_name == short_name)) {
        return &f;
      }
    }
  }
  return nullptr;
}

}  // namespace

std::string UsageText(const CommandSpec& spec) {
  std::string out = absl::StrCat("usage: overlap ", spec.name);
  if (!spec.synopsis.empty()) absl::StrAppend(&out, " ", spec.synopsis);
  absl::StrAppend(&out, "\n\n", spec.description);
  if (!spec.description.empty() && spec.description.back() != '\n') out.push_back('\n');
  bool any = false;
  for (absl::Span<const FlagSpec> group : spec.flags) {
    for (const FlagSpec& f : group) {
      if (!any) out.append("\noptions:\n");
      any = true;
      std::string left = "  ";
      if (f.short_name) absl::StrAppend(&left, "-", std::string(1, f.short_name), ", ");
      absl::StrAppend(&left, "--", f.name);
      if (!f.value.empty()) absl::StrAppend(&left, " ", f.value);
      bool first = true;
      for (absl::string_view line : absl::StrSplit(f.help, '\n')) {
        if (first && left.size() + 1 < kHelpColumn) {
          left.resize(kHelpColumn, ' ');
          absl::StrAppend(&out, left, line, "\n");
        } else if (first) {
          absl::StrAppend(&out, left, "\n", std::string(kHelpColumn, ' '), line, "\n");
        } else {
          absl::StrAppend(&out, std::string(kHelpColumn, ' '), line, "\n");
        }
        first = false;
      }
    }
  }
  if (!spec.footer.empty()) absl::StrAppend(&out, spec.footer);
  return out;
}

std::string ResolvePath(const std::string& path) {
  if (path.empty() || path == "-" || path[0] == '/') return path;
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (wd == nullptr || *wd == '\0') return path;
  return absl::StrCat(wd, "/", path);
}

bool Invocation::Parse(const std::vector<std::string>& argv, size_t start) {
  for (size_t i = start; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    const FlagSpec* flag = nullptr;
    std::optional<std::string> value;
    std::string shown = a;
    if (absl::StartsWith(a, "--") && a.size() > 2) {
      std::string name = a.substr(2);
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
      }
      shown = "--" + name;
      flag = FindFlag(spec_, name, 0);
    } else if (a.size() == 2 && a[0] == '-' && a[1] != '-') {
      flag = FindFlag(spec_, "", a[1]);
    } else if (a.size() > 1 && a[0] == '-') {
      AddUsageError(absl::StrCat("unknown option ", Printable(a)));
      return false;
    } else {
      positional_.push_back(a);
      continue;
    }
    if (flag == nullptr) {
      AddUsageError(absl::StrCat("unknown option ", Printable(shown)));
      return false;
    }
    if (flag->value.empty()) {
      if (value) {
        AddUsageError(absl::StrCat(Printable(shown), " takes no value"));
        return false;
      }
      value = "";
    } else if (!value) {
      if (i + 1 >= argv.size()) {
        AddUsageError(absl::StrCat(Printable(shown), " needs a value (", flag->value, ")"));
        return false;
      }
      value = argv[++i];
    }
    if (!flags_.emplace(std::string(flag->name), *value).second) {
      AddUsageError(absl::StrCat("--", flag->name, " is given twice"));
      return false;
    }
    if (flag->data_output && *value == "-") {
      if (data_to_stdout_) {
        AddUsageError(absl::StrCat("only one output can go to stdout (--", flag->name, " -)"));
        return false;
      }
      data_to_stdout_ = true;
    }
  }
  if (help_) return true;
  const int n = static_cast<int>(positional_.size());
  if (n < spec_.min_positional || n > spec_.max_positional) {
    const char* what = spec_.min_positional == spec_.max_positional ? "exactly"
                       : n < spec_.min_positional                   ? "at least"
                                                                    : "at most";
    const int count = n < spec_.min_positional ? spec_.min_positional : spec_.max_positional;
    AddUsageError(absl::StrCat(spec_.name, " takes ", what, " ",
                               count == 1 ? "one" : absl::StrCat(count), " ", spec_.positional_name,
                               count == 1 ? "" : "s"));
    return false;
  }
  return true;
}

bool Invocation::Has(absl::string_view name) const { return flags_.find(name) != flags_.end(); }

std::optional<std::string> Invocation::String(absl::string_view name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Invocation::Path(absl::string_view name) const {
  std::optional<std::string> v = String(name);
  if (!v) return v;
  return ResolvePath(*v);
}

int64_t Invocation::Int(absl::string_view name, int64_t min, int64_t max, int64_t fallback) {
  std::optional<std::string> v = String(name);
  if (!v) return fallback;
  int64_t x = 0;
  if (!absl::SimpleAtoi(*v, &x) || x < min || x > max) {
    AddUsageError(absl::StrCat("--", name, " must be an integer from ", min, " to ", max,
                               ", got \"", Printable(*v), "\""));
    return fallback;
  }
  return x;
}

double Invocation::Positive(absl::string_view name, double max, double fallback) {
  std::optional<std::string> v = String(name);
  if (!v) return fallback;
  double x = 0;
  if (!absl::SimpleAtod(*v, &x) || !std::isfinite(x) || !(x > 0) || x > max) {
    AddUsageError(absl::StrCat("--", name, " must be a number > 0 and <= ", max, ", got \"",
                               Printable(*v), "\""));
    return fallback;
  }
  return x;
}

double Invocation::Bounded(absl::string_view name, double min, double max, double fallback) {
  std::optional<std::string> v = String(name);
  if (!v) return fallback;
  double x = 0;
  if (!absl::SimpleAtod(*v, &x) || !std::isfinite(x) || !(x >= min) || x > max) {
    AddUsageError(absl::StrCat("--", name, " must be a number from ", min, " to ", max, ", got \"",
                               Printable(*v), "\""));
    return fallback;
  }
  return x;
}

double Invocation::NonNegative(absl::string_view name, double max, double fallback) {
  std::optional<std::string> v = String(name);
  if (!v) return fallback;
  double x = 0;
  if (!absl::SimpleAtod(*v, &x) || !std::isfinite(x) || !(x >= 0) || x > max) {
    AddUsageError(absl::StrCat("--", name, " must be a number >= 0 and <= ", max, ", got \"",
                               Printable(*v), "\""));
    return fallback;
  }
  return x;
}

std::optional<int64_t> Invocation::Size(absl::string_view name) {
  std::optional<std::string> v = String(name);
  if (!v) return std::nullopt;
  absl::StatusOr<int64_t> size = ParseSize(*v);
  if (!size.ok()) {
    AddUsageError(absl::StrCat("--", name, ": ", size.status().message()));
    return std::nullopt;
  }
  return *size;
}

std::optional<int64_t> Invocation::PositiveSize(absl::string_view name, absl::string_view omitted) {
  std::optional<int64_t> size = Size(name);
  if (size != 0) return size;
  AddUsageError(absl::StrCat("--", name, " must be > 0 (omit it for ", omitted, ")"));
  return std::nullopt;
}

void Invocation::AddUsageError(std::string message) {
  if (!usage_error_) usage_error_ = std::move(message);
}

int Invocation::UsageError() {
  std::fprintf(err_, "overlap: %s\n\n%s", usage_error_.value_or("bad usage").c_str(),
               UsageText(spec_).c_str());
  return kExitUsage;
}

int Invocation::BadInput(const absl::Status& s) {
  std::fprintf(err_, "overlap: error: %s\n", std::string(s.message()).c_str());
  return kExitBadInput;
}

namespace {

const CommandSpec* FindCommand(absl::Span<const CommandSpec* const> commands,
                               const std::string& name) {
  for (const CommandSpec* c : commands) {
    if (c->name == name) return c;
  }
  return nullptr;
}

std::string MainUsage(absl::Span<const CommandSpec* const> commands) {
  std::string out =
      "overlap: compile distributed-training dataflow graphs.\n\n"
      "usage: overlap <command> [options]\n\ncommands:\n";
  for (const CommandSpec* c : commands) {
    std::string left = absl::StrCat("  ", c->name, " ", c->synopsis);
    if (left.size() < 36) left.resize(36, ' ');
    absl::StrAppend(&out, left, " ", c->summary, "\n");
  }
  absl::StrAppend(&out,
                  "  help [COMMAND]                     show help for a command\n\n"
                  "models: ",
                  kModelList, "\nexit codes: 0 ok, 1 bad input, 2 bad usage\n");
  return out;
}

}  // namespace

int RunCommandLine(absl::Span<const CommandSpec* const> commands,
                   const std::vector<std::string>& args, std::FILE* out, std::FILE* err) {
  if (args.empty()) {
    std::fputs(MainUsage(commands).c_str(), err);
    return kExitUsage;
  }
  const std::string& name = args[0];
  if (name == "help" || name == "--help" || name == "-h") {
    if (args.size() == 1) {
      std::fputs(MainUsage(commands).c_str(), out);
      return kExitOk;
    }
    const CommandSpec* spec = FindCommand(commands, args[1]);
    if (spec == nullptr) {
      std::fprintf(err, "overlap: no help for unknown command \"%s\"\n\n%s",
                   Printable(args[1]).c_str(), MainUsage(commands).c_str());
      return kExitUsage;
    }
    if (spec->hand_off != nullptr) return spec->hand_off(args, out, err);
    std::fputs(UsageText(*spec).c_str(), out);
    return kExitOk;
  }
  const CommandSpec* spec = FindCommand(commands, name);
  if (spec == nullptr) {
    std::fprintf(err, "overlap: unknown command \"%s\"\n\n%s", Printable(name).c_str(),
                 MainUsage(commands).c_str());
    return kExitUsage;
  }
  if (spec->hand_off != nullptr) return spec->hand_off(args, out, err);
  Invocation in(*spec, out, err);
  if (!in.Parse(args, 1)) return in.UsageError();
  if (in.help()) {
    std::fputs(UsageText(*spec).c_str(), out);
    return kExitOk;
  }
  int code = kExitOk;
  try {
    code = spec->run(in);
  } catch (const std::bad_alloc&) {
    // The last resort: inputs are bounded (docs/limits.md), but a machine can still run out.
    std::fprintf(err, "overlap: error: out of memory while running `overlap %s`\n",
                 std::string(spec->name).c_str());
    return kExitBadInput;
  }
  // Summaries go to `out` unchecked as they are printed; a failed write (a full disk, a
  // closed pipe) must not pass for success.
  if (std::fflush(out) != 0 || std::ferror(out)) {
    std::fprintf(err, "overlap: error: writing to stdout failed: %s\n",
                 std::strerror(errno != 0 ? errno : EIO));
    return code == kExitOk ? kExitBadInput : code;
  }
  return code;
}

}  // namespace overlap
