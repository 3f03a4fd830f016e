// Loading the MLA (DeepSeek-V2) and M-RoPE (Qwen2-VL / Qwen2.5-VL) families: generator round trips,
// the config.json forms real checkpoints ship (flat, nested text_config, newer rope_scaling spellings),
// refusal of what orbit does not run (MoE, unknown RoPE types, inconsistent M-RoPE sections) naming the
// field, presets, `orbit make-model` / `orbit info`, and fingerprints of the older families unchanged.
#include "orbit_catch.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <array>
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
using nlohmann::json;

namespace {

// DeepSeek-V2-Lite's config.json as released (MoE in layers 1..26).
json deepseek_v2_lite_json() {
  return json::parse(R"({
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": false,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
    "pretraining_tp": 1, "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                     "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "tie_word_embeddings": false,
    "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 102400})");
}

// Qwen2.5-VL-7B's language model as newer transformers export it: fields nested under text_config and
// rope_scaling rewritten to rope_type "default" with the sections kept.
json qwen25_vl_nested_json() {
  return json::parse(R"({
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "image_token_id": 151655, "torch_dtype": "bfloat16",
    "text_config": {"model_type": "qwen2_5_vl_text", "hidden_act": "silu", "hidden_size": 3584,
                    "intermediate_size": 18944, "max_position_embeddings": 128000, "num_attention_heads": 28,
                    "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
                    "rope_theta": 1000000.0, "use_sliding_window": false, "vocab_size": 152064,
                    "rope_scaling": {"rope_type": "default", "type": "default", "mrope_section": [16, 24, 24]}},
    "vision_config": {"depth": 32, "hidden_size": 1280, "out_hidden_size": 3584},
    "tie_word_embeddings": false})");
}

// Qwen2-VL-7B's original flat config.json.
json qwen2_vl_flat_json() {
  return json::parse(R"({
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "hidden_act": "silu",
    "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "use_sliding_window": false, "vision_config": {"depth": 32, "embed_dim": 1280},
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 152064})");
}

std::string summary(const ModelConfig& c) { return config_summary_json(c).dump(); }

GeneratorOptions tiny(const ModelConfig& config, uint64_t seed = 7) {
  GeneratorOptions o;
  o.config = config;
  o.seed = seed;
  return o;
}

using orbit::test::cli;
using orbit::test::CliRun;

}  // namespace

TEST_CASE("generator round trip for MLA and M-RoPE models", "[families][loaders][generator][cpu]") {
  ModelConfig no_q_lora = generator_preset("tiny-mla");
  no_q_lora.mla.q_lora_rank = 0;
  for (const ModelConfig& config : {generator_preset("tiny-mla"), no_q_lora, generator_preset("tiny-qwen2-vl")}) {
    INFO(summary(config));
    orbit::test::TempDir dir;
    generate_model(tiny(config), dir / "m");
    const auto m = load_model(dir / "m");
    CHECK(summary(m->config()) == summary(config));
    CHECK(m->config().mla.q_lora_rank == config.mla.q_lora_rank);
    // Every tensor of the weight table is on disk under its HF name with the implied shape.
    SafetensorsFile file(dir / "m/model.safetensors");
    for (const WeightSpec& spec : weight_specs(config)) {
      const StTensorInfo* info = file.find(spec.name);
      REQUIRE(info != nullptr);
      CHECK(info->shape == spec.shape);
      CHECK(at::equal(file.load(spec.name, at::kFloat), weight_slot(m->weights(), m->config(), spec.name)));
    }
    CHECK(static_cast<int64_t>(file.header().tensors.size()) == static_cast<int64_t>(weight_specs(config).size()));
    // config.json reads back equal, and the fingerprint depends on the weights.
    CHECK(summary(parse_hf_config(hf_config_json(config), "round trip")) == summary(config));
    generate_model(tiny(config, 8), dir / "other");
    CHECK(load_model(dir / "other")->fingerprint() != m->fingerprint());
    generate_model(tiny(config), dir / "same");
    CHECK(load_model(dir / "same")->fingerprint() == m->fingerprint());
  }
  // Real-size presets (YaRN with DeepSeek's mscales; Qwen2.5-VL's sections) survive config.json too.
  for (const std::string name : {"deepseek-v2-lite", "qwen2.5-vl-7b-lm"}) {
    const ModelConfig preset = generator_preset(name);
    CHECK(summary(parse_hf_config(hf_config_json(preset), name)) == summary(preset));
  }
  // The MLA table names what DeepSeek-V2 checkpoints hold.
  const std::vector<WeightSpec> specs = weight_specs(generator_preset("tiny-mla"));
  auto has = [&](const std::string& name) {
    for (const WeightSpec& s : specs) {
      if (s.name == name) return true;
    }
    return false;
  };
  CHECK(has("model.layers.1.self_attn.kv_a_proj_with_mqa.weight"));
  CHECK(has("model.layers.1.self_attn.q_a_layernorm.weight"));
  CHECK(!has("model.layers.1.self_attn.q_proj.weight"));
  CHECK(!has("model.layers.1.self_attn.k_proj.weight"));
  CHECK(weight_specs(no_q_lora)[2].name == "model.layers.0.self_attn.q_proj.weight");
}

