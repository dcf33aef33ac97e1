#!/usr/bin/env python3
"""Model fixtures from transformers itself, for tests/model/model_test.cpp.

Randomly initialised small Llama (with llama3 rope scaling and untied head),
Qwen2 (q/k/v biases, tied embeddings, sharded safetensors) and Qwen3 (q/k norms,
explicit head_dim) models, saved with save_pretrained, plus per model
expected.safetensors holding fp32 logits for a few prompts and greedy.json with
transformers' greedy continuations.

  python3 tests/model/make_fixtures.py OUT_DIR          # make the fixtures
  python3 tests/model/make_fixtures.py --logits DIR     # logits of DIR's model on the same prompts
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

PROMPTS = [[1, 5, 9, 200, 33, 7, 7, 7, 150], [3], [250, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]
GREEDY_TOKENS = 12


def configs():
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6, initializer_range=0.25)
    return {
        "llama": LlamaConfig(**common, rope_theta=500000.0, tie_word_embeddings=False,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
        "qwen2": Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=True),
        "qwen3": Qwen3Config(**common, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=False),
    }


def model_class(name):
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM
    return {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM}[name]


def logits_of(model):
    out = {}
    with torch.no_grad():
        for i, p in enumerate(PROMPTS):
            out["logits_%d" % i] = model(torch.tensor([p])).logits[0].float().contiguous()
    return out


def byte_tokenizer(path):
    """A 256-token byte-level BPE tokenizer (no merges) matching the models' vocab."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.save(path)


def make(out_dir):
    for name, config in configs().items():
        torch.manual_seed(1234)
        config.dtype = "float32"
        model = model_class(name)(config).eval()
        with torch.no_grad():  # make biases and norms non-trivial, so wrong wiring shows
            for pname, p in model.named_parameters():
                if pname.endswith("bias") or "norm" in pname:
                    p.add_(torch.randn_like(p) * 0.1)
        d = os.path.join(out_dir, name)
        model.save_pretrained(d, safe_serialization=True, max_shard_size="100KB" if name == "qwen2" else "1GB")
        save_file(logits_of(model), os.path.join(d, "expected.safetensors"))
        byte_tokenizer(os.path.join(d, "tokenizer.json"))
        greedy = []
        with torch.no_grad():
            for p in PROMPTS:
                ids = model.generate(torch.tensor([p]), max_new_tokens=GREEDY_TOKENS, do_sample=False,
                                     eos_token_id=None, pad_token_id=0)
                greedy.append(ids[0, len(p):].tolist())
        with open(os.path.join(d, "greedy.json"), "w") as f:
            json.dump({"prompts": PROMPTS, "continuations": greedy}, f)
    print("model fixtures in", out_dir)


def logits_mode(model_dir, out_path):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    save_file(logits_of(model), out_path)


if __name__ == "__main__":
    if sys.argv[1] == "--logits":
        logits_mode(sys.argv[2], sys.argv[3])
    else:
        make(sys.argv[1])
