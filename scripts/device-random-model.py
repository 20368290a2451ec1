"""A random Qwen3-shaped bf16 model folder for the device run (scripts/device-e2e.sh), laid out as on the Hub.

  python3 scripts/device-random-model.py SHAPE OUT TOKENIZER_DIR     SHAPE: 0.6b | 4b

The shapes are device-model-check.py's (the ones its torch+peft peers run). The weights are drawn on the GPU: a
4B folder is 8 GB, which the JavaScript writer (scripts/make-random-model.ts, used by the dry run here) takes
minutes to draw. The real Qwen3 tokenizer's files are copied in from TOKENIZER_DIR.
"""
import json
import os
import shutil
import sys
from importlib import import_module

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
SHAPES = import_module("device-model-check").SHAPES


def main(shape, out, tokenizer_dir):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=151936, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, **SHAPES[shape])
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, f), os.path.join(out, f))
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"figure": f"e2e.random_model.{shape}.parameters", "value": n, "unit": "parameters"}))


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in SHAPES:
        raise SystemExit(f"usage: device-random-model.py {'|'.join(SHAPES)} OUT TOKENIZER_DIR")
    main(*sys.argv[1:])
