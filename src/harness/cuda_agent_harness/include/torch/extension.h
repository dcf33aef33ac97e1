// The judge's torch/extension.h for candidate builds (found before torch's own).
//
// Candidates get ATen tensors, TORCH_CHECK, the dispatch macros and pybind11
// with the tensor caster; not the C++ frontend (torch::nn, optim, data), whose
// compute they may not call anyway. Parsing only this much makes every build
// several seconds faster.
#pragma once

#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>
