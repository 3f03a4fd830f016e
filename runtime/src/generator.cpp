#include "orbit/runtime/generator.h"

#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"
#include "orbit/common/sha256.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/safetensors.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace fs = std::filesystem;

namespace {

ModelConfig make_config(Arch arch, int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                        int64_t kv_heads, int64_t head_dim, int64_t max_pos, double theta, double eps, bool tied) {
  ModelConfig c;
  c.arch = arch;
  c.source_format = "hf";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = eps;
  c.tie_word_embeddings = tied;
  c.attention_bias = arch == Arch::kQwen2;
  c.rope.layout = RopeLayout::kHalfSplit;
  c.rope.head_dim = head_dim;
  c.rope.rotary_dim = head_dim;
  c.rope.theta = theta;
  c.rope.max_position_embeddings = max_pos;
  return c;
}

// A Qwen2-VL / Qwen2.5-VL language model: Qwen2 with M-RoPE sections (t, h, w).
ModelConfig make_vl(Arch arch, ModelConfig c, std::vector<int64_t> mrope_section) {
  c.arch = arch;
  c.attention_bias = true;
  c.rope.mrope_section = std::move(mrope_section);
  return c;
}

// DeepSeek-V2 MLA shapes: head_dim = d_nope + d_rope, num_kv_heads = num_heads, interleaved RoPE on k_pe.
ModelConfig make_mla(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, MlaConfig mla,
                     int64_t max_pos) {
  ModelConfig c = make_config(Arch::kDeepseekV2, vocab, hidden, inter, layers, heads, heads,
                              mla.qk_nope_head_dim + mla.qk_rope_head_dim, max_pos, 10000.0, 1e-6, false);
  c.attention_bias = false;
  c.mla = mla;
  c.rope.layout = RopeLayout::kInterleaved;
  c.rope.head_dim = c.rope.rotary_dim = mla.qk_rope_head_dim;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> t;
    t["tiny-llama"] = make_config(Arch::kLlama, 512, 64, 172, 2, 8, 4, 8, 1024, 10000.0, 1e-5, false);
    t["tiny-qwen2"] = make_config(Arch::kQwen2, 512, 64, 128, 2, 4, 2, 16, 1024, 1e6, 1e-6, true);
    t["qwen2.5-0.5b"] = make_config(Arch::kQwen2, 151936, 896, 4864, 24, 14, 2, 64, 32768, 1e6, 1e-6, true);
    t["qwen2.5-7b"] = make_config(Arch::kQwen2, 152064, 3584, 18944, 28, 28, 4, 128, 32768, 1e6, 1e-6, false);
    // The language model of Qwen2.5-VL-7B: Qwen2.5-7B's shape with M-RoPE sections (16, 24, 24).
    t["qwen2.5-vl-7b-lm"] =
        make_vl(Arch::kQwen25VL,
                make_config(Arch::kQwen2, 152064, 3584, 18944, 28, 28, 4, 128, 128000, 1e6, 1e-6, false), {16, 24, 24});
    t["tiny-qwen2-vl"] =
        make_vl(Arch::kQwen2VL, make_config(Arch::kQwen2, 512, 64, 128, 2, 4, 2, 16, 1024, 1e6, 1e-6, true), {2, 3, 3});
    // MLA with a q low-rank path; d_v differs from d_nope and d_rope so no width can stand in for another.
    t["tiny-mla"] = make_mla(512, 64, 128, 2, 4, MlaConfig{24, 32, 16, 8, 12}, 1024);
    // DeepSeek-V2-Lite's attention and sizes with a dense MLP (intermediate 10944) in every layer: the
    // real checkpoint's layers 1..26 are mixture-of-experts, which orbit does not run. YaRN as released.
    ModelConfig lite = make_mla(102400, 2048, 10944, 27, 16, MlaConfig{0, 512, 128, 64, 128}, 163840);
    lite.rope.scaling = RopeScaling::kYarn;
    lite.rope.factor = 40.0;
    lite.rope.beta_fast = 32.0;
    lite.rope.beta_slow = 1.0;
    lite.rope.mscale = 0.707;
    lite.rope.mscale_all_dim = 0.707;
    lite.rope.original_max_position_embeddings = 4096;
    t["deepseek-v2-lite"] = lite;
    ModelConfig llama = make_config(Arch::kLlama, 128256, 2048, 8192, 16, 32, 8, 64, 131072, 500000.0, 1e-5, true);
    llama.rope.scaling = RopeScaling::kLlama3;
    llama.rope.factor = 32.0;
    llama.rope.low_freq_factor = 1.0;
    llama.rope.high_freq_factor = 4.0;
    llama.rope.original_max_position_embeddings = 8192;
    t["llama-3.2-1b"] = llama;
    return t;
  }();
  return table;
}

// Per-tensor seed, so a tensor's values depend only on (seed, name): sharding never changes them.
uint64_t tensor_seed(uint64_t seed, const std::string& name) {
  Sha256 hash;
  hash.update_u64(seed).update(name);
  const std::string hex = hash.hex_digest();
  return std::stoull(hex.substr(0, 15), nullptr, 16);
}

