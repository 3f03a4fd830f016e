#!/usr/bin/env python3
"""The prefix-cache arm of bench_gpu's TTFT section, done with Hugging Face transformers' own KV cache (run on a GPU
machine with transformers and torch).

    python3 bench/gpu/peer_prefix_cache.py OUT.json [--windows 8192,32768] [--chunks 512,2048,8192] [--query 16]
                                                    [--reps 3] [--layers N]

A transformers Qwen2ForCausalLM of Qwen2.5-7B's shape (SDPA attention) with random bfloat16 weights made directly on
the GPU, and the same token layout as bench_gpu's "ttft" section: a W-token window whose B-token chunk sits in the
middle (offset (W - B) // 2), then a query. Per (W, B), in torch.inference_mode():

  hf_reprefill_s   forward of window + query with a fresh cache, logits of the last position only;
  hf_prefix_s      the way a user reuses a prefix today: the KV of the tokens before the chunk is computed once into
                   a DynamicCache (`past_key_values`), each timed run forwards chunk + suffix + query over it, and the
                   cache is cropped back to the prefix afterwards (outside the timed region);
  hf_query_only_s  the query alone with no past: the floor every reuse arm pays.

Median of --reps timed runs after one warm-up, torch.cuda.synchronize() around each run. The results sit beside
orbit's in bench/REPORT-gpu.md (make_report.py reads peer_prefix.json next to gpu.json).
"""
import argparse
import inspect
import json
import statistics
import time

import torch
import transformers


def tokens(n, vocab):
    # The same deterministic ids as bench_gpu (all >= 3, spread over the vocabulary).
    return [3 + (i * 7919) % (vocab - 3) for i in range(n)]


def make_model(layers, max_positions):
    cfg = transformers.Qwen2Config(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=layers,
        num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=max_positions, rope_theta=1e6,
        rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False, attn_implementation="sdpa")
    # transformers 5 keeps the RoPE base in rope_parameters; older versions read cfg.rope_theta.
    if isinstance(getattr(cfg, "rope_parameters", None), dict):
        cfg.rope_parameters["rope_theta"] = 1e6
    # Weights are made on the GPU in bfloat16 directly (no float32 copy on the host); their values do not
    # matter for timing.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = transformers.Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def last_logits_kwargs(model):
    # Ask for the last position's logits only (transformers >= 4.50: logits_to_keep; earlier: num_logits_to_keep).
    params = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


def timed(reps, fn, after=None):
    # Median seconds of `reps` runs after one warm-up; `after` runs outside the timed region after each run.
    times = []
    for i in range(reps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if i > 0:
            times.append(time.perf_counter() - t0)
        if after is not None:
            after()
    return statistics.median(times)


def fmt_ms(s):
    return "   failed" if s is None else f"{s * 1e3:9.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--windows", default="8192,32768")
    ap.add_argument("--chunks", default="512,2048,8192")
    ap.add_argument("--query", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=28)
    args = ap.parse_args()
    windows = [int(x) for x in args.windows.split(",") if x]
    chunks = [int(x) for x in args.chunks.split(",") if x]
    q, reps = args.query, args.reps

    t0 = time.perf_counter()
    model = make_model(args.layers, max(max(windows) + 64, 32768))
    torch.cuda.synchronize()
    made_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    attn = getattr(model.config, "_attn_implementation", None)
    print(f"model qwen2.5-7b ({args.layers} layers) bfloat16 on {torch.cuda.get_device_name(0)}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, attention {attn}, made in {made_s:.1f} s",
          flush=True)

    kw = last_logits_kwargs(model)

    def forward(ids, **extra):
        # Falls back to no logits kwarg if this version refuses it (only the last position is used either way).
        nonlocal kw
        try:
            return model(input_ids=ids, use_cache=True, **kw, **extra)
        except TypeError:
            if not kw:
                raise
            kw = {}
            return model(input_ids=ids, use_cache=True, **extra)

    query = tokens(q, vocab)
    rows = []
    with torch.inference_mode():
        for W in windows:
            all_ids = torch.tensor([tokens(W, vocab) + query], device="cuda")
            query_ids = torch.tensor([query], device="cuda")
            # Per window, as in bench_gpu: re-prefill of window + query, and the query alone with no past.
            window_errors = []
            reprefill = query_only = None
            try:
                reprefill = timed(reps, lambda: forward(all_ids))
            except Exception as e:  # recorded in this window's rows; the other arms still run
                window_errors.append(f"reprefill: {type(e).__name__}: {e}"[:400])
            torch.cuda.empty_cache()
            try:
                query_only = timed(reps, lambda: forward(query_ids))
            except Exception as e:
                window_errors.append(f"query_only: {type(e).__name__}: {e}"[:400])
            for B in chunks:
                if B >= W:
                    continue
                offset = (W - B) // 2  # the chunk sits in the middle of the window
                row = {"window_tokens": W, "chunk_tokens": B, "chunk_offset": offset, "hf_reprefill_s": reprefill,
                       "hf_prefix_s": None, "hf_query_only_s": query_only}
                errors = list(window_errors)
                cache = None
                try:
                    # The prefix's KV, computed once (not timed): a DynamicCache holding `offset` tokens.
                    cache = forward(all_ids[:, :offset]).past_key_values
                    if cache.get_seq_length() != offset:
                        raise RuntimeError(f"prefix cache holds {cache.get_seq_length()} tokens, expected {offset}")
                    rest = all_ids[:, offset:]  # chunk + suffix + query, recomputed over the cached prefix
                    crops = []

                    def crop():
                        # Each forward appends rest's KV to the cache: back to the prefix alone for the next run,
                        # checked once.
                        # A negative crop removes that many tokens (a positive one is deprecated in
                        # transformers 5.17).
                        cache.crop(offset - cache.get_seq_length())
                        if not crops and cache.get_seq_length() != offset:
                            raise RuntimeError(f"cache holds {cache.get_seq_length()} tokens after crop, "
                                               f"expected {offset}")
                        crops.append(offset)

                    row["hf_prefix_s"] = timed(reps, lambda: forward(rest, past_key_values=cache), after=crop)
                except Exception as e:  # one row's failure is reported, the others still run
                    errors.append(f"prefix: {type(e).__name__}: {e}"[:400])
                if errors:
                    row["error"] = "; ".join(errors)
                cache = None  # the prefix's KV freed before the next row (the crop closure reads the name)
                torch.cuda.empty_cache()
                print(f"peer_prefix W={W:6d} B={B:5d}  hf re-prefill {fmt_ms(reprefill)} ms  "
                      f"hf prefix {fmt_ms(row['hf_prefix_s'])} ms  hf query alone {fmt_ms(query_only)} ms"
                      + (f"  error: {row['error']}" if errors else ""), flush=True)
                rows.append(row)
            all_ids = query_ids = None  # freed before the next window (closures above read the names)
            torch.cuda.empty_cache()

    report = {"benchmark": "peer_prefix_cache", "transformers": transformers.__version__, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0), "dtype": "bfloat16", "model": "qwen2.5-7b",
              "layers": args.layers, "query_tokens": q, "reps": reps, "made_s": made_s, "attn_implementation": attn,
              "logits_kwarg": next(iter(kw), None), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
