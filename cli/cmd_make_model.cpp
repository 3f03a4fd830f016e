// `orbit make-model`: random-weight Hugging Face model directories of any supported shape.
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "orbit/common/error.h"
#include "orbit/runtime/config.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"

namespace orbit::cli {

namespace rt = orbit::runtime;

namespace {

// The usage text; %s is where the preset names go (usage_text()).
const char* kUsage =
    "usage: orbit make-model --out DIR [options]\n"
    "  Writes a random-weight Hugging Face model directory (config.json and safetensors, sharded with an index\n"
    "  if asked) of any supported architecture and size, for tests and for timing at real shapes;\n"
    "  deterministic for a given --seed. Prints the directory, architecture, layers, hidden size and dtype.\n"
    "  --out DIR            the directory to write (created if missing; one holding a model needs --force)\n"
    "  --preset NAME        start from a named shape (default: the tiny preset of --arch); one of:\n"
    "                       %s\n"
    "  --arch llama|qwen2|deepseek_v2|qwen2_vl|qwen2_5_vl\n"
    "                       architecture (default: the preset's, or llama); deepseek_v2 is MLA with a dense\n"
    "                       MLP, qwen2_vl/qwen2_5_vl are the language models with M-RoPE\n"
    "  --vocab N --hidden N --intermediate N --layers N --heads N --kv-heads N --head-dim N\n"
    "  --max-pos N --theta F --eps F --partial-rotary F (fraction of head_dim that rotates)\n"
    "  --tie | --untie      share the embedding with the output head, or not\n"
    "  --rope-scaling linear|dynamic|llama3|yarn  --rope-factor F  --rope-original-max N (not with linear)\n"
    "  MLA (deepseek_v2; defaults from the preset, or tiny-mla's when switching --arch):\n"
    "    --kv-lora-rank N  --q-lora-rank N (0 = none: a full q_proj)  --qk-nope-dim N  --qk-rope-dim N\n"
    "    --v-head-dim N    (head_dim = qk-nope + qk-rope; kv heads = heads)\n"
    "  M-RoPE (qwen2_vl, qwen2_5_vl): --mrope-section T,H,W (sums to rotary_dim/2; default: the preset's,\n"
    "                       or a 1/4, 3/8, 3/8 split when the rotary size changes)\n"
    "  --dtype float32|bfloat16|float16 (default float32)   --seed N (default 0)\n"
    "  --init-std F (default 0.02)   --shard-mb N (split into shards of about N MiB with an index; default 0:\n"
    "                       one file)\n"
    "  --force              replace a model already in DIR (it stays whole until every new file is written)\n"
    "                       and what an interrupted run left there (.make-model-PID)\n";

rt::RopeScaling parse_scaling(const std::string& name) {
  if (name == "none" || name == "default") return rt::RopeScaling::kNone;
  if (name == "linear") return rt::RopeScaling::kLinear;
  if (name == "dynamic") return rt::RopeScaling::kDynamicNtk;
  if (name == "llama3") return rt::RopeScaling::kLlama3;
  if (name == "yarn") return rt::RopeScaling::kYarn;
  ORBIT_FAIL("--rope-scaling: '" << name << "' is not one of none, linear, dynamic, llama3, yarn");
}

rt::Arch parse_arch(const std::string& name) {
  if (name == "llama") return rt::Arch::kLlama;
  if (name == "qwen2") return rt::Arch::kQwen2;
  if (name == "deepseek_v2") return rt::Arch::kDeepseekV2;
  if (name == "qwen2_vl") return rt::Arch::kQwen2VL;
  if (name == "qwen2_5_vl") return rt::Arch::kQwen25VL;
  ORBIT_FAIL("--arch: '" << name << "' is not one of llama, qwen2, deepseek_v2, qwen2_vl, qwen2_5_vl");
}

const char* tiny_preset(rt::Arch arch) {
  switch (arch) {
    case rt::Arch::kLlama: return "tiny-llama";
    case rt::Arch::kQwen2: return "tiny-qwen2";
    case rt::Arch::kDeepseekV2: return "tiny-mla";
    case rt::Arch::kQwen2VL:
    case rt::Arch::kQwen25VL: return "tiny-qwen2-vl";
  }
  return "tiny-llama";
}

bool is_vl(rt::Arch arch) { return arch == rt::Arch::kQwen2VL || arch == rt::Arch::kQwen25VL; }

// Default M-RoPE split of `half` = rotary_dim/2 frequencies, Qwen2-VL's proportions (16, 24, 24 of 64).
std::vector<int64_t> default_mrope_section(int64_t half) {
  const int64_t t = half / 4, h = (half - t) / 2;
  return {t, h, half - t - h};
}

// Sizes of the attention: GQA/MHA head and rotary dims, or the MLA dims.
void apply_attention_options(const Args& args, rt::ModelConfig& c, bool arch_switched) {
  rt::RopeConfig& r = c.rope;
  if (c.attention() == rt::AttentionKind::kMla) {
    ORBIT_CHECK(
        !args.has("--head-dim") && !args.has("--partial-rotary") && !args.has("--kv-heads"),
        "make-model: --head-dim, --partial-rotary and --kv-heads do not apply to deepseek_v2 (use --qk-nope-dim, "
        "--qk-rope-dim, --v-head-dim; kv heads = heads)");
    if (arch_switched) c.mla = rt::generator_preset("tiny-mla").mla;
    rt::MlaConfig& m = c.mla;
    m.kv_lora_rank = args.get_int("--kv-lora-rank", m.kv_lora_rank);
    m.q_lora_rank = args.get_int("--q-lora-rank", m.q_lora_rank);
    m.qk_nope_head_dim = args.get_int("--qk-nope-dim", m.qk_nope_head_dim);
    m.qk_rope_head_dim = args.get_int("--qk-rope-dim", m.qk_rope_head_dim);
    m.v_head_dim = args.get_int("--v-head-dim", m.v_head_dim);
    c.num_kv_heads = c.num_heads;
    c.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    c.attention_bias = false;
    r.layout = rt::RopeLayout::kInterleaved;
    r.head_dim = r.rotary_dim = m.qk_rope_head_dim;
    r.mrope_section.clear();
    return;
  }
  for (const char* mla_option : {"--kv-lora-rank", "--q-lora-rank", "--qk-nope-dim", "--qk-rope-dim", "--v-head-dim"}) {
    ORBIT_CHECK(!args.has(mla_option), "make-model: " << mla_option << " applies to --arch deepseek_v2 only");
  }
  c.mla = rt::MlaConfig{};
  c.num_kv_heads = args.get_int("--kv-heads", c.num_kv_heads);
  const bool shape_changed = args.has("--hidden") || args.has("--heads") || arch_switched;
  c.head_dim = args.get_int("--head-dim", shape_changed ? c.hidden_size / c.num_heads : c.head_dim);
  r.layout = rt::RopeLayout::kHalfSplit;
  r.head_dim = c.head_dim;
  const double partial = args.get_double("--partial-rotary", 1.0);
  ORBIT_CHECK(partial > 0.0 && partial <= 1.0, "--partial-rotary: must be in (0, 1], got " << partial);
  const double rotary = static_cast<double>(c.head_dim) * partial;  // whole, or refused by check_option_values
  r.rotary_dim = std::abs(rotary - std::round(rotary)) < 1e-9 ? std::llround(rotary) : static_cast<int64_t>(rotary);
  if (!is_vl(c.arch)) {
    ORBIT_CHECK(!args.has("--mrope-section"),
                "make-model: --mrope-section applies to --arch qwen2_vl / qwen2_5_vl only");
    r.mrope_section.clear();
    return;
  }
  if (auto section = args.get("--mrope-section")) {
    r.mrope_section = parse_int_list(*section, "--mrope-section");
    ORBIT_CHECK(r.mrope_section.size() == 3, "--mrope-section: needs 3 values T,H,W, got " << r.mrope_section.size());
    int64_t sum = 0;
    for (int64_t v : r.mrope_section) sum += v;
    ORBIT_CHECK(sum == r.rotary_dim / 2,
                "--mrope-section: sums to " << sum << ", but rotary_dim/2 = " << r.rotary_dim / 2);
  } else {
    int64_t sum = 0;
    for (int64_t v : r.mrope_section) sum += v;
    if (r.mrope_section.size() != 3 || sum != r.rotary_dim / 2)
      r.mrope_section = default_mrope_section(r.rotary_dim / 2);
  }
}

// The options' values, checked as typed before the config.json round trip in run_make_model (whose errors
// name config.json's fields: rope_theta, num_key_value_heads, ...). A value the preset gave is valid.
void check_option_values(const Args& args, const rt::ModelConfig& c, const rt::GeneratorOptions& options) {
  const auto at_least = [](const char* option, int64_t value, int64_t min) {
    ORBIT_CHECK(value >= min, "make-model: argument '" << option << "' must be >= " << min << ", got " << value);
  };
  at_least("--vocab", c.vocab_size, 1);
  at_least("--hidden", c.hidden_size, 1);
  at_least("--intermediate", c.intermediate_size, 1);
  at_least("--layers", c.num_layers, 1);
  ORBIT_CHECK(c.num_layers <= 4096, "make-model: argument '--layers' must be <= 4096, got " << c.num_layers);
  at_least("--max-pos", c.max_position_embeddings, 1);
  const rt::RopeConfig& r = c.rope;
  ORBIT_CHECK(std::isfinite(r.theta) && r.theta > 0,
              "make-model: argument '--theta' must be positive, got " << r.theta);
  ORBIT_CHECK(r.scaling != rt::RopeScaling::kYarn || r.theta != 1.0,
              "make-model: argument '--theta' must not be 1 with --rope-scaling yarn (yarn divides by ln theta)");
  if (r.scaling != rt::RopeScaling::kNone) at_least("--rope-original-max", r.original_max_position_embeddings, 1);
  if (c.attention() == rt::AttentionKind::kMla) {
    const rt::MlaConfig& m = c.mla;
    at_least("--kv-lora-rank", m.kv_lora_rank, 1);
    at_least("--q-lora-rank", m.q_lora_rank, 0);
    at_least("--qk-nope-dim", m.qk_nope_head_dim, 1);
    at_least("--qk-rope-dim", m.qk_rope_head_dim, 1);
    ORBIT_CHECK(m.qk_rope_head_dim % 2 == 0,
                "make-model: argument '--qk-rope-dim' must be even (rotated in pairs), got " << m.qk_rope_head_dim);
    at_least("--v-head-dim", m.v_head_dim, 1);
  } else {
    at_least("--kv-heads", c.num_kv_heads, 1);
    ORBIT_CHECK(c.num_heads % c.num_kv_heads == 0,
                "make-model: --kv-heads (" << c.num_kv_heads << (args.has("--kv-heads") ? "" : ", the preset's")
                                           << ") must divide --heads (" << c.num_heads << ")");
    ORBIT_CHECK(
        args.has("--head-dim") || c.head_dim >= 1,
        "make-model: --hidden / --heads = " << c.hidden_size << " / " << c.num_heads
                                            << " leaves a head_dim of 0: give --head-dim, or --hidden >= --heads");
    at_least("--head-dim", c.head_dim, 1);
    // The config keeps the fraction; a loader truncates head_dim × fraction, which a whole product needs none of.
    const double rotary = static_cast<double>(c.head_dim) * args.get_double("--partial-rotary", 1.0);
    ORBIT_CHECK(std::abs(rotary - static_cast<double>(r.rotary_dim)) < 1e-9,
                "make-model: --head-dim × --partial-rotary = "
                    << c.head_dim << " × " << args.get_double("--partial-rotary", 1.0) << " = " << rotary
                    << " is not a whole number of rotary "
                    << "dimensions (give a fraction of " << c.head_dim << " that is)");
    ORBIT_CHECK(r.rotary_dim > 0 && r.rotary_dim % 2 == 0,
                "make-model: --head-dim × --partial-rotary = "
                    << c.head_dim << " × " << args.get_double("--partial-rotary", 1.0) << " gives " << r.rotary_dim
                    << " rotary dimensions, which must be even and positive");
  }
  ORBIT_CHECK(std::isfinite(options.init_std) && options.init_std > 0,
              "make-model: argument '--init-std' must be positive, got " << options.init_std);
  const std::string& dtype = options.dtype;
  ORBIT_CHECK(dtype == "float32" || dtype == "bfloat16" || dtype == "float16",
              "make-model: argument '--dtype' must be one of float32, bfloat16, float16, got '" << dtype << "'");
  const double most = rt::generator_max_init_std(dtype);
  ORBIT_CHECK(options.init_std <= most, "make-model: argument '--init-std' "
                                            << options.init_std << " draws weights past " << dtype
                                            << "'s largest value (they would be written as inf); give at most "
                                            << most);
}

// --theta, --rope-scaling, --rope-factor and --rope-original-max over the preset's RoPE.
void apply_rope_options(const Args& args, rt::ModelConfig& c) {
  rt::RopeConfig& r = c.rope;
  r.theta = args.get_double("--theta", r.theta);
  r.max_position_embeddings = c.max_position_embeddings;
  if (auto scaling = args.get("--rope-scaling")) r.scaling = parse_scaling(*scaling);
  if (r.scaling != rt::RopeScaling::kNone) {  // from --rope-scaling or the preset
    r.factor = args.get_double("--rope-factor", r.factor > 1.0 ? r.factor : 2.0);
    // Linear scaling divides every position by the factor: config.json has no field for this length.
    ORBIT_CHECK(r.scaling != rt::RopeScaling::kLinear || !args.has("--rope-original-max"),
                "--rope-original-max: linear RoPE scaling does not use it (dynamic, llama3 and yarn do)");
    r.original_max_position_embeddings =
        args.get_int("--rope-original-max", r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                                                   : c.max_position_embeddings);
  } else {
    // Without scaling these would be dropped from the model written: an error, not a silent no-op.
    for (const char* name : {"--rope-factor", "--rope-original-max"}) {
      ORBIT_CHECK(!args.get(name), name << ": the model has no RoPE scaling; give --rope-scaling too");
    }
  }
}

// Writes the model with its progress on stderr (a bar redrawn in place on a terminal, else a line at each tenth
// of the tensors, as a log reads it) and a line on stdout.
void write_model(rt::GeneratorOptions& options, const std::string& out) {
  const rt::ModelConfig& c = options.config;
  const auto start = std::chrono::steady_clock::now();
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  options.progress = [tty](int64_t done, int64_t total) {
    if (!tty) {
      if (done * 10 / total != (done - 1) * 10 / total || done == total) {
        std::fprintf(stderr, "make-model: %lld/%lld tensors drawn\n", (long long)done, (long long)total);
      }
      return;
    }
    const int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\rmake-model [%.*s%*s] %lld/%lld tensors", filled,
                 "==============================", width - filled, "", (long long)done, (long long)total);
    if (done == total) std::fputc('\n', stderr);
  };
  rt::generate_model(options, out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s (%s, %lld layers, hidden %lld, %s) in %.1f s\n", out.c_str(), rt::arch_name(c.arch),
              (long long)c.num_layers, (long long)c.hidden_size, options.dtype.c_str(), seconds);
}

std::string usage_text() {
  std::string presets;
  for (const auto& name : rt::generator_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  std::string usage = kUsage;
  usage.replace(usage.find("%s"), 2, presets);
  return usage;
}

}  // namespace

int run_make_model(int argc, char** argv, int first) {
  const ArgSpec spec{{"--out",
                      "--preset",
                      "--arch",
                      "--vocab",
                      "--hidden",
                      "--intermediate",
                      "--layers",
                      "--heads",
                      "--kv-heads",
                      "--head-dim",
                      "--max-pos",
                      "--theta",
                      "--eps",
                      "--partial-rotary",
                      "--rope-scaling",
                      "--rope-factor",
                      "--rope-original-max",
                      "--dtype",
                      "--seed",
                      "--init-std",
                      "--shard-mb",
                      "--kv-lora-rank",
                      "--q-lora-rank",
                      "--qk-nope-dim",
                      "--qk-rope-dim",
                      "--v-head-dim",
                      "--mrope-section"},
                     {"--tie", "--untie", "--force"},
                     usage_text()};
  const Args args("make-model", spec, argc, argv, first);
  const std::string out = args.required("--out");
  ORBIT_CHECK(!out.empty(), "make-model: argument '--out' is empty (give the directory to write the model to)");

  std::string preset = args.get("--preset").value_or("");
  ORBIT_CHECK(!args.has("--preset") || !preset.empty(),
              "make-model: argument '--preset' is empty (leave it out for the tiny preset of --arch)");
  if (preset.empty()) preset = tiny_preset(parse_arch(args.get("--arch").value_or("llama")));
  rt::GeneratorOptions options;
  rt::ModelConfig& c = options.config;
  c = rt::generator_preset(preset);
  bool arch_switched = false;
  if (auto arch = args.get("--arch")) {
    const rt::Arch chosen = parse_arch(*arch);
    arch_switched = rt::attention_kind(chosen) != c.attention() || is_vl(chosen) != is_vl(c.arch);
    c.arch = chosen;
    c.attention_bias = c.arch != rt::Arch::kLlama && c.arch != rt::Arch::kDeepseekV2;
  }
  c.vocab_size = args.get_int("--vocab", c.vocab_size);
  c.hidden_size = args.get_int("--hidden", c.hidden_size);
  c.intermediate_size = args.get_int("--intermediate", c.intermediate_size);
  c.num_layers = args.get_int("--layers", c.num_layers);
  c.num_heads = args.get_int("--heads", c.num_heads);
  ORBIT_CHECK(c.num_heads > 0, "--heads: must be positive, got " << c.num_heads);
  if (arch_switched && c.attention() == rt::AttentionKind::kGqa && c.num_heads % c.num_kv_heads != 0) {
    c.num_kv_heads = c.num_heads;
  }
  c.max_position_embeddings = args.get_int("--max-pos", c.max_position_embeddings);
  c.rms_norm_eps = args.get_double("--eps", c.rms_norm_eps);
  ORBIT_CHECK(!(args.flag("--tie") && args.flag("--untie")), "make-model: --tie and --untie contradict each other");
  if (args.flag("--tie")) c.tie_word_embeddings = true;
  if (args.flag("--untie")) c.tie_word_embeddings = false;

  apply_attention_options(args, c, arch_switched);
  apply_rope_options(args, c);
  const rt::RopeConfig& r = c.rope;
  // The spellings every other command takes (bf16, fp16, half, any case), written under the dtype's name.
  const std::string dtype = args.get("--dtype").value_or("float32");
  ORBIT_CHECK(!dtype.empty(), "make-model: argument '--dtype' is empty (float32, bfloat16 or float16)");
  options.dtype = rt::dtype_name(rt::parse_compute_dtype(dtype, "make-model: argument '--dtype'"));
  options.seed = args.get_seed("--seed", 0);
  options.init_std = args.get_double("--init-std", options.init_std);
  const int64_t shard_mb = args.get_int("--shard-mb", 0, 0);
  // In bytes it must fit 64 bits: more wrapped (99999999999999 MiB to a negative size the generator named).
  ORBIT_CHECK(shard_mb <= (std::numeric_limits<int64_t>::max() >> 20),
              "make-model: argument '--shard-mb' is too large (" << shard_mb << " MiB is past 64-bit bytes)");
  options.shard_bytes = shard_mb * (int64_t{1} << 20);
  options.overwrite = args.flag("--force");

  ORBIT_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0 && c.rms_norm_eps < 1,
              "--eps: must be in (0, 1), got " << c.rms_norm_eps);
  ORBIT_CHECK(r.scaling == rt::RopeScaling::kNone || (std::isfinite(r.factor) && r.factor >= 1.0),
              "--rope-factor: must be >= 1, got " << r.factor);
  check_option_values(args, c, options);
  // The config.json about to be written must load: read it back as the loader will, before writing.
  (void)rt::parse_hf_config(rt::hf_config_json(c), "make-model: the config.json these options describe");

  write_model(options, out);
  return 0;
}

}  // namespace orbit::cli
