#include "runtime/core/tensor.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(TensorTest, TheAllocatorCountsLiveAndPeakBytesPerPool) {
  Allocator alloc;
  {
    absl::StatusOr<Tensor> a = Tensor::Empty(alloc, DType::kFloat32, {2, 3});
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(alloc.live(Pool::kValues), 24);
    absl::StatusOr<Tensor> s = Tensor::Empty(alloc, DType::kFloat64, {4}, Pool::kScratch);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(alloc.live(Pool::kScratch), 32);
    EXPECT_EQ(alloc.live(Pool::kValues), 24);  // pools apart
    {
      Tensor view = *a->Transpose(0, 1);  // views allocate nothing
      EXPECT_EQ(alloc.live(Pool::kValues), 24);
      absl::StatusOr<Tensor> b = Tensor::Empty(alloc, DType::kBFloat16, {10});
      EXPECT_EQ(alloc.peak(Pool::kValues), 44);
    }
    EXPECT_EQ(alloc.live(Pool::kValues), 24);
    EXPECT_EQ(alloc.peak(Pool::kValues), 44);
    alloc.ResetPeak();
    EXPECT_EQ(alloc.peak(Pool::kValues), 24);
  }
  EXPECT_EQ(alloc.live(Pool::kValues), 0);  // freed with the last view
  EXPECT_EQ(alloc.live(Pool::kScratch), 0);
}

// Adopt moves a storage's bytes from one allocator's count to another's; freeing it then
// uncounts it there. A wrapped (uncounted) storage is refused.
TEST(TensorTest, AdoptMovesAStoragesBytesBetweenAllocators) {
  Allocator first, second;
  {
    absl::StatusOr<Tensor> t = Tensor::Empty(first, DType::kFloat32, {256});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(first.live(Pool::kValues), 1024);
    ASSERT_TRUE(second.Adopt(*t->storage()).ok());
    EXPECT_EQ(first.live(Pool::kValues), 0);
    EXPECT_EQ(first.peak(Pool::kValues), 1024);  // its past peak stays
    EXPECT_EQ(second.live(Pool::kValues), 1024);
    EXPECT_EQ(second.peak(Pool::kValues), 1024);
    ASSERT_TRUE(second.Adopt(*t->storage(), Pool::kScratch).ok());  // between pools
    EXPECT_EQ(second.live(Pool::kValues), 0);
    EXPECT_EQ(second.live(Pool::kScratch), 1024);
  }
  EXPECT_EQ(second.live(Pool::kScratch), 0);  // freed where it was last counted
  EXPECT_EQ(first.live(Pool::kValues), 0);
  std::byte bytes[16];
  std::shared_ptr<Storage> wrapped = Storage::Wrap(bytes, 16, Device::kCpu, [] {});
  EXPECT_EQ(second.Adopt(*wrapped).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TensorTest, ViewsShareStorageAndIndexThroughStrides) {
  Allocator alloc;
  Tensor t = *Tensor::Empty(alloc, DType::kFloat32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor tt = *t.Transpose(0, 1);  // 3 x 2
  EXPECT_TRUE(tt.SharesStorageWith(t));
  EXPECT_FALSE(tt.IsContiguous());
  EXPECT_EQ(tt.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(tt.data<float>()[tt.IndexOf({2, 1}) - tt.offset()], 5.0f);  // t[1][2]
  Tensor row = *t.Select(0, 1);
  EXPECT_EQ(row.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(row.data<float>()[0], 3.0f);
  Tensor every_other = *t.Slice(1, 0, 3, 2);
  EXPECT_EQ(every_other.shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(every_other.data<float>()[every_other.IndexOf({1, 1}) - every_other.offset()], 5.0f);
  Tensor flat = *t.View({6});
  EXPECT_TRUE(flat.IsContiguous());
  EXPECT_FALSE(tt.View({6}).ok());  // not contiguous
  EXPECT_FALSE(t.View({4}).ok());   // element count
  EXPECT_EQ(tt.DebugString(), "float32[3, 2] strides [1, 3]");
}

TEST(TensorTest, SizeOneAndEmptyShapesAndBadInput) {
  Allocator alloc;
  Tensor scalar = *Tensor::Empty(alloc, DType::kInt64, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.nbytes(), 8);
  Tensor empty = *Tensor::Empty(alloc, DType::kFloat32, {0, 5});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.IsContiguous());
  Tensor ones = *Tensor::Empty(alloc, DType::kFloat32, {1, 4, 1});
  EXPECT_TRUE(ones.Transpose(0, 2)->IsContiguous());  // size-1 dimensions' strides are free
  EXPECT_FALSE(Tensor::Empty(alloc, DType::kFloat32, {-1}).ok());
  EXPECT_FALSE(Tensor::Empty(alloc, DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}).ok());
  EXPECT_FALSE(scalar.Select(0, 0).ok());
  EXPECT_FALSE(ones.Select(1, 4).ok());
}

TEST(TensorTest, DTypesRoundTripThroughTheGraphsNames) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                  DType::kInt64, DType::kInt32, DType::kUInt8, DType::kBool}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
  EXPECT_EQ(*ParseDType("half"), DType::kFloat16);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2);
  EXPECT_FALSE(ParseDType("complex64").ok());
}

TEST(TensorTest, AvailableMemoryIsPositiveAndAtMostThePhysicalMemory) {
  // MemAvailable counts reclaimable page cache; it never exceeds the machine's memory.
  const int64_t available = AvailableMemoryBytes();
  const int64_t physical = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_GT(available, 0);
  EXPECT_LE(available, physical);
}

}  // namespace
}  // namespace overlap
