#include "tools/command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

constexpr FlagSpec kFlags[] = {
    {"output", 'o', "FILE", "write to FILE"},
    {"lifted", 0, "", "a switch"},
    {"nodes", 0, "N", "a number\nwhose help has two lines"},
    {"limit", 0, "SIZE", "a size"},
};
constexpr FlagSpec kShared[] = {{"world-size", 0, "N", "ranks"}};

CommandSpec Spec() {
  CommandSpec s;
  s.name = "test";
  s.synopsis = "FILE [options]";
  s.description = "Does a test.\n";
  s.flags = {kFlags, kShared};
  s.min_positional = s.max_positional = 1;
  s.positional_name = "file";
  return s;
}

// Parses `args` (after the command name); returns the recorded usage error or "".
std::string ParseError(const CommandSpec& spec, std::vector<std::string> args) {
  args.insert(args.begin(), "test");
  std::FILE* err = std::tmpfile();
  Invocation capture(spec, stdout, err);
  if (!capture.Parse(args, 1) || capture.has_usage_error()) {
    capture.UsageError();
    std::rewind(err);
    char buf[256] = {0};
    if (std::fgets(buf, sizeof(buf), err) == nullptr) buf[0] = 0;
    std::fclose(err);
    return buf;
  }
  std::fclose(err);
  return "";
}

TEST(CommandTest, UsageTextComesFromTheFlagTable) {
  const std::string usage = UsageText(Spec());
  EXPECT_THAT(usage, HasSubstr("usage: overlap test FILE [options]\n\nDoes a test.\n"));
  EXPECT_THAT(usage, HasSubstr("  -o, --output FILE        write to FILE\n"));
  EXPECT_THAT(usage, HasSubstr("  --lifted                 a switch\n"));
  EXPECT_THAT(usage, HasSubstr("  --nodes N                a number\n"
                               "                           whose help has two lines\n"));
  EXPECT_THAT(usage, HasSubstr("  --world-size N           ranks\n"));
}

TEST(CommandTest, ParsesFlagsSwitchesAndPositionals) {
  const CommandSpec spec = Spec();
  Invocation in(spec, stdout, stderr);
  ASSERT_TRUE(in.Parse({"test", "g.json", "-o", "out", "--lifted", "--nodes=7", "--world-size", "4",
                        "--limit", "2KiB"},
                       1));
  EXPECT_EQ(in.positional(), std::vector<std::string>{"g.json"});
  EXPECT_EQ(in.String("output"), "out");
  EXPECT_TRUE(in.Switch("lifted"));
  EXPECT_EQ(in.Int("nodes", 0, 10, 1), 7);
  EXPECT_EQ(in.Int("world-size", 1, 8, 32), 4);
  EXPECT_EQ(in.Size("limit"), 2048);
  EXPECT_EQ(in.Int("missing", 0, 10, 5), 5);
  EXPECT_FALSE(in.has_usage_error());
}

TEST(CommandTest, BadCommandLinesAreUsageErrorsThatSayWhy) {
  const CommandSpec spec = Spec();
  EXPECT_THAT(ParseError(spec, {"g", "--bogus"}), HasSubstr("unknown option --bogus"));
  EXPECT_THAT(ParseError(spec, {"g", "-x"}), HasSubstr("unknown option -x"));
  EXPECT_THAT(ParseError(spec, {"g", "--lifted=1"}), HasSubstr("--lifted takes no value"));
  EXPECT_THAT(ParseError(spec, {"g", "--nodes"}), HasSubstr("--nodes needs a value (N)"));
  EXPECT_THAT(ParseError(spec, {"g", "-o", "a", "-o", "b"}), HasSubstr("--output is given twice"));
  EXPECT_THAT(ParseError(spec, {}), HasSubstr("test takes exactly one file"));
  EXPECT_THAT(ParseError(spec, {"a", "b"}), HasSubstr("test takes exactly one file"));
  EXPECT_EQ(ParseError(spec, {"a", "--help"}), "");
}

TEST(CommandTest, ValuesOutOfRangeNameTheRange) {
  const CommandSpec spec = Spec();
  Invocation in(spec, stdout, stderr);
  ASSERT_TRUE(in.Parse({"test", "g", "--nodes", "2147483648"}, 1));
  in.Int("nodes", 0, 2147483647, 1);
  ASSERT_TRUE(in.has_usage_error());
  std::FILE* err = std::tmpfile();
  Invocation capture(spec, stdout, err);
  ASSERT_TRUE(capture.Parse({"test", "g", "--nodes", "2147483648", "--limit", "lots"}, 1));
  capture.Int("nodes", 0, 2147483647, 1);
  capture.Size("limit");  // a second error: only the first is reported
  EXPECT_EQ(capture.UsageError(), kExitUsage);
  std::rewind(err);
  char buf[256] = {0};
  if (std::fgets(buf, sizeof(buf), err) == nullptr) buf[0] = 0;
  std::fclose(err);
  EXPECT_THAT(std::string(buf),
              HasSubstr("--nodes must be an integer from 0 to 2147483647, got \"2147483648\""));
}

}  // namespace
}  // namespace overlap
