#!/usr/bin/env python3
"""Tokenizer fixtures from Hugging Face itself, for tests/tokenizer/tokenizer_test.cpp.

Trains byte-level BPE tokenizers with the `tokenizers` library on over 1 MB of
mixed code and text (the Python standard library's sources and docstrings, plus
multilingual lines made here), in two styles:
  qwen2: NFC normalizer, Qwen2's split regex (Isolated) + ByteLevel(use_regex=False)
  gpt2:  ByteLevel(add_prefix_space=True, use_regex=True) and a TemplateProcessing
         post-processor that adds a BOS token (Llama-3 style)
then writes, per style, tokenizer.json, tokenizer_config.json (with a chat
template) and cases.json: held-out texts with the ids and decodings Hugging Face
produces, and chat renderings from transformers' apply_chat_template.

  python3 tests/tokenizer/make_fixtures.py OUT_DIR
"""
import json
import os
import random
import sys
import sysconfig

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

MULTILINGUAL = [
    "Naïve café owners in Zürich sell crème brûlée for 4,50 €.",
    "日本語のテキストとカタカナ、ひらがな、漢字が混ざっています。",
    "中文文本：内核融合可以减少内存带宽的消耗。",
    "Ελληνικά: η ταχύτητα του πυρήνα μετράει.",
    "Русский текст: ядро CUDA работает быстрее.",
    "Emoji 🚀🔥✨ and symbols ∑∫√∞ ≤ ≥ ≠ ±",
    "Combining: e\u0301 a\u0300 o\u0308 (decomposed), é à ö (composed)",
    "한국어 문장도 포함됩니다. 숫자 12345 와 함께.",
    "עברית וערבית: مرحبا بالعالم",
]

HELD_OUT = [
    "def fused_gelu(x: torch.Tensor) -> torch.Tensor:\n    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * x))\n",
    "__global__ void relu(const float* __restrict__ x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + "
    "threadIdx.x;\n  if (i < n) y[i] = fmaxf(x[i], 0.f);\n}\n",
    "Whitespace runs:    four spaces,\t\ttwo tabs,\n\n\n\nfour newlines, trailing   \n   \t \n",
    "Digits 0123456789, 3.14159265358979, 1e-10, 0x7fffffff, 2026-11-30T08:29:12Z",
    "Unicode: naïve façade, 東京タワー, Ελλάδα, 🚀🚀 rockets, e\u0301 vs é, ﬁ ligature, ½ fraction",
    "<|im_start|>system\nYou write CUDA kernels.<|im_end|>\n<|im_start|>user\nFuse x*w+b.<|im_end|>\n"
    "<|im_start|>assistant\n",
    "text before<|endoftext|>text after<|endoftext|><|endoftext|>",
    "Mixed CASE Words, APOSTROPHES don't WON'T it's I'M we'll they'D",
    "",
    " ",
    "\n",
    "a",
]

CHATS = [
    [{"role": "system", "content": "You are a CUDA expert."}, {"role": "user", "content": "Write a ReLU kernel."}],
    [{"role": "user", "content": "  spaced content \n"}, {"role": "assistant", "content": "ok"},
     {"role": "user", "content": "again"}],
]


def corpus(min_bytes):
    """Sorted standard-library sources (code + docstrings) and multilingual lines."""
    root = sysconfig.get_paths()["stdlib"]
    texts, size = [], 0
    rng = random.Random(0)
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames[:] = sorted(d for d in dirnames if d not in ("test", "tests", "idlelib", "site-packages",
                                                              "dist-packages", "__pycache__"))
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                text = f.read()
            texts.append(text)
            texts.append(" ".join(rng.sample(MULTILINGUAL, 3)))
            size += len(text.encode())
            if size >= min_bytes:
                return texts, size
    return texts, size


def held_out_sources(max_bytes):
    """Standard-library test files (not in the corpus), ~max_bytes of them."""
    root = os.path.join(sysconfig.get_paths()["stdlib"], "test")
    out, size = [], 0
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if name.startswith("test_") and name.endswith(".py"):
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                out.append(f.read())
            size += len(out[-1].encode())
            if size >= max_bytes:
                break
    return out


def train(style, texts):
    tok = Tokenizer(models.BPE(ignore_merges=(style == "gpt2")))
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=6000, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    if style == "gpt2":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    return tok


def main():
    out = sys.argv[1]
    texts, size = corpus(1_100_000)
    assert size >= 1_000_000, size
    for style in ("qwen2", "gpt2"):
        d = os.path.join(out, style)
        os.makedirs(d, exist_ok=True)
        tok = train(style, texts)
        tok.save(os.path.join(d, "tokenizer.json"))
        config = {"chat_template": CHATML if style == "qwen2" else LLAMA3,
                  "bos_token": "<|begin_of_text|>", "eos_token": "<|endoftext|>",
                  "tokenizer_class": "PreTrainedTokenizerFast"}
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
        cases = []
        for text in HELD_OUT + held_out_sources(100_000):
            plain = tok.encode(text, add_special_tokens=False).ids
            cases.append({"text": text, "ids": plain,
                          "ids_special": tok.encode(text, add_special_tokens=True).ids,
                          "decoded": tok.decode(plain, skip_special_tokens=False),
                          "decoded_skip": tok.decode(plain, skip_special_tokens=True)})
        chats = []
        from transformers import PreTrainedTokenizerFast
        fast = PreTrainedTokenizerFast.from_pretrained(d)
        for messages in CHATS:
            for gen in (False, True):
                chats.append({"messages": messages, "add_generation_prompt": gen,
                              "text": fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)})
        with open(os.path.join(d, "cases.json"), "w") as f:
            json.dump({"corpus_bytes": size, "vocab_size": tok.get_vocab_size(), "cases": cases, "chats": chats},
                      f, ensure_ascii=False, indent=1)
    print("fixtures in %s (corpus %d bytes)" % (out, size))


if __name__ == "__main__":
    main()
