// Loaders and the generator: HF round trips (single file, sharded, bf16/f16), llama2.c variants, the
// interleaved and half-split layouts agreeing on a real model, and clear errors for broken inputs.
#include "orbit_catch.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/safetensors.h"
#include "orbit/runtime/weights.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::TempDir;

namespace {

GeneratorOptions tiny(const std::string& preset, uint64_t seed = 7) {
  GeneratorOptions o;
  o.config = generator_preset(preset);
  o.seed = seed;
  o.init_std = 0.2;  // large enough that attention and logits are far from uniform
  return o;
}

at::Tensor logits_of(const Model& m, std::vector<int64_t> tokens) {
  ForwardInput in;
  in.tokens = std::move(tokens);
  ForwardOptions o;
  o.logits = LogitsMode::kAll;
  return m.forward(in, nullptr, o).logits;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_json(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

const std::vector<int64_t> kTokens{1, 300, 22, 7, 511, 64, 128, 3, 99, 250};

}  // namespace

TEST_CASE("generator round trip: the loader reads back exactly what was generated", "[loaders][generator][cpu]") {
  for (const std::string preset : {"tiny-llama", "tiny-qwen2"}) {
    TempDir dir;
    GeneratorOptions options = tiny(preset);
    generate_model(options, dir / "m");
    auto model = load_model(dir / "m");
    const ModelConfig& c = model->config();
    CHECK(c.arch == options.config.arch);
    CHECK(c.num_layers == options.config.num_layers);
    CHECK(c.num_kv_heads == options.config.num_kv_heads);
    CHECK(c.tie_word_embeddings == options.config.tie_word_embeddings);
    CHECK(c.attention_bias == (c.arch == Arch::kQwen2));
    CHECK(c.rope.layout == RopeLayout::kHalfSplit);
    CHECK(c.rope.theta == options.config.rope.theta);

    // Same seed, other directory: same fingerprint. Other seed: different.
    TempDir again;
    generate_model(options, again / "m");
    CHECK(load_model(again / "m")->fingerprint() == model->fingerprint());
    generate_model(tiny(preset, 8), again / "other");
    CHECK(load_model(again / "other")->fingerprint() != model->fingerprint());

    // The file holds every tensor of the weight table, and the loader's tensors equal the file's.
    SafetensorsFile file(dir / "m/model.safetensors");
    for (const WeightSpec& spec : weight_specs(c)) {
      INFO(spec.name);
      REQUIRE(file.find(spec.name) != nullptr);
      CHECK(at::equal(file.load(spec.name, at::kFloat), weight_slot(model->weights(), c, spec.name)));
    }
  }
}

TEST_CASE("sharded and bf16 models load, sharded equal to single-file", "[loaders][generator][cpu]") {
  TempDir dir;
  GeneratorOptions options = tiny("tiny-qwen2");
  generate_model(options, dir / "single");
  options.shard_bytes = 100 * 1024;
  generate_model(options, dir / "sharded");
  auto index = read_json(dir / "sharded/model.safetensors.index.json");
  std::set<std::string> shards;
  for (auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  CHECK(shards.size() > 1);
  auto single = load_model(dir / "single");
  auto sharded = load_model(dir / "sharded");
  CHECK(single->fingerprint() == sharded->fingerprint());
  CHECK(at::equal(logits_of(*single, kTokens), logits_of(*sharded, kTokens)));

  for (const std::string dtype : {"bfloat16", "float16"}) {
    options.shard_bytes = 0;
    options.dtype = dtype;
    generate_model(options, dir / dtype);
    auto reduced = load_model(dir / dtype);
    CHECK(reduced->config().weight_dtype == dtype);
    const at::ScalarType st = dtype == "bfloat16" ? at::kBFloat16 : at::kHalf;
    const at::Tensor expected = single->weights().layers[1].wq.to(st).to(at::kFloat);
    CHECK(at::equal(reduced->weights().layers[1].wq, expected));
    CHECK(orbit::test::max_abs_diff(logits_of(*reduced, kTokens), logits_of(*single, kTokens)) < 0.2);
  }
}

TEST_CASE("stories260K as a Hugging Face directory (half-split RoPE) gives the llama2.c logits",
          "[loaders][model][cpu]") {
  auto bin = load_model(orbit::test::stories_path());
  const ModelConfig& c = bin->config();
  // HF checkpoints permute each q/k head from interleaved pairs (2i, 2i+1) to halves (i, i + d/2);
  // with rotate_half the attention scores are then identical.
  auto permute = [&](const at::Tensor& w, int64_t heads) {
    return w.view({heads, c.head_dim / 2, 2, c.hidden_size})
        .transpose(1, 2)
        .reshape({heads * c.head_dim, c.hidden_size});
  };
  ModelConfig hf = c;
  hf.rope.layout = RopeLayout::kHalfSplit;
  hf.weight_dtype = "float32";
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const WeightSpec& spec : weight_specs(hf)) {
    at::Tensor t = weight_slot(bin->weights(), c, spec.name);
    if (spec.name.find("q_proj") != std::string::npos) t = permute(t, c.num_heads);
    if (spec.name.find("k_proj") != std::string::npos) t = permute(t, c.num_kv_heads);
    tensors.emplace_back(spec.name, t);
  }
  TempDir dir;
  write_safetensors(dir / "model.safetensors", tensors);
  write_json(dir / "config.json", hf_config_json(hf));
  auto converted = load_model(dir.path().string());
  CHECK(converted->config().rope.layout == RopeLayout::kHalfSplit);
  const std::vector<int64_t> tokens{1, 403, 407, 261, 378, 410, 268, 261, 285, 305, 415, 271, 1, 9, 44};
  // The same weights in another layout (permuted rows, half-split rotation): float32 rounding only, worst
  // 1.9e-5 over the CPU kernels, BLAS cores and thread counts tried; the wrong layout below is off by 13.
  const double diff = orbit::test::max_abs_diff(logits_of(*converted, tokens), logits_of(*bin, tokens));
  CHECK(diff < 2e-4);
  // Without the permutation the layouts disagree: the test can tell them apart.
  ModelConfig wrong = c;
  wrong.rope.layout = RopeLayout::kHalfSplit;
  ModelWeights same = bin->weights();
  Model mislabelled(wrong, same, "mislabelled");
  CHECK(orbit::test::max_abs_diff(logits_of(mislabelled, tokens), logits_of(*bin, tokens)) > 1e-2);
}

TEST_CASE("llama2.c: an unshared classifier is read from the end of the file", "[loaders][model][cpu]") {
  auto shared = load_model(orbit::test::stories_path());
  std::vector<char> bytes = read_bytes(orbit::test::stories_path());
  int32_t vocab = 0;
  std::memcpy(&vocab, bytes.data() + 5 * 4, 4);
  REQUIRE(vocab == 512);
  const int32_t negative = -vocab;
  std::memcpy(bytes.data() + 5 * 4, &negative, 4);
  // wcls = 2 × embedding: logits double exactly.
  const at::Tensor wcls = shared->weights().embed.mul(2.0).contiguous();
  const char* raw = static_cast<const char*>(wcls.data_ptr());
  bytes.insert(bytes.end(), raw, raw + wcls.numel() * 4);
  TempDir dir;
  write_bytes(dir / "unshared.bin", bytes);
  auto unshared = load_model(dir / "unshared.bin");
  CHECK_FALSE(unshared->config().tie_word_embeddings);
  CHECK(unshared->fingerprint() != shared->fingerprint());
  CHECK(orbit::test::max_abs_diff(logits_of(*unshared, kTokens), logits_of(*shared, kTokens).mul(2.0)) < 1e-4);
}

TEST_CASE("llama2.c: truncated, padded and corrupt headers fail naming the file and field", "[loaders][errors][cpu]") {
  const std::vector<char> good = read_bytes(orbit::test::stories_path());
  TempDir dir;
  const std::string path = dir / "broken.bin";
  auto expect_error = [&](const std::vector<char>& bytes, const std::string& words) {
    write_bytes(path, bytes);
    CHECK_THROWS_WITH(load_model(path), Contains(path) && Contains(words));
  };
  for (std::size_t cut : {std::size_t(0), std::size_t(10), std::size_t(27), std::size_t(28), std::size_t(4096),
                          good.size() / 2, good.size() - 1}) {
    INFO("cut at " << cut);
    expect_error(std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)),
                 cut < 28 ? "truncated" : "implies");
  }
  std::vector<char> padded = good;
  padded.push_back(0);
  expect_error(padded, "trailing bytes");
  auto with_field = [&](int index, int32_t value) {
    std::vector<char> bytes = good;
    std::memcpy(bytes.data() + 4 * index, &value, 4);
    return bytes;
  };
  expect_error(with_field(0, 0), "'dim'");
  expect_error(with_field(3, -8), "'n_heads'");
  expect_error(with_field(4, 3), "'n_kv_heads'");
  expect_error(with_field(0, 63), "'dim'");
  expect_error(with_field(2, 1 << 30), "implies");  // absurd layer count: no overflow, no allocation
  expect_error(with_field(5, 0), "'vocab_size'");
  CHECK_THROWS_WITH(load_model(dir / "missing.bin"), Contains("missing.bin") && Contains("no such file"));
}

