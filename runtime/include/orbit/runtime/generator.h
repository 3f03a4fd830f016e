// Random-weight model generator: writes a Hugging Face directory (config.json + safetensors, optionally
// sharded with an index) for any supported architecture and size, for tests and for timing at real
// shapes. Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "orbit/runtime/config.h"

namespace orbit::runtime {

struct GeneratorOptions {
  ModelConfig config;             // architecture and sizes (see generator_preset)
  std::string dtype = "float32";  // "float32", "bfloat16" or "float16" on disk
  uint64_t seed = 0;
  int64_t shard_bytes = 0;  // > 0: split into shards of about this many bytes plus an index
  double init_std = 0.02;   // weights ~ N(0, init_std²); norm gains ~ 1 + N(0, init_std²)
  bool overwrite = false;   // replace a model already in out_dir (else that is an error)
  // Called after each tensor is produced: (tensors done, tensors total). May be empty.
  std::function<void(int64_t, int64_t)> progress;
};

// Named shapes: "tiny-llama", "tiny-qwen2", "tiny-qwen2-vl" (M-RoPE sections 2, 3, 3), "tiny-mla"
// (DeepSeek-V2 MLA with q_lora_rank 24, kv_lora_rank 32, d_nope 16, d_rope 8, d_v 12), "llama-3.2-1b",
// "qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-vl-7b-lm" (the language model of Qwen2.5-VL-7B, M-RoPE
// 16, 24, 24), "deepseek-v2-lite" (DeepSeek-V2-Lite's attention and sizes with a dense MLP in every
// layer: the real checkpoint's MoE layers are not modelled). Throws on an unknown name, listing the
// known ones.
ModelConfig generator_preset(const std::string& name);
std::vector<std::string> generator_preset_names();

// The largest init_std whose normal draws (up to 8 standard deviations) stay within `dtype`'s finite values:
// past it weights are written as inf. `dtype` is float32, bfloat16 or float16 (else throws).
double generator_max_init_std(const std::string& dtype);

// Writes the model into `out_dir` (created if missing). The files are written into a directory inside it,
// `.make-model-<pid>`, and moved into place once all are written, config.json last, so an interrupted run
// never leaves a directory that loads a part of a model, and a model already there (options.overwrite) stays
// whole until then. A directory that already holds a model (config.json or *.safetensors) or an interrupted
// run's `.make-model-*` is an error unless options.overwrite, which replaces those (and nothing else). Every
// check (options, sizes against this machine's memory, the directory's contents, that it can be written)
// comes before a weight is drawn or a file removed, so a refused run changes nothing in the directory. Throws
// orbit::Error on invalid options or I/O failure (the files written so far removed).
void generate_model(const GeneratorOptions& options, const std::string& out_dir);

}  // namespace orbit::runtime
