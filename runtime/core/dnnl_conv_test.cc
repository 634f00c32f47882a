// oneDNN's convolutions against the definition, summed in double: the forward (with and
// without bias), the data gradient and the weight gradient, for strides, paddings,
// dilations, groups (depthwise too) and the output sizes whose floor leaves input rows
// unread (a 1x1 stride-2 convolution of an even size).
#include "runtime/core/dnnl_conv.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace overlap {
namespace {

DnnlConvShape Shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t k,
                    int64_t groups, int64_t stride, int64_t pad, int64_t dil) {
  DnnlConvShape s{n, c, h, w, o, k, k, groups, 0, 0, stride, stride, pad, pad, dil, dil};
  s.ho = (h + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  s.wo = (w + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  return s;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// The convolution's definition: calls each(b, oc, oy, ox, ci, ky, kx, x index, w index) for
// every term of every output element.
template <typename F>
void ForEachTerm(const DnnlConvShape& s, F each) {
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t oc = 0; oc < s.o; ++oc)
      for (int64_t oy = 0; oy < s.ho; ++oy)
        for (int64_t ox = 0; ox < s.wo; ++ox)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < s.kh; ++ky)
              for (int64_t kx = 0; kx < s.kw; ++kx) {
                const int64_t iy = oy * s.sh - s.ph + ky * s.dh;
                const int64_t ix = ox * s.sw - s.pw + kx * s.dw;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                const int64_t c = (oc / og) * cg + ci;
                each((((b * s.o + oc) * s.ho + oy) * s.wo + ox),
                     ((b * s.c + c) * s.h + iy) * s.w + ix,
                     ((oc * cg + ci) * s.kh + ky) * s.kw + kx);
              }
}

void ExpectNear(const std::vector<double>& want, const std::vector<float>& got, const char* what) {
  double scale = 1e-30;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * scale) << what << " element " << i;
  }
}

class DnnlConvTest : public ::testing::TestWithParam<DnnlConvShape> {};

TEST_P(DnnlConvTest, MatchesTheDefinition) {
  const DnnlConvShape s = GetParam();
  ASSERT_TRUE(DnnlConvSupports(s));
  const size_t nx = s.n * s.c * s.h * s.w, ny = s.n * s.o * s.ho * s.wo,
               nw = s.o * (s.c / s.groups) * s.kh * s.kw;
  const std::vector<float> x = Random(nx, 1), w = Random(nw, 2), gy = Random(ny, 3),
                           bias = Random(s.o, 4);
  std::vector<double> y(ny, 0), dx(nx, 0), dw(nw, 0);
  ForEachTerm(s, [&](int64_t yi, int64_t xi, int64_t wi) {
    y[yi] += double{x[xi]} * w[wi];
    dx[xi] += double{gy[yi]} * w[wi];
    dw[wi] += double{gy[yi]} * x[xi];
  });
  std::vector<float> got(ny, NAN);
  ASSERT_TRUE(DnnlConvForward(s, x.data(), w.data(), nullptr, got.data()).ok());
  ExpectNear(y, got, "forward");
  for (size_t i = 0; i < ny; ++i) y[i] += bias[(i / (s.ho * s.wo)) % s.o];
  std::fill(got.begin(), got.end(), NAN);
  ASSERT_TRUE(DnnlConvForward(s, x.data(), w.data(), bias.data(), got.data()).ok());
  ExpectNear(y, got, "forward with bias");
  std::vector<float> got_dx(nx, NAN), got_dw(nw, NAN);
  ASSERT_TRUE(DnnlConvBackwardData(s, gy.data(), w.data(), got_dx.data()).ok());
  ExpectNear(dx, got_dx, "data gradient");
  ASSERT_TRUE(DnnlConvBackwardWeights(s, x.data(), gy.data(), got_dw.data()).ok());
  ExpectNear(dw, got_dw, "weight gradient");
  // A second call (the cached primitive) gives the same.
  std::vector<float> again(nw, NAN);
  ASSERT_TRUE(DnnlConvBackwardWeights(s, x.data(), gy.data(), again.data()).ok());
  EXPECT_EQ(again, got_dw);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DnnlConvTest,
    ::testing::Values(Shape(2, 3, 9, 9, 8, 3, 1, 1, 1, 1),     // a stem
                      Shape(2, 16, 8, 8, 32, 3, 1, 2, 1, 1),   // a strided 3x3
                      Shape(2, 16, 8, 8, 32, 1, 1, 2, 0, 1),   // a 1x1 downsample (even size)
                      Shape(1, 8, 7, 7, 8, 3, 8, 1, 1, 1),     // depthwise
                      Shape(2, 12, 6, 5, 6, 3, 3, 1, 2, 2),    // groups, dilation
                      Shape(1, 4, 11, 11, 4, 5, 1, 3, 2, 1),   // stride 3, 5x5
                      Shape(3, 8, 4, 4, 16, 1, 1, 1, 0, 1)));  // 1x1

TEST(DnnlConvSupportsTest, RefusesWhatItCannotExpress) {
  DnnlConvShape s = Shape(1, 4, 8, 8, 4, 3, 1, 1, 1, 1);
  s.ho = 20;  // more rows than the padding gives
  EXPECT_FALSE(DnnlConvSupports(s));
  DnnlConvShape t = Shape(1, 4, 8, 8, 4, 3, 3, 1, 1, 1);  // 4 channels in 3 groups
  EXPECT_FALSE(DnnlConvSupports(t));
}

}  // namespace
}  // namespace overlap
