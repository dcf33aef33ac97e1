// The binding: tensors in, raw pointers to the launcher, tensors out.
#include "binding_registry.h"

extern "C" void relu_launch(const float* x, float* y, int64_t n);

static torch::Tensor relu(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat, "contiguous float32 tensor expected");
  auto y = torch::empty_like(x);
  relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

REGISTER_BINDING(m) { m.def("relu", &relu); }