TEST_CASE("a Qwen2-VL checkpoint's vision tensors are ignored", "[families][loaders][cpu]") {
  orbit::test::TempDir dir;
  generate_model(tiny(generator_preset("tiny-qwen2-vl")), dir / "m");
  const auto reference = load_model(dir / "m");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  {
    SafetensorsFile file(dir / "m/model.safetensors");
    for (const StTensorInfo& info : file.header().tensors)
      tensors.emplace_back(info.name, file.load(info.name, at::kFloat));
  }
  tensors.emplace_back("visual.patch_embed.proj.weight", at::ones({8, 3, 2, 2}));
  tensors.emplace_back("visual.merger.mlp.0.weight", at::ones({4, 4}));
  write_safetensors(dir / "m/model.safetensors", tensors, StWriteOptions{});
  const auto m = load_model(dir / "m");
  CHECK(m->fingerprint() == reference->fingerprint());
}

TEST_CASE("released config.json forms parse to the presets", "[families][loaders][cpu]") {
  // DeepSeek-V2-Lite: refused as released (MoE), accepted as the dense variant, equal to the preset.
  CHECK_THROWS_WITH(parse_hf_config(deepseek_v2_lite_json(), "config.json"),
                    Contains("config.json") && Contains("n_routed_experts") && Contains("first_k_dense_replace = 1") &&
                        Contains("unsupported"));
  json dense = deepseek_v2_lite_json();
  dense["n_routed_experts"] = nullptr;
  ModelConfig lite = parse_hf_config(dense, "config.json");
  CHECK(lite.arch == Arch::kDeepseekV2);
  CHECK(lite.head_dim == 192);
  CHECK(lite.num_kv_heads == 16);
  CHECK(lite.rope.layout == RopeLayout::kInterleaved);
  CHECK(lite.rope.rotary_dim == 64);
  CHECK(lite.rope.scaling == RopeScaling::kYarn);
  CHECK(lite.content_widths() == std::vector<int64_t>{64, 512});
  CHECK(lite.v_head_dim() == 128);
  CHECK(summary(lite) == summary(generator_preset("deepseek-v2-lite")));
  // Every layer dense (first_k_dense_replace >= layers) is the other way to say it.
  json all_dense = deepseek_v2_lite_json();
  all_dense["first_k_dense_replace"] = 27;
  CHECK(summary(parse_hf_config(all_dense, "config.json")) == summary(lite));

  // Qwen2.5-VL, nested text_config with rope_type "default" + mrope_section.
  const ModelConfig vl = parse_hf_config(qwen25_vl_nested_json(), "config.json");
  CHECK(vl.arch == Arch::kQwen25VL);
  CHECK(vl.attention_bias);
  CHECK(vl.rope.mrope_section == std::vector<int64_t>{16, 24, 24});
  CHECK(vl.position_rows() == 3);
  CHECK(summary(vl) == summary(generator_preset("qwen2.5-vl-7b-lm")));
  // Qwen2-VL, flat with {"type": "mrope"}.
  const ModelConfig flat = parse_hf_config(qwen2_vl_flat_json(), "config.json");
  CHECK(flat.arch == Arch::kQwen2VL);
  CHECK(flat.rope.scaling == RopeScaling::kNone);
  CHECK(flat.rope.mrope_section == std::vector<int64_t>{16, 24, 24});
  CHECK(flat.hidden_size == 3584);
  CHECK(config_summary_json(flat)["rope"]["mrope_section"] == json({16, 24, 24}));
}

