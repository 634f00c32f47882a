#include "runtime/core/safetensors.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::StatusOr<TensorMap>& r) {
  return std::string(r.status().message());
}

// A file written by hand the way the format describes it: header length, JSON, data.
std::string File(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST(SafetensorsTest, RoundTripsEveryDtypeViewsAndMetadata) {
  Allocator alloc;
  TensorMap in;
  Tensor w = *Tensor::Empty(alloc, DType::kFloat32, {2, 3});
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = 0.5f * i;
  in["w"] = w;
  in["w_t"] = *w.Transpose(0, 1);  // written contiguously
  Tensor ids = *Tensor::Empty(alloc, DType::kInt64, {4});
  for (int i = 0; i < 4; ++i) ids.data<int64_t>()[i] = 1000000000000LL * i;
  in["ids"] = ids;
  in["empty"] = *Tensor::Empty(alloc, DType::kBFloat16, {0, 7});
  in["flag"] = *Tensor::Empty(alloc, DType::kBool, {});
  const std::string bytes = WriteSafetensors(in, {{"format", "pt"}});
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);  // data 8-aligned
  EXPECT_THAT(bytes.substr(8, n), HasSubstr("\"__metadata__\":{\"format\":\"pt\"}"));
  absl::StatusOr<TensorMap> out = ReadSafetensors(bytes, alloc);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 5u);
  const Tensor& wt = out->at("w_t");
  EXPECT_EQ(wt.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(wt.IsContiguous());
  EXPECT_EQ(wt.data<float>()[1], 1.5f);  // w[1][0]
  EXPECT_EQ(out->at("ids").data<int64_t>()[3], 3000000000000LL);
  EXPECT_EQ(out->at("empty").shape(), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(out->at("empty").dtype(), DType::kBFloat16);
  EXPECT_EQ(out->at("flag").numel(), 1);
}

TEST(SafetensorsTest, ReadsAFileWrittenByHand) {
  Allocator alloc;
  const float data[2] = {1.0f, -2.0f};
  const std::string file = File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                std::string(reinterpret_cast<const char*>(data), 8));
  absl::StatusOr<TensorMap> r = ReadSafetensors(file, alloc);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->at("a").data<float>()[1], -2.0f);
}

TEST(SafetensorsTest, SkippedTensorsAreCheckedButNotKeptFromBytesOrAMappedFile) {
  Allocator alloc;
  TensorMap in;
  for (const char* name : {"param/w", "ref/loss", "ref64/grad/w", "ref64p/grad/w", "batch/0/x"}) {
    Tensor t = *Tensor::Empty(alloc, DType::kFloat32, {3});
    for (int i = 0; i < 3; ++i) t.data<float>()[i] = static_cast<float>(i + std::strlen(name));
    in[name] = t;
  }
  const std::string bytes = WriteSafetensors(in, {});
  const std::string path = ::testing::TempDir() + "/skip.safetensors";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
  for (const absl::StatusOr<TensorMap>& r : {ReadSafetensors(bytes, alloc, IsReferenceTensor),
                                             ReadSafetensorsFile(path, alloc, IsReferenceTensor)}) {
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ(r->at("param/w").data<float>()[2], 2.0f + 7);
    EXPECT_EQ(r->at("batch/0/x").data<float>()[0], 9.0f);
  }
  EXPECT_FALSE(IsReferenceTensor("reference/x"));
  // A skipped tensor's offsets are still checked.
  const std::string bad =
      File(R"({"ref/a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_THAT(Message(ReadSafetensors(bad, alloc, IsReferenceTensor)), HasSubstr("ref/a"));
}

TEST(SafetensorsTest, BadFilesAreErrorsNamingTheTensor) {
  Allocator alloc;
  EXPECT_THAT(Message(ReadSafetensors("abc", alloc)), HasSubstr("shorter than 8 bytes"));
  std::string huge(8, '\xff');
  EXPECT_THAT(Message(ReadSafetensors(huge, alloc)), HasSubstr("runs past the end"));
  EXPECT_THAT(Message(ReadSafetensors(File("[1]", ""), alloc)), HasSubstr("not a JSON object"));
  EXPECT_THAT(Message(ReadSafetensors(File("{", ""), alloc)), HasSubstr("not a JSON object"));
  const std::string four(4, '\0');
  EXPECT_THAT(Message(ReadSafetensors(
                  File(R"({"x":{"dtype":"C64","shape":[1],"data_offsets":[0,4]}})", four), alloc)),
              HasSubstr("tensor \"x\": unsupported dtype \"C64\""));
  EXPECT_THAT(Message(ReadSafetensors(
                  File(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four), alloc)),
              HasSubstr("tensor \"x\": shape and dtype need 8 bytes"));
  EXPECT_THAT(Message(ReadSafetensors(
                  File(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", four), alloc)),
              HasSubstr("outside the 4 data bytes"));
  EXPECT_THAT(Message(ReadSafetensors(
                  File(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four), alloc)),
              HasSubstr("non-negative"));
  EXPECT_THAT(Message(ReadSafetensors(File(R"({"x":{"dtype":"F32","shape":[1]}})", four), alloc)),
              HasSubstr("data_offsets"));
  // Overlaps, holes, uncovered bytes.
  EXPECT_THAT(
      Message(ReadSafetensors(File(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                   four),
                              alloc)),
      HasSubstr("overlaps"));
  EXPECT_THAT(Message(ReadSafetensors(
                  File(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", four), alloc)),
              HasSubstr("hole"));
  EXPECT_THAT(Message(ReadSafetensors(
                  File(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", four), alloc)),
              HasSubstr("2 data bytes belong to no tensor"));
}

// A 75-byte file declaring 2 GB once cost 2.1 GB and 12 s: the byte count is checked
// against the offsets before anything is allocated.
TEST(SafetensorsTest, DeclaredSizesAreCheckedBeforeAllocating) {
  Allocator alloc;
  const std::string gigabytes =
      File(R"({"x":{"dtype":"F32","shape":[536870912],"data_offsets":[0,0]}})", "");
  EXPECT_THAT(Message(ReadSafetensors(gigabytes, alloc)),
              HasSubstr("shape and dtype need 2147483648 bytes, data_offsets give 0"));
  const std::string overflow =
      File(R"({"x":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})",
           std::string(8, '\0'));
  EXPECT_THAT(Message(ReadSafetensors(overflow, alloc)), HasSubstr("does not fit in 62 bits"));
  EXPECT_EQ(alloc.peak(Pool::kValues), 0);
}

TEST(SafetensorsTest, ADuplicateNameIsAnErrorNamingIt) {
  Allocator alloc;
  const std::string twice = File(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                 std::string(8, '\0'));
  EXPECT_THAT(Message(ReadSafetensors(twice, alloc)), HasSubstr("tensor \"w\" appears twice"));
}

// `--weights /dev/zero` read until out of memory; a folder opened and read as nothing.
TEST(SafetensorsTest, DevicesAndFoldersAreRefusedByType) {
  Allocator alloc;
  absl::StatusOr<TensorMap> zero = ReadSafetensorsFile("/dev/zero", alloc);
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("not a regular file"));
  absl::StatusOr<TensorMap> dir = ReadSafetensorsFile(testing::TempDir(), alloc);
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("is a directory"));
  EXPECT_EQ(ReadSafetensorsFile("/nonexistent/w.safetensors", alloc).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace overlap