TEST_CASE("Hugging Face directories: broken configs and weights fail naming the file and field",
          "[loaders][errors][cpu]") {
  TempDir dir;
  const std::string m = dir / "m";
  generate_model(tiny("tiny-llama"), m);
  const nlohmann::json config = read_json(m + "/config.json");
  auto with_config = [&](const nlohmann::json& j, const std::string& words) {
    write_json(m + "/config.json", j);
    CHECK_THROWS_WITH(load_model(m), Contains("config.json") && Contains(words));
  };
  nlohmann::json j = config;
  j["model_type"] = "gpt2";
  j["architectures"] = {"GPT2LMHeadModel"};
  with_config(j, "unsupported architecture");
  j["architectures"] = {"LlamaForCausalLM"};  // another model's type beside a class orbit loads: not read as llama
  with_config(j, "name different models");
  j["model_type"] = "qwen2";
  with_config(j, "name different models");
  j = config;
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  with_config(j, "rope_type");
  j = config;
  j.erase("hidden_size");
  with_config(j, "'hidden_size'");
  j = config;
  j["num_key_value_heads"] = 3;
  with_config(j, "num_key_value_heads");
  j = config;
  j["hidden_act"] = "gelu";
  with_config(j, "hidden_act");
  j = config;
  j["hidden_size"] = "sixty-four";
  with_config(j, "'hidden_size'");
  j = config;
  j["partial_rotary_factor"] = 0.1;  // 8 × 0.1 -> 0 rotary dims
  with_config(j, "rotary");
  // A head_dim whose products with the head counts wrap int64 to the stored shapes (2^62 + 16: 8 x it is 128):
  // refused at load, where it passed every shape check and the first forward died of SIGFPE.
  j = config;
  j["head_dim"] = (int64_t{1} << 62) + 16;
  with_config(j, "field 'head_dim' = 4611686018427387920 is past the limit");
  // rope_scaling fields out of range: refused at load naming config.json, not at the first forward.
  j = config;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 1.0},
                       {"original_max_position_embeddings", 64}};
  with_config(j, "'high_freq_factor' (1) must exceed 'low_freq_factor' (1)");
  j["rope_scaling"]["high_freq_factor"] = 4.0;
  j["rope_scaling"]["original_max_position_embeddings"] = -5;
  with_config(j, "'original_max_position_embeddings' (-5) must be >= 0");

  // A shape that disagrees with the config: the file and the tensor are named.
  j = config;
  j["intermediate_size"] = 100;
  write_json(m + "/config.json", j);
  CHECK_THROWS_WITH(load_model(m), Contains("model.safetensors") && Contains("mlp.gate_proj.weight") &&
                                       Contains("[172, 64]") && Contains("[100, 64]"));
  // A missing tensor: the untied head is required.
  j = config;
  j["tie_word_embeddings"] = false;
  j["num_hidden_layers"] = 3;
  write_json(m + "/config.json", j);
  CHECK_THROWS_WITH(load_model(m), Contains("missing tensor 'model.layers.2.input_layernorm.weight'"));
  write_json(m + "/config.json", config);
  CHECK_NOTHROW(load_model(m));

  std::remove((m + "/config.json").c_str());
  CHECK_THROWS_WITH(load_model(m), Contains("no config.json"));
}

