import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x * weight + bias, with learned per-column weight and bias."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * self.weight + self.bias


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return [4096]