at::Tensor make_tensor(const WeightSpec& spec, const GeneratorOptions& options) {
  at::Generator gen = at::detail::createCPUGenerator(tensor_seed(options.seed, spec.name));
  at::Tensor t = at::randn(spec.shape, gen, at::TensorOptions().dtype(at::kFloat)).mul_(options.init_std);
  if (spec.is_norm) t.add_(1.0);
  return t;
}

StDtype parse_dtype(const std::string& name) {
  if (name == "float32") return StDtype::kF32;
  if (name == "bfloat16") return StDtype::kBF16;
  if (name == "float16") return StDtype::kF16;
  ORBIT_FAIL("generator: dtype '" << name << "' is not one of float32, bfloat16, float16");
}

// A directory a run writes its files into before moving them into place (generate_model), left behind when
// that run was interrupted.
constexpr const char* kStagingPrefix = ".make-model-";

bool is_staging_dir(const fs::path& p) { return p.filename().string().rfind(kStagingPrefix, 0) == 0; }

bool is_model_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return name == "config.json" || name == "model.safetensors.index.json" ||
         (p.extension() == ".safetensors" && name.rfind("model", 0) == 0);
}

// Bytes of one weight tensor in `dtype`; refused naming the tensor when the product overflows.
int64_t tensor_bytes(const WeightSpec& spec, StDtype dtype) {
  int64_t bytes = static_cast<int64_t>(st_dtype_size(dtype));
  for (int64_t s : spec.shape) {
    ORBIT_CHECK(!__builtin_mul_overflow(bytes, s, &bytes),
                "generator: tensor '" << spec.name << "' would hold more than 2^63 bytes (lower the sizes)");
  }
  return bytes;
}

// This machine's physical memory in bytes; 0 when unknown.
int64_t memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  int64_t bytes = 0;
  return __builtin_mul_overflow(static_cast<int64_t>(pages), static_cast<int64_t>(page), &bytes) ? 0 : bytes;
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  check_output_target(path.string(), "a model file");
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    ORBIT_CHECK(out.good(), tmp.string() << ": cannot open for writing: " << std::strerror(errno));
    out << text;
    out.flush();
    ORBIT_CHECK(out.good(), tmp.string() << ": write failed: " << std::strerror(errno));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  ORBIT_CHECK(!ec, path.string() << ": rename from " << tmp.string() << " failed: " << ec.message());
}

// Assigns tensors to shards by their size on disk (one shard unless options.shard_bytes > 0), refusing a
// shard that would not fit this machine's memory: a shard's tensors are held together until its file is
// written.
std::vector<std::vector<std::size_t>> plan_shards(const std::vector<WeightSpec>& specs, StDtype dtype,
                                                  const GeneratorOptions& options) {
  std::vector<std::vector<std::size_t>> shards(1);
  int64_t shard_size = 0;
  const int64_t memory = memory_bytes();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const int64_t bytes = tensor_bytes(specs[i], dtype);
    if (options.shard_bytes > 0 && shard_size > 0 && shard_size + bytes > options.shard_bytes) {
      shards.emplace_back();
      shard_size = 0;
    }
    shards.back().push_back(i);
    ORBIT_CHECK(!__builtin_add_overflow(shard_size, bytes, &shard_size) && (memory <= 0 || shard_size <= memory),
                "generator: the weights to write at once (through tensor '"
                    << specs[i].name << "') take more than this machine's " << memory
                    << " bytes of memory; lower the sizes or give shard_bytes (--shard-mb)");
  }
  return shards;
}

// The model files already in `dir` (config.json first), after checking that the directory may be
// written: a model there needs overwrite, and so does any other content (a home, "/"). A missing
// directory has none. Reads only: nothing is created or removed.
std::vector<fs::path> existing_model_files(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return {};
  ORBIT_CHECK(fs::is_directory(dir, ec), dir.string() << ": is not a directory");
  std::vector<fs::path> existing;
  std::vector<fs::path> others;
  for (const auto& entry : fs::directory_iterator(dir)) {
    (is_model_file(entry.path()) || is_staging_dir(entry.path()) ? existing : others).push_back(entry.path());
  }
  const auto staged = std::find_if(existing.begin(), existing.end(), is_staging_dir);
  ORBIT_CHECK(staged == existing.end() || overwrite,
              dir.string() << ": holds " << staged->filename().string()
                           << ", what an interrupted make-model left; pass overwrite (--force) to remove it and write "
                              "the model");
  if (!existing.empty()) {
    ORBIT_CHECK(overwrite, dir.string() << ": already holds a model (" << existing.front().filename().string()
                                        << "); pass overwrite (--force) to replace it");
  }
  ORBIT_CHECK(others.empty() || overwrite,
              dir.string() << ": is not empty (holds '" << (others.empty() ? "" : others.front().filename().string())
                           << "'); give a new or empty directory, or pass overwrite (--force) to write the model "
                              "into it");
  // config.json first: once removing starts, the directory does not load until the new config lands.
  std::stable_partition(existing.begin(), existing.end(),
                        [](const fs::path& p) { return p.filename() == "config.json"; });
  return existing;
}

