import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
__global__ void add_kernel(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c,
                           int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
    float4 x = a[i], y = b[i];
    c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

torch::Tensor add_forward(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.numel() % 4 == 0, "numel must be a multiple of 4");
  auto c = torch::empty_like(a);
  const int64_t n4 = a.numel() / 4;
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((n4 + threads - 1) / threads, 8192);
  add_kernel<<<blocks, threads>>>(reinterpret_cast<const float4*>(a.data_ptr<float>()),
                                  reinterpret_cast<const float4*>(b.data_ptr<float>()),
                                  reinterpret_cast<float4*>(c.data_ptr<float>()), n4);
  return c;
}
"""
cpp_src = "torch::Tensor add_forward(torch::Tensor a, torch::Tensor b);"
ext = load_inline(name="add_cuda_kb", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["add_forward"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.add_forward(a.contiguous(), b.contiguous())