TEST_CASE("broken MLA and M-RoPE configs are refused naming the field", "[families][loaders][errors][cpu]") {
  auto refuse = [](json j, const std::string& field) {
    INFO(j.dump());
    CHECK_THROWS_WITH(parse_hf_config(j, "config.json"), Contains("config.json") && Contains(field));
  };
  json dense = deepseek_v2_lite_json();
  dense["n_routed_experts"] = nullptr;
  json j = dense;
  j["first_k_dense_replace"] = 0;
  j["n_routed_experts"] = 8;
  refuse(j, "n_routed_experts");
  j = dense;
  j.erase("kv_lora_rank");
  refuse(j, "kv_lora_rank");
  j = dense;
  j["qk_rope_head_dim"] = 63;
  refuse(j, "qk_rope_head_dim");
  j = dense;
  j["num_key_value_heads"] = 1;
  refuse(j, "num_key_value_heads");
  j = dense;
  j["attention_bias"] = true;
  refuse(j, "attention_bias");
  j = dense;
  j["rope_scaling"]["type"] = "longrope";
  refuse(j, "rope_scaling.rope_type = 'longrope'");

  json vl = qwen2_vl_flat_json();
  j = vl;
  j["rope_scaling"]["mrope_section"] = {16, 24, 23};
  refuse(j, "mrope_section");
  j = vl;
  j["rope_scaling"] = {{"type", "mrope"}};
  refuse(j, "mrope_section");
  j = vl;
  j["rope_scaling"]["mrope_section"] = {32, 32};
  refuse(j, "mrope_section");
  j = vl;
  j["rope_scaling"]["mrope_interleaved"] = true;
  refuse(j, "mrope_interleaved");
  j = vl;
  j["rope_scaling"] = nullptr;
  refuse(j, "mrope_section");  // Qwen2-VL without its sections is not Qwen2-VL
  j = vl;
  j["use_sliding_window"] = true;
  refuse(j, "use_sliding_window");
  json nested = qwen25_vl_nested_json();
  nested["text_config"] = "oops";
  refuse(nested, "text_config");
  // Sections on a family without M-RoPE.
  json llama = {{"model_type", "llama"},
                {"vocab_size", 32},
                {"hidden_size", 16},
                {"intermediate_size", 32},
                {"num_hidden_layers", 1},
                {"num_attention_heads", 2},
                {"max_position_embeddings", 64},
                {"rope_scaling", {{"type", "mrope"}, {"mrope_section", {1, 1, 2}}}}};
  refuse(llama, "mrope_section");
  // MLA fields on a GQA config cannot sneak in through the struct either.
  ModelConfig qwen = generator_preset("tiny-qwen2");
  qwen.mla.kv_lora_rank = 4;
  CHECK_THROWS_WITH(qwen.validate("cfg"), Contains("kv_lora_rank"));
}

