// The kernel: plain C++ on raw pointers (the cpu backend's stand-in for a .cu file).
#include <cstdint>

extern "C" void relu_launch(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
