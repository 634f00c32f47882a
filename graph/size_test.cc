#include "graph/size.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(SizeTest, ParsesUnitsAsTheSpecDefinesThem) {
  EXPECT_EQ(*ParseSize("25MiB"), 26214400);
  EXPECT_EQ(*ParseSize("1MiB"), 1048576);
  EXPECT_EQ(*ParseSize("1MB"), 1000000);
  EXPECT_EQ(*ParseSize("3KB"), 3000);
  EXPECT_EQ(*ParseSize("2GiB"), 2147483648);
  EXPECT_EQ(*ParseSize("1048576"), 1048576);
  EXPECT_EQ(*ParseSize("0"), 0);
  EXPECT_EQ(*ParseSize("7B"), 7);
  EXPECT_EQ(*ParseSize(" 4 KiB "), 4096);
}

TEST(SizeTest, RejectsBadSizesNamingThem) {
  EXPECT_THAT(ParseSize("-1MiB").status().message(), ::testing::HasSubstr("\"-1MiB\""));
  EXPECT_FALSE(ParseSize("MiB").ok());
  EXPECT_FALSE(ParseSize("1.5").ok());  // fractional bytes
  EXPECT_FALSE(ParseSize("1.5B").ok());
  EXPECT_FALSE(ParseSize("1.MiB").ok());
  EXPECT_FALSE(ParseSize(".5MiB").ok());
  EXPECT_FALSE(ParseSize("10 parsecs").ok());
  EXPECT_THAT(ParseSize("9000000TiB").status().message(), ::testing::HasSubstr("overflows"));
  EXPECT_FALSE(ParseSize("99999999999999999999999").ok());
}

// What the CLI prints reads back: `--memory-limit 195.1KiB` was refused ("unknown unit").
TEST(SizeTest, ParsesWhatFormatBytesPrints) {
  EXPECT_EQ(*ParseSize("195.1KiB"), 199782);  // 195.1 x 1024 = 199782.4
  EXPECT_EQ(*ParseSize("1.5MiB"), 1572864);
  EXPECT_EQ(*ParseSize("0.5 KB"), 500);
  EXPECT_EQ(*ParseSize("1EiB"), int64_t{1} << 60);
  EXPECT_EQ(*ParseSize("2PB"), int64_t{2000000000000000});
  for (int64_t bytes : {int64_t{1536}, int64_t{199782}, int64_t{137953296384}, int64_t{5} << 50}) {
    const std::string shown = FormatBytes(bytes);
    absl::StatusOr<int64_t> back = ParseSize(shown);
    ASSERT_TRUE(back.ok()) << shown << ": " << back.status();
    // Three significant digits: within half a unit of the last digit shown.
    EXPECT_NEAR(static_cast<double>(*back), static_cast<double>(bytes), bytes * 0.005) << shown;
  }
}

TEST(SizeTest, FormatsForHumans) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(137953296384), "128.5 GiB");
  EXPECT_EQ(FormatCount(68976648192), "68,976,648,192");
  EXPECT_EQ(FormatCount(-1234), "-1,234");
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatSeconds(0.0015), "1.500 ms");
}

}  // namespace
}  // namespace overlap
