#!/usr/bin/env python3
"""Peer check against Hugging Face transformers (run on a GPU machine with transformers 5.x and torch).

    python3 bench/gpu/peer_transformers.py ORBIT_CLI OUT.json

For Llama, Qwen2, DeepSeek-V2 (MLA, dense MLP) and the Qwen2.5-VL language model: a transformers-initialised
random model is saved with save_pretrained (transformers' own config.json and tensor names, v5's
rope_parameters and model.language_model.* included), then orbit's logits (`orbit logits --device cuda`) are
compared with transformers' forward of the same directory on the same GPU, in float32 and bfloat16. Relative
L2 error of all logits; tolerances as tests/cpp/test_device_cuda.cpp: float32 1e-4, bfloat16 5e-2.
"""
import json
import subprocess
import sys
import tempfile

import torch
import transformers

SMALL = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=1024, rms_norm_eps=1e-6)


def make(name):
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(num_key_value_heads=2, **SMALL))
    if name == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **SMALL))
    if name == "deepseek_v2":
        cfg = transformers.DeepseekV2Config(num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=64, qk_nope_head_dim=32,
                                            qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=4,
                                            num_experts_per_tok=2, first_k_dense_replace=2, **SMALL)
        return transformers.DeepseekV2ForCausalLM(cfg)
    if name == "qwen2_5_vl":
        text = dict(num_key_value_heads=2, rope_scaling={"type": "mrope", "mrope_section": [8, 12, 12]}, **SMALL)
        vision = dict(depth=1, hidden_size=64, intermediate_size=64, num_heads=2, out_hidden_size=256)
        cfg = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision)
        return transformers.Qwen2_5_VLForConditionalGeneration(cfg)
    raise ValueError(name)


def main():
    cli, out_path = sys.argv[1], sys.argv[2]
    results = []
    torch.manual_seed(0)
    tokens = torch.randint(3, 512, (24,)).tolist()
    for name in ["llama", "qwen2", "deepseek_v2", "qwen2_5_vl"]:
        row = {"family": name, "transformers": transformers.__version__, "torch": torch.__version__}
        try:
            model = make(name).eval()
            with torch.no_grad():  # larger weights than the default init, so logits are far from uniform
                for pname, p in model.named_parameters():
                    if "norm" in pname:
                        p.copy_(1 + 0.05 * torch.randn_like(p))
                    else:
                        p.normal_(0, 0.05)
            d = tempfile.mkdtemp(prefix=f"peer-{name}-")
            model.save_pretrained(d)
            for dtype_name, dtype, tol in [("float32", torch.float32, 1e-4), ("bfloat16", torch.bfloat16, 5e-2)]:
                m = model.to("cuda", dtype)
                with torch.no_grad():
                    ref = m(input_ids=torch.tensor([tokens], device="cuda")).logits[0].float().cpu()
                p = subprocess.run([cli, "logits", "--model", d, "--tokens", ",".join(map(str, tokens)), "--all-positions",
                                    "--device", "cuda", "--dtype", dtype_name], capture_output=True, text=True)
                if p.returncode != 0:
                    row[dtype_name] = {"error": p.stderr.strip()[-400:]}
                    continue
                got = torch.tensor(json.loads(p.stdout)["logits"])
                err = ((got - ref).norm() / ref.norm()).item()
                row[dtype_name] = {"rel_error": err, "tolerance": tol, "ok": err < tol,
                                   "top1_agree": float((got.argmax(-1) == ref.argmax(-1)).float().mean())}
        except Exception as e:  # one family's failure is reported, the others still run
            row["error"] = f"{type(e).__name__}: {e}"[:400]
        print(json.dumps(row), flush=True)
        results.append(row)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
