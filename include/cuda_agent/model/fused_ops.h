// Differentiable ops of the policy that run as single fused CUDA kernels on a
// GPU (src/model/fused_kernels.cu) and as the equivalent ATen expressions
// elsewhere. On CUDA the arithmetic is fp32 with one rounding to the output
// dtype, where the ATen expressions round after every op in bf16.
#pragma once

#include <ATen/core/Tensor.h>

namespace cuda_agent::model {

// Per row of logits [N, V]: the log-probability of targets[n] (int64) and the
// entropy of the softmax, both fp32 [N] and differentiable in the logits. On
// CUDA this reads the logits once forward and once backward (writing their
// gradient in the logits' dtype) and makes no [N, V] fp32 tensor.
struct TokenLogprobs {
  at::Tensor logprobs, entropy;
};
TokenLogprobs ComputeTokenLogprobs(const at::Tensor& logits, const at::Tensor& targets);

// Rotary position embedding as transformers applies it: x * cos +
// rotate_half(x) * sin, x [B, T, heads, dim], cos and sin [B, T, 1, dim] in
// x's dtype (not differentiated).
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// silu(gate) * up.
at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up);

// True where the fused CUDA kernels are built in.
bool HaveFusedKernels();

}  // namespace cuda_agent::model
