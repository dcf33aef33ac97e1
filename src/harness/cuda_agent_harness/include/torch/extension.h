// The judge's torch/extension.h for candidate builds (found before torch's own).
//
// Candidates get ATen tensors, TORCH_CHECK, the dispatch macros and pybind11
// with the tensor caster; not the C++ frontend (torch::nn, optim, data), whose
// compute they may not call anyway. Parsing only this much makes every build
// several seconds faster. CUDA sources (nvcc) get no pybind11: the Python
// bindings are generated in the C++ translation unit, and Python's and
// pybind11's headers cost nvcc's host passes ~2 s each.
#pragma once

#ifndef __CUDACC__
#include <torch/csrc/utils/pybind.h>
#endif
#include <torch/types.h>
