// Hugging Face directories: config.json + model.safetensors, or shards listed by
// model.safetensors.index.json ({"weight_map": {tensor name: shard file}}). Every expected tensor is
// looked up by weight_specs(), shape-checked against the config and converted to the target's dtype and device.
#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"
#include "orbit/common/json_input.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/safetensors.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// config.json and the shard index are small; anything past this is not one.
constexpr std::uintmax_t kMaxJsonFileBytes = std::uintmax_t{64} << 20;

json read_json(const fs::path& path) {
  check_regular_input(path.string(), "a JSON file");
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  ORBIT_CHECK(!ec, path.string() << ": cannot read its size: " << ec.message());
  ORBIT_CHECK(size <= kMaxJsonFileBytes, path.string() << ": " << size << " bytes, past the " << kMaxJsonFileBytes
                                                       << "-byte limit for a JSON file");
  std::ifstream in(path, std::ios::binary);
  ORBIT_CHECK(in.good(), path.string() << ": cannot open for reading");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  ORBIT_CHECK(static_cast<std::uintmax_t>(in.gcount()) == size, path.string() << ": read error");
  return parse_json_input(text, path.string());
}

bool is_float_dtype(StDtype d) {
  return d == StDtype::kF32 || d == StDtype::kF16 || d == StDtype::kBF16 || d == StDtype::kF64;
}

// Tensors a language-model config legitimately leaves unused: a vision tower (Qwen2-VL exports) and the
// RoPE frequency buffers older exports saved.
bool ignorable_tensor(const std::string& name) {
  const auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  const auto ends = [&](const std::string& x) {
    return name.size() >= x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
  };
  return starts("visual.") || starts("model.visual.") || ends(".rotary_emb.inv_freq");
}

// Every tensor in the files must be one the config asks for: a leftover means config.json describes
// another model (fewer layers, tied embeddings beside an lm_head, ...), which would compute something else.
// A tied checkpoint may still carry lm_head.weight when it equals the embedding.
void check_unused_tensors(const std::map<std::string, const SafetensorsFile*>& owner, const std::set<std::string>& used,
                          const ModelConfig& config, const ModelWeights& weights, const std::string& config_path) {
  for (const auto& [name, file] : owner) {
    if (used.count(name) > 0 || ignorable_tensor(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) {
      const StTensorInfo* info = file->find(name);
      const bool same =
          is_float_dtype(info->dtype) &&
          info->shape == std::vector<int64_t>(weights.embed.sizes().begin(), weights.embed.sizes().end()) &&
          file->load(name, at::kFloat).equal(weights.embed);
      ORBIT_CHECK(same, file->path() << ": tensor 'lm_head.weight' differs from the embedding, but " << config_path
                                     << " says tie_word_embeddings = true (the output head would be ignored)");
      continue;
    }
    ORBIT_FAIL(file->path() << ": tensor '" << name << "' is not used by the model " << config_path << " describes ("
                            << arch_name(config.arch) << ", " << config.num_layers << " layers, "
                            << (config.tie_word_embeddings ? "tied" : "untied")
                            << " embeddings): config and weights do not match");
  }
}

using TensorOwners = std::map<std::string, const SafetensorsFile*>;

// The stored tensor that holds `name`, or owner.end(). Besides the name itself:
//   - model.language_model.* : transformers v5 saves the language model of a VL model (Qwen2.5-VL) so;
//   - a "__metadata__" alias {name: stored}: safetensors' save_model drops all but one of the names that
//     share storage and records each dropped name this way (TinyStories-656K maps
//     model.embed_tokens.weight to lm_head.weight);
//   - lm_head.weight for model.embed_tokens.weight when the embeddings are tied: the same matrix, saved
//     once under the output head's name.
TensorOwners::const_iterator resolve_tensor(const TensorOwners& owner, const ModelConfig& config,
                                            const std::string& name) {
  auto it = owner.find(name);
  if (it != owner.end()) return it;
  if (name.rfind("model.", 0) == 0) {
    auto alt = owner.find("model.language_model." + name.substr(6));
    if (alt != owner.end()) return alt;
  }
  for (const auto& entry : owner) {
    const auto& metadata = entry.second->header().metadata;
    auto alias = metadata.find(name);
    if (alias == metadata.end() || alias->second == name) continue;
    auto target = owner.find(alias->second);
    if (target != owner.end() && target->second == entry.second) return target;
  }
  if (name == "model.embed_tokens.weight" && config.tie_word_embeddings) return owner.find("lm_head.weight");
  return owner.end();
}

}  // namespace

std::string no_hf_config_message(const std::string& dir) {
  std::vector<std::string> models;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool tokenizer = name == "tokenizer.bin" || (name.rfind("tok", 0) == 0 && name.size() > 7 &&
                                                       name.find_first_not_of("0123456789", 3) == name.size() - 4);
    if (it->path().extension() == ".bin" && !tokenizer && it->is_regular_file(ec)) models.push_back(name);
  }
  std::sort(models.begin(), models.end());
  std::ostringstream out;
  out << dir << ": no config.json in this directory (a Hugging Face model directory needs one)";
  if (models.empty()) return out.str();
  out << (models.size() == 1 ? "; it holds a llama2.c model file: give its path, "
                             : "; it holds llama2.c model files: give one's path, ");
  const std::size_t named = std::min<std::size_t>(models.size(), 4);
  for (std::size_t i = 0; i < named; ++i) {
    out << (i == 0 ? "" : i + 1 == models.size() ? " or " : ", ") << (fs::path(dir) / models[i]).string();
  }
  if (models.size() > named) out << ", ...";
  return out.str();
}

