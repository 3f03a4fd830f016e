// `orbit make-model`: random-weight Hugging Face model directories of any supported shape.
#include <chrono>
#include <cstdio>
#include <string>

#include "args.h"
#include "commands.h"
#include "orbit/common/error.h"
#include "orbit/runtime/config.h"
#include "orbit/runtime/generator.h"

namespace orbit::cli {

namespace rt = orbit::runtime;

namespace {

const char* kHelp =
    "usage: orbit make-model --out DIR [options]\n"
    "\n"
    "  --preset NAME        start from a named shape (default: tiny-<arch>); one of:\n"
    "                       %s\n"
    "  --arch llama|qwen2   architecture (default: the preset's, or llama)\n"
    "  --vocab N --hidden N --intermediate N --layers N --heads N --kv-heads N --head-dim N\n"
    "  --max-pos N --theta F --eps F --partial-rotary F (fraction of head_dim that rotates)\n"
    "  --tie | --untie      share the embedding with the output head, or not\n"
    "  --rope-scaling linear|dynamic|llama3|yarn  --rope-factor F  --rope-original-max N\n"
    "  --dtype float32|bfloat16|float16 (default float32)   --seed N (default 0)\n"
    "  --init-std F (default 0.02)   --shard-mb N (split into shards of about N MiB with an index)\n"
    "  --force              replace a model already in DIR\n";

rt::RopeScaling parse_scaling(const std::string& name) {
  if (name == "none" || name == "default") return rt::RopeScaling::kNone;
  if (name == "linear") return rt::RopeScaling::kLinear;
  if (name == "dynamic") return rt::RopeScaling::kDynamicNtk;
  if (name == "llama3") return rt::RopeScaling::kLlama3;
  if (name == "yarn") return rt::RopeScaling::kYarn;
  ORBIT_FAIL("--rope-scaling: '" << name << "' is not one of none, linear, dynamic, llama3, yarn");
}

}  // namespace

int run_make_model(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {
      std::string presets;
      for (const auto& name : rt::generator_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
      std::printf(kHelp, presets.c_str());
      return 0;
    }
  }
  const ArgSpec spec{{"--out", "--preset", "--arch", "--vocab", "--hidden", "--intermediate", "--layers", "--heads",
                      "--kv-heads", "--head-dim", "--max-pos", "--theta", "--eps", "--partial-rotary", "--rope-scaling",
                      "--rope-factor", "--rope-original-max", "--dtype", "--seed", "--init-std", "--shard-mb"},
                     {"--tie", "--untie", "--force"}};
  const Args args("make-model", spec, argc, argv, first);
  const std::string out = args.required("--out");

  std::string preset = args.get("--preset").value_or("");
  if (preset.empty()) {
    const std::string arch = args.get("--arch").value_or("llama");
    ORBIT_CHECK(arch == "llama" || arch == "qwen2", "--arch: '" << arch << "' is not one of llama, qwen2");
    preset = "tiny-" + arch;
  }
  rt::GeneratorOptions options;
  rt::ModelConfig& c = options.config;
  c = rt::generator_preset(preset);
  if (auto arch = args.get("--arch")) {
    ORBIT_CHECK(*arch == "llama" || *arch == "qwen2", "--arch: '" << *arch << "' is not one of llama, qwen2");
    c.arch = *arch == "qwen2" ? rt::Arch::kQwen2 : rt::Arch::kLlama;
    c.attention_bias = c.arch == rt::Arch::kQwen2;
  }
  c.vocab_size = args.get_int("--vocab", c.vocab_size);
  c.hidden_size = args.get_int("--hidden", c.hidden_size);
  c.intermediate_size = args.get_int("--intermediate", c.intermediate_size);
  c.num_layers = args.get_int("--layers", c.num_layers);
  c.num_heads = args.get_int("--heads", c.num_heads);
  c.num_kv_heads = args.get_int("--kv-heads", c.num_kv_heads);
  ORBIT_CHECK(c.num_heads > 0, "--heads: must be positive, got " << c.num_heads);
  const bool shape_changed = args.has("--hidden") || args.has("--heads");
  c.head_dim = args.get_int("--head-dim", shape_changed ? c.hidden_size / c.num_heads : c.head_dim);
  c.max_position_embeddings = args.get_int("--max-pos", c.max_position_embeddings);
  c.rms_norm_eps = args.get_double("--eps", c.rms_norm_eps);
  ORBIT_CHECK(!(args.flag("--tie") && args.flag("--untie")), "make-model: --tie and --untie contradict each other");
  if (args.flag("--tie")) c.tie_word_embeddings = true;
  if (args.flag("--untie")) c.tie_word_embeddings = false;

  rt::RopeConfig& r = c.rope;
  r.head_dim = c.head_dim;
  const double partial = args.get_double("--partial-rotary", 1.0);
  ORBIT_CHECK(partial > 0.0 && partial <= 1.0, "--partial-rotary: must be in (0, 1], got " << partial);
  r.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  r.theta = args.get_double("--theta", r.theta);
  r.max_position_embeddings = c.max_position_embeddings;
  if (auto scaling = args.get("--rope-scaling")) {
    r.scaling = parse_scaling(*scaling);
    r.factor = args.get_double("--rope-factor", r.factor > 1.0 ? r.factor : 2.0);
    r.original_max_position_embeddings =
        args.get_int("--rope-original-max", r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings
                                                                                  : c.max_position_embeddings);
  }
  options.dtype = args.get("--dtype").value_or("float32");
  options.seed = static_cast<uint64_t>(args.get_int("--seed", 0));
  options.init_std = args.get_double("--init-std", options.init_std);
  options.shard_bytes = args.get_int("--shard-mb", 0) * (int64_t{1} << 20);
  options.overwrite = args.flag("--force");

  const auto start = std::chrono::steady_clock::now();
  options.progress = [](int64_t done, int64_t total) {
    const int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\rmake-model [%.*s%*s] %lld/%lld tensors", filled, "==============================",
                 width - filled, "", (long long)done, (long long)total);
    if (done == total) std::fputc('\n', stderr);
  };
  rt::generate_model(options, out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s (%s, %lld layers, hidden %lld, %s) in %.1f s\n", out.c_str(), rt::arch_name(c.arch),
              (long long)c.num_layers, (long long)c.hidden_size, options.dtype.c_str(), seconds);
  return 0;
}

}  // namespace orbit::cli