TEST_CASE("sharded index: missing shard and misplaced tensor are reported", "[loaders][errors][cpu]") {
  TempDir dir;
  const std::string m = dir / "m";
  GeneratorOptions options = tiny("tiny-qwen2");
  options.shard_bytes = 100 * 1024;
  generate_model(options, m);
  const std::string index_path = m + "/model.safetensors.index.json";
  const nlohmann::json index = read_json(index_path);
  nlohmann::json broken = index;
  broken["weight_map"]["model.norm.weight"] = "model-99999-of-99999.safetensors";
  write_json(index_path, broken);
  CHECK_THROWS_WITH(load_model(m), Contains("index.json") && Contains("missing shard"));
  broken = index;
  const std::string first = index["weight_map"]["model.embed_tokens.weight"];
  broken["weight_map"]["model.norm.weight"] = first;
  write_json(index_path, broken);
  CHECK_THROWS_WITH(load_model(m), Contains("model.norm.weight") && Contains("does not contain it"));
  broken = index;
  broken["weight_map"]["model.norm.weight"] = "../escape.safetensors";
  write_json(index_path, broken);
  CHECK_THROWS_WITH(load_model(m), Contains("not a file in this directory"));
}

TEST_CASE("generator refuses to overwrite a model unless asked", "[loaders][generator][cpu]") {
  TempDir dir;
  GeneratorOptions options = tiny("tiny-llama");
  generate_model(options, dir / "m");
  CHECK_THROWS_WITH(generate_model(options, dir / "m"), Contains("already holds a model"));
  options.overwrite = true;
  options.seed = 99;
  generate_model(options, dir / "m");
  CHECK(load_model(dir / "m")->fingerprint() != "");
  CHECK_THROWS_WITH(generator_preset("gpt-5"), Contains("unknown model preset 'gpt-5'") && Contains("qwen2.5-0.5b"));
}

}  // namespace ORBIT_TEST_FILE