std::unique_ptr<Model> load_hf(const std::string& dir_string, const ComputeTarget& target) {
  const fs::path dir(dir_string);
  const fs::path config_path = dir / "config.json";
  ORBIT_CHECK(fs::is_regular_file(config_path), no_hf_config_message(dir_string));
  ModelConfig config = parse_hf_config(read_json(config_path), config_path.string());

  // Which file holds which tensor.
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> owner;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(index_path)) {
    const json index = read_json(index_path);
    auto map_it = index.find("weight_map");
    ORBIT_CHECK(map_it != index.end() && map_it->is_object(),
                index_path.string() << ": field 'weight_map' is missing or not an object");
    std::map<std::string, const SafetensorsFile*> by_shard;
    for (auto it = map_it->begin(); it != map_it->end(); ++it) {
      ORBIT_CHECK(it.value().is_string(), index_path.string() << ": weight_map['" << it.key() << "'] is not a string");
      const std::string shard = it.value().get<std::string>();
      ORBIT_CHECK(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(),
                  index_path.string() << ": weight_map['" << it.key() << "'] names '" << shard
                                      << "', which is not a file in this directory");
      auto found = by_shard.find(shard);
      if (found == by_shard.end()) {
        const fs::path shard_path = dir / shard;
        ORBIT_CHECK(fs::is_regular_file(shard_path), index_path.string()
                                                         << ": weight_map['" << it.key() << "'] names missing shard "
                                                         << shard_path.string());
        files.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
        found = by_shard.emplace(shard, files.back().get()).first;
      }
      ORBIT_CHECK(found->second->find(it.key()) != nullptr,
                  index_path.string() << ": weight_map says tensor '" << it.key() << "' is in " << shard
                                      << ", but that shard does not contain it");
      owner[it.key()] = found->second;
    }
  } else {
    const fs::path single = dir / "model.safetensors";
    ORBIT_CHECK(!fs::exists(single) || fs::is_regular_file(single),
                single.string() << ": not a regular file ("
                                << (fs::is_directory(single) ? "a directory" : "a special file")
                                << "; the weights are a safetensors file)");
    ORBIT_CHECK(fs::is_regular_file(single),
                dir_string << ": neither model.safetensors nor model.safetensors.index.json is present");
    files.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const StTensorInfo& info : files.back()->header().tensors) owner[info.name] = files.back().get();
  }

  ModelWeights weights;
  prepare_weights(weights, config);
  auto resolve = [&](const std::string& name) { return resolve_tensor(owner, config, name); };
  std::set<std::string> used;
  for (const WeightSpec& spec : weight_specs(config)) {
    auto it = resolve(spec.name);
    ORBIT_CHECK(it != owner.end(),
                dir_string << ": missing tensor '" << spec.name << "' (config.json: " << arch_name(config.arch) << ", "
                           << config.num_layers << " layers"
                           << (config.tie_word_embeddings ? ", tied embeddings" : ", untied embeddings") << ")");
    const std::string& stored = it->first;
    const StTensorInfo* info = it->second->find(stored);
    ORBIT_CHECK(info->shape == spec.shape,
                it->second->path() << ": tensor '" << spec.name << "' has shape " << shape_string(info->shape)
                                   << " but config.json implies " << shape_string(spec.shape));
    ORBIT_CHECK(is_float_dtype(info->dtype), it->second->path() << ": tensor '" << spec.name << "' has dtype "
                                                                << st_dtype_name(info->dtype)
                                                                << "; weights must be floating (F32, F16, BF16, F64)");
    used.insert(stored);
    // Stored dtype -> target dtype on the host (a no-op when they agree), then one copy to the device.
    weight_slot(weights, config, spec.name) = it->second->load(stored, target.dtype).to(target.device);
  }
  check_unused_tensors(owner, used, config, weights, config_path.string());
  if (config.tie_word_embeddings) weights.lm_head = weights.embed;
  return std::make_unique<Model>(std::move(config), std::move(weights), dir_string);
}

std::unique_ptr<Model> load_model(const std::string& path, const ComputeTarget& target) {
  ORBIT_CHECK(fs::exists(path), path << ": no such file or directory (expected a llama2.c .bin file or a "
                                        "Hugging Face directory with config.json)");
  if (fs::is_directory(path)) return load_hf(path, target);
  check_regular_input(path, "the model (a llama2.c .bin file or a Hugging Face directory)");
  const fs::path file(path);
  if (file.filename() == "config.json")
    return load_hf(file.has_parent_path() ? file.parent_path().string() : ".", target);
  // A Hugging Face directory's other files are not models on their own. Read as a llama2.c header, its
  // weights gave "header field 'hidden_dim' must be positive, got 0", naming nothing the user did wrong.
  const std::string name = file.filename().string();
  const std::string index = ".safetensors.index.json";
  const bool weights =
      file.extension() == ".safetensors" ||
      (name.size() > index.size() && name.compare(name.size() - index.size(), index.size(), index) == 0);
  ORBIT_CHECK(!weights && file.extension() != ".json",
              path << ": " << (weights ? "a Hugging Face weights file is" : "a JSON file is")
                   << " not a model on its own (expected a llama2.c .bin file or a Hugging Face directory with "
                      "config.json): give the directory, "
                   << (file.has_parent_path() ? file.parent_path().string() : "."));
  return load_llama2c(path, target);
}

}  // namespace orbit::runtime