TEST_CASE("presets and fingerprints: new families add keys, older ones are unchanged", "[families][generator][cpu]") {
  const ModelConfig vl7 = generator_preset("qwen2.5-vl-7b-lm");
  CHECK(vl7.arch == Arch::kQwen25VL);
  CHECK(vl7.rope.mrope_section == std::vector<int64_t>{16, 24, 24});
  const ModelConfig lite = generator_preset("deepseek-v2-lite");
  CHECK(lite.hidden_size == 2048);
  CHECK(lite.num_layers == 27);
  CHECK(lite.intermediate_size == 10944);
  CHECK(lite.mla.q_lora_rank == 0);
  CHECK(lite.mla.kv_lora_rank == 512);
  CHECK(lite.vocab_size == 102400);
  for (const std::string name : {"tiny-llama", "tiny-qwen2", "qwen2.5-7b", "llama-3.2-1b"}) {
    const json s = config_summary_json(generator_preset(name));
    CHECK(s.find("mla") == s.end());
    CHECK(s["rope"].find("mrope_section") == s["rope"].end());
  }
  CHECK(config_summary_json(generator_preset("tiny-mla")).contains("mla"));
  // The bundled llama2.c model keeps the fingerprint it had before these families existed. The value is
  // not read back from the runtime: a separate Python hash of the same fields (config summary, then each
  // weight's name, shape and float32 bytes, read from the .bin by its own parser) gives it, and gives
  // d2b238cd... for the noise-weight file that was bundled before the trained checkpoint.
  CHECK(load_model(orbit::test::stories_path())->fingerprint() ==
        "0863162525dd7ec7ae502a10df637dfe7be081fac452bd5b761e0b36093c4512");
}

TEST_CASE("orbit make-model builds both families and info shows their fields", "[families][cli][cpu]") {
  orbit::test::TempDir dir;
  CliRun r =
      cli("make-model --arch deepseek_v2 --q-lora-rank 0 --kv-lora-rank 20 --qk-nope-dim 6 --qk-rope-dim 4 "
          "--v-head-dim 10 --heads 2 --out " +
          (dir / "mla"));
  REQUIRE(r.status == 0);
  r = cli("info --json --model " + (dir / "mla"));
  REQUIRE(r.status == 0);
  json info = json::parse(r.out);
  CHECK(info["arch"] == "deepseek_v2");
  CHECK(info["mla"] == json({{"q_lora_rank", 0},
                             {"kv_lora_rank", 20},
                             {"qk_nope_head_dim", 6},
                             {"qk_rope_head_dim", 4},
                             {"v_head_dim", 10}}));
  CHECK(info["head_dim"] == 10);
  CHECK(info["rope"]["layout"] == "interleaved");

  r = cli("make-model --arch qwen2_vl --mrope-section 4,2,2 --out " + (dir / "vl"));
  REQUIRE(r.status == 0);
  info = json::parse(cli("info --json --model " + (dir / "vl")).out);
  CHECK(info["arch"] == "qwen2_vl");
  CHECK(info["rope"]["mrope_section"] == json({4, 2, 2}));

  // Switching a GQA preset to MLA takes tiny-mla's latent sizes.
  r = cli("make-model --preset tiny-llama --arch deepseek_v2 --out " + (dir / "switched"));
  REQUIRE(r.status == 0);
  CHECK(load_model(dir / "switched")->config().mla.kv_lora_rank == generator_preset("tiny-mla").mla.kv_lora_rank);

  r = cli("make-model --arch qwen2_vl --mrope-section 4,4,4 --out " + (dir / "bad"));
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Contains("--mrope-section") && Contains("rotary_dim/2 = 8"));
  r = cli("make-model --arch llama --kv-lora-rank 8 --out " + (dir / "bad"));
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Contains("--kv-lora-rank"));
  r = cli("make-model --arch deepseek_v3 --out " + (dir / "bad"));
  CHECK(r.status != 0);
  CHECK_THAT(r.out, Contains("--arch") && Contains("deepseek_v2"));
}

}  // namespace ORBIT_TEST_FILE
