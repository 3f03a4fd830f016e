// `orbit info` and `orbit logits`.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "args.h"
#include "commands.h"
#include "device_args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/model.h"
#include "text_input.h"

namespace orbit::cli {

using nlohmann::json;
namespace rt = orbit::runtime;

int run_info(int argc, char** argv, int first) {
  const Args args(
      "info",
      ArgSpec{{"--model", "--device", "--dtype"},
              {"--json"},
              "usage: orbit info --model PATH [--device D] [--dtype T] [--json]\n"
              "  Architecture, sizes, RoPE configuration, parameter count and fingerprint of a model.\n"
              "  --model PATH   a llama2.c .bin file or a Hugging Face directory\n"
              "  --device D     cpu (default), cuda or cuda:N;  --dtype T   float32 (default), bfloat16, float16\n"
              "  --json         print the same as one JSON object\n"},
      argc, argv, first);
  const auto model = rt::load_model(args.required("--model"), compute_target(args));
  const rt::ModelConfig& c = model->config();
  json info = rt::config_summary_json(c);
  info["path"] = model->origin();
  info["format"] = c.source_format;
  info["weight_dtype"] = c.weight_dtype;
  info["compute_dtype"] = rt::dtype_name(model->dtype());
  info["device"] = rt::device_name(model->device());
  info["parameters"] = model->parameter_count();
  info["fingerprint"] = model->fingerprint();
  if (args.flag("--json")) {
    std::cout << info.dump(2) << "\n";
    return 0;
  }
  const rt::RopeConfig& r = c.rope;
  std::printf("model        %s (%s, weights %s)\n", model->origin().c_str(), c.source_format.c_str(),
              c.weight_dtype.c_str());
  std::printf("architecture %s, %lld layers, hidden %lld, intermediate %lld, vocab %lld\n", rt::arch_name(c.arch),
              (long long)c.num_layers, (long long)c.hidden_size, (long long)c.intermediate_size,
              (long long)c.vocab_size);
  std::printf("attention    %lld heads, %lld kv heads (%s), head_dim %lld%s\n", (long long)c.num_heads,
              (long long)c.num_kv_heads, c.num_heads == c.num_kv_heads ? "MHA" : "GQA", (long long)c.head_dim,
              c.attention_bias ? ", q/k/v bias" : "");
  std::printf("embeddings   %s, rms_norm_eps %g, max positions %lld\n", c.tie_word_embeddings ? "tied" : "untied",
              c.rms_norm_eps, (long long)c.max_position_embeddings);
  std::printf("rope         %s, rotary_dim %lld of %lld, theta %g, scaling %s", rt::rope_layout_name(r.layout),
              (long long)r.rotary_dim, (long long)r.head_dim, r.theta, rt::rope_scaling_name(r.scaling));
  if (r.scaling != rt::RopeScaling::kNone) {
    std::printf(" (factor %g, original max positions %lld)", r.factor, (long long)r.original_max_position_embeddings);
  }
  std::printf("\nparameters   %lld (%s on %s)\n", (long long)model->parameter_count(),
              rt::dtype_name(model->dtype()).c_str(), rt::device_name(model->device()).c_str());
  std::printf("fingerprint  %s\n", model->fingerprint().c_str());
  return 0;
}

int run_logits(int argc, char** argv, int first) {
  const Args args(
      "logits",
      ArgSpec{
          {"--model", "--tokens", "--text", "--tokenizer", "--positions", "--device", "--dtype"},
          {"--all-positions", "--no-bos"},
          "usage: orbit logits --model PATH (--tokens 1,5,9 | --text TEXT [--no-bos] [--tokenizer FILE])\n"
          "                    [--positions P,...] [--all-positions] [--device D] [--dtype T]\n"
          "  Prints {\"tokens\": [...], \"logits\": [[...], ...]}: next-token logits after the last token, or\n"
          "  after every token with --all-positions (one forward of the whole sequence, float32).\n"
          "  --tokens IDS       comma-separated token ids\n"
          "  --text TEXT        text instead, encoded by the model's tokenizer (BOS first unless --no-bos)\n"
          "  --tokenizer FILE   a tokenizer (llama2.c .bin or tokenizer.json) instead of the one beside the model\n"
          "  --positions P,...  explicit rotary positions, one per token (default 0, 1, ...)\n"
          "  --all-positions    a row per token instead of the last only\n"
          "  --device D         cpu (default), cuda or cuda:N;  --dtype T   float32 (default), bfloat16, float16\n"},
      argc, argv, first);
  const std::string model_path = args.required("--model");
  ORBIT_CHECK(args.has("--tokens") || args.has("--text"), "logits: missing required argument '--tokens' (or '--text')");
  ORBIT_CHECK(!(args.has("--tokens") && args.has("--text")), "logits: give '--tokens' or '--text', not both");
  ORBIT_CHECK(args.has("--text") || (!args.flag("--no-bos") && !args.has("--tokenizer")),
              "logits: '--no-bos' and '--tokenizer' go with '--text'");
  const auto model = rt::load_model(model_path, compute_target(args));
  const std::vector<int64_t> tokens = args.has("--tokens")
                                          ? parse_int_list(args.required("--tokens"), "--tokens")
                                          : model_tokenizer(args, model_path, model->config().vocab_size)
                                                ->encode(args.required("--text"), !args.flag("--no-bos"));
  ORBIT_CHECK(!tokens.empty(), "--text: the text gives no tokens (an empty text with --no-bos)");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < model->config().vocab_size,
                "--tokens: item " << i << " (" << tokens[i] << ") is outside the vocabulary [0, "
                                  << model->config().vocab_size << ") of " << model_path);
  }
  const rt::ModelConfig& config = model->config();
  ORBIT_CHECK(args.has("--positions") || config.rope.scaling == rt::RopeScaling::kDynamicNtk ||
                  static_cast<int64_t>(tokens.size()) <= config.max_position_embeddings,
              "logits: " << (args.has("--tokens") ? "--tokens gives " : "--text gives ") << tokens.size()
                         << " tokens, more than the model's " << config.max_position_embeddings
                         << " positions (max_position_embeddings)");
  rt::ForwardInput input;
  input.tokens = tokens;
  if (auto positions = args.get("--positions")) {
    const std::vector<int64_t> values = parse_int_list(*positions, "--positions");
    ORBIT_CHECK(values.size() == tokens.size(),
                "--positions: " << values.size() << " positions for " << tokens.size() << " tokens");
    for (const int64_t v : values) ORBIT_CHECK(v >= 0, "--positions: position " << v << " is negative");
    input.positions = at::tensor(at::ArrayRef<int64_t>(values), at::kLong);
  }
  rt::ForwardOptions options;
  options.logits = args.flag("--all-positions") ? rt::LogitsMode::kAll : rt::LogitsMode::kLast;
  options.return_content = false;
  const at::Tensor logits = model->forward(input, nullptr, options).logits.to(at::kCPU).contiguous();

  json rows = json::array();
  const float* data = logits.data_ptr<float>();
  for (int64_t r = 0; r < logits.size(0); ++r) {
    rows.push_back(std::vector<float>(data + r * logits.size(1), data + (r + 1) * logits.size(1)));
  }
  std::cout << json{{"tokens", tokens}, {"logits", rows}}.dump() << "\n";
  return 0;
}

}  // namespace orbit::cli