// Creates the directory a run writes into before moving its files into place: inside `dir` (created if missing),
// so that the moves are renames on one file system; an unwritable directory is refused here, before any weight
// is drawn.
fs::path make_staging_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  ORBIT_CHECK(!ec && fs::is_directory(dir), dir.string() << ": cannot create directory: " << ec.message());
  const fs::path staging = dir / (kStagingPrefix + std::to_string(::getpid()));
  fs::remove_all(staging, ec);  // a run of this pid before (a pid is reused only once that run is gone)
  fs::create_directory(staging, ec);
  ORBIT_CHECK(!ec,
              dir.string() << ": cannot write the model there (creating " << staging.string() << "): " << ec.message());
  return staging;
}

// The model's files, written into `dir` (config.json last).
void write_model_files(const GeneratorOptions& options, const ModelConfig& config, const std::vector<WeightSpec>& specs,
                       const std::vector<std::vector<std::size_t>>& shards, const fs::path& dir) {
  const StDtype dtype = parse_dtype(options.dtype);
  const bool sharded = options.shard_bytes > 0;
  const std::size_t count = shards.size();
  StWriteOptions write_options;
  write_options.dtype = dtype;
  write_options.metadata["format"] = "pt";
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t done = 0;
  int64_t total_bytes = 0;
  for (std::size_t s = 0; s < count; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, count);
    const std::string file = sharded ? std::string(name) : std::string("model.safetensors");
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (std::size_t i : shards[s]) {
      tensors.emplace_back(specs[i].name, make_tensor(specs[i], options));
      weight_map[specs[i].name] = file;
      total_bytes += tensors.back().second.numel() * static_cast<int64_t>(st_dtype_size(dtype));
      if (options.progress) options.progress(++done, static_cast<int64_t>(specs.size()));
    }
    write_safetensors((dir / file).string(), tensors, write_options);
  }
  if (sharded) {
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_text_atomically(dir / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  write_text_atomically(dir / "config.json", hf_config_json(config).dump(2) + "\n");
}

// Replaces the model files `existing` in `dir` (config.json first: from then on the directory does not load
// until the new config lands) and stale staging directories with what `staging` holds, config.json last, then
// removes `staging`. The old model stays whole until every new file is written.
void move_into_place(const fs::path& dir, const fs::path& staging, const std::vector<fs::path>& existing) {
  for (const fs::path& p : existing) {
    if (p != staging) fs::remove_all(p);
  }
  std::vector<fs::path> staged;
  for (const auto& entry : fs::directory_iterator(staging)) staged.push_back(entry.path());
  std::stable_partition(staged.begin(), staged.end(), [](const fs::path& p) { return p.filename() != "config.json"; });
  for (const fs::path& p : staged) {
    std::error_code ec;
    fs::rename(p, dir / p.filename(), ec);
    ORBIT_CHECK(!ec, dir.string() << ": cannot move " << p.string() << " into place: " << ec.message());
  }
  fs::remove(staging);
}
}  // namespace

ModelConfig generator_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& [key, value] : presets()) known += (known.empty() ? "" : ", ") + key;
    ORBIT_FAIL("unknown model preset '" << name << "'; known presets: " << known);
  }
  return it->second;
}

std::vector<std::string> generator_preset_names() {
  std::vector<std::string> names;
  for (const auto& [key, value] : presets()) names.push_back(key);
  return names;
}

// Normal draws reach 8 standard deviations in a few billion weights: past the dtype's largest value they are
// written as inf, a model every loader refuses.
double generator_max_init_std(const std::string& dtype) {
  return (parse_dtype(dtype) == StDtype::kF16 ? 65504.0 : 3.38953139e38) / 8;
}

void generate_model(const GeneratorOptions& options, const std::string& out_dir) {
  c10::InferenceMode guard;
  ModelConfig config = options.config;
  config.source_format = "hf";
  config.weight_dtype = options.dtype;
  config.validate("generator options");
  const StDtype dtype = parse_dtype(options.dtype);
  ORBIT_CHECK(options.init_std > 0.0, "generator: init_std must be positive, got " << options.init_std);
  ORBIT_CHECK(options.init_std <= generator_max_init_std(options.dtype),
              "generator: init_std " << options.init_std << " draws weights past " << options.dtype
                                     << "'s largest value; give at most " << generator_max_init_std(options.dtype));
  ORBIT_CHECK(options.shard_bytes >= 0, "generator: shard_bytes must be >= 0, got " << options.shard_bytes);
  const std::vector<WeightSpec> specs = weight_specs(config);
  const std::vector<std::vector<std::size_t>> shards = plan_shards(specs, dtype, options);

  // Every check above and the directory's own come before anything on disk changes: a refused run
  // leaves the directory (or its absence) as it was.
  const fs::path dir(out_dir);
  const std::vector<fs::path> existing = existing_model_files(dir, options.overwrite);
  const fs::path staging = make_staging_dir(dir);
  try {
    write_model_files(options, config, specs, shards, staging);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  move_into_place(dir, staging, existing);
}

}  // namespace orbit::runtime
