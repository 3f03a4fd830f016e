// Model loaders: llama2.c `.bin` (version-0 layout) and Hugging Face directories
// (`config.json` + `model.safetensors` or sharded `model.safetensors.index.json`, bf16/f16/f32).
// Weights load tensor by tensor straight into the target's dtype on its device (float32 on CPU by
// default): a bf16 checkpoint loaded as bf16 never passes through a float32 copy, and at most one tensor
// is staged in host memory at a time. Every failure throws orbit::Error naming the file and field.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "orbit/runtime/config.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/model.h"

namespace orbit::runtime {

// Loads `path`: a `.bin` file (llama2.c), a directory holding config.json (Hugging Face), or that config.json.
// Another file of such a directory (`.safetensors` weights, their index, a tokenizer's `.json`) is refused,
// naming the directory to give instead.
std::unique_ptr<Model> load_model(const std::string& path, const ComputeTarget& target = {});

std::unique_ptr<Model> load_llama2c(const std::string& path, const ComputeTarget& target = {});
// The vocabulary size of the llama2.c checkpoint at `path`, its header and file size checked as load_llama2c
// checks them (the same errors), without reading the weights: for finding its tokenizer (tok<N>.bin) first.
int64_t llama2c_vocab_size(const std::string& path);
std::unique_ptr<Model> load_hf(const std::string& dir, const ComputeTarget& target = {});

// The error for `dir`, a directory given as a model that has no config.json: it says so and, where the
// directory holds llama2.c model files (`.bin` other than the tokenizers tok<N>.bin and tokenizer.bin),
// names them as the path that was probably meant. Used by every loader and CLI check of a model directory.
std::string no_hf_config_message(const std::string& dir);

// Parses a Hugging Face config.json object (architectures / model_type, sizes, rope_theta,
// rope_scaling, partial_rotary_factor, tie_word_embeddings, attention_bias ...). `origin` names the
// file in errors. Unsupported architectures or RoPE types are errors, never silently approximated.
ModelConfig parse_hf_config(const nlohmann::json& json, const std::string& origin);

// The inverse, as written by the generator: a config.json that parse_hf_config reads back equal.
nlohmann::json hf_config_json(const ModelConfig& config);

// Canonical description used by `orbit info` and the fingerprint (stable key order, no paths).
nlohmann::json config_summary_json(const ModelConfig& config);

}  // namespace orbit::runtime
