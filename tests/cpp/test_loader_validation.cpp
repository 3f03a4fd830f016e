// A Hugging Face directory whose config.json and weights disagree must not load: it would compute
// something other than the checkpoint. Also refused: non-integral sizes, unsupported dtypes, integer
// weight tensors and NaN weights; and `orbit make-model` options that would write such a model.
#include "orbit_catch.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/runtime/generator.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/safetensors.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using orbit::test::TempDir;

namespace {

// A tiny random model written to dir/name; returns its path.
std::string make(const TempDir& dir, const std::string& name, const std::string& preset) {
  GeneratorOptions o;
  o.config = generator_preset(preset);
  o.seed = 3;
  const std::string out = dir / name;
  generate_model(o, out);
  return out;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void edit_config(const std::string& model, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = read_json(model + "/config.json");
  edit(j);
  std::ofstream(model + "/config.json") << j.dump(2);
}

// Rewrites model.safetensors with `edit` applied to its tensors (name -> tensor).
void edit_weights(const std::string& model, const std::function<void(std::map<std::string, at::Tensor>&)>& edit) {
  const std::string path = model + "/model.safetensors";
  std::map<std::string, at::Tensor> tensors;
  {
    SafetensorsFile f(path);
    for (const StTensorInfo& info : f.header().tensors) tensors[info.name] = f.load(info.name, at::kFloat);
  }
  edit(tensors);
  std::vector<std::pair<std::string, at::Tensor>> list(tensors.begin(), tensors.end());
  write_safetensors(path, list);
}

}  // namespace

TEST_CASE("config.json with fewer layers than the weights is refused, naming the unused tensor", "[loaders][cpu]") {
  TempDir dir;
  const std::string m = make(dir, "m", "tiny-llama");  // 2 layers
  REQUIRE_NOTHROW(load_model(m));
  edit_config(m, [](nlohmann::json& j) { j["num_hidden_layers"] = 1; });
  CHECK_THROWS_WITH(load_model(m), Contains("tensor 'model.layers.1.") && Contains("is not used by the model") &&
                                       Contains("1 layers"));
}

TEST_CASE("tie_word_embeddings beside a different lm_head is refused; an identical copy loads", "[loaders][cpu]") {
  TempDir dir;
  const std::string m = make(dir, "m", "tiny-llama");  // untied: has lm_head.weight
  edit_config(m, [](nlohmann::json& j) { j["tie_word_embeddings"] = true; });
  CHECK_THROWS_WITH(load_model(m),
                    Contains("'lm_head.weight' differs from the embedding") && Contains("tie_word_embeddings = true"));
  edit_weights(
      m, [](std::map<std::string, at::Tensor>& t) { t["lm_head.weight"] = t["model.embed_tokens.weight"].clone(); });
  CHECK_NOTHROW(load_model(m));
}

TEST_CASE("non-integral, overflowing and unsupported config values are refused", "[loaders][cpu]") {
  TempDir dir;
  const std::string m = make(dir, "m", "tiny-llama");
  const nlohmann::json original = read_json(m + "/config.json");
  auto with = [&](const char* field, const nlohmann::json& value) {
    nlohmann::json j = original;
    j[field] = value;
    std::ofstream(m + "/config.json") << j.dump(2);
  };
  with("hidden_size", 64.5);
  CHECK_THROWS_WITH(load_model(m), Contains("field 'hidden_size' must be an integer, got 64.5"));
  with("max_position_embeddings", 1e30);
  CHECK_THROWS_WITH(load_model(m), Contains("field 'max_position_embeddings' = 1e+30 is too large"));
  with("max_position_embeddings", nlohmann::json::parse("18446744073709551615"));
  CHECK_THROWS_WITH(load_model(m), Contains("field 'max_position_embeddings' = 18446744073709551615 is too large"));
  with("torch_dtype", "int4");
  CHECK_THROWS_WITH(load_model(m), Contains("unsupported field value torch_dtype = 'int4'"));
  with("hidden_size", 64.0);  // an integral float is still a size
  CHECK_NOTHROW(load_model(m));
}

TEST_CASE("an integer weight tensor is refused, naming it and its dtype", "[loaders][cpu]") {
  TempDir dir;
  const std::string m = make(dir, "m", "tiny-llama");
  edit_weights(
      m, [](std::map<std::string, at::Tensor>& t) { t["model.norm.weight"] = t["model.norm.weight"].to(at::kInt); });
  CHECK_THROWS_WITH(load_model(m),
                    Contains("tensor 'model.norm.weight' has dtype I32") && Contains("weights must be floating"));
}

TEST_CASE("NaN or infinite weights are refused at load", "[loaders][cpu]") {
  TempDir dir;
  const std::string m = make(dir, "m", "tiny-llama");
  edit_weights(m, [](std::map<std::string, at::Tensor>& t) {
    t["model.layers.1.mlp.up_proj.weight"][3][5] = std::numeric_limits<float>::quiet_NaN();
  });
  CHECK_THROWS_WITH(load_model(m),
                    Contains("tensor 'model.layers.1.mlp.up_proj.weight' contains NaN or infinite values"));
}

TEST_CASE("make-model refuses options whose model the loader would reject, and writes nothing", "[loaders][cli]") {
  TempDir dir;
  for (const std::string bad : {"--rope-scaling linear --rope-factor 0", "--eps 1e99", "--eps 0"}) {
    INFO(bad);
    const orbit::test::CliRun r = orbit::test::cli("make-model --out " + (dir / "bad") + " " + bad);
    CHECK(r.status != 0);
    CHECK_THAT(r.out, Contains(bad.find("rope") != std::string::npos ? "--rope-factor: must be >= 1"
                                                                     : "--eps: must be in (0, 1)"));
    CHECK_FALSE(std::filesystem::exists(dir / "bad/config.json"));
  }
  // A scaling option without a scaling would be dropped from the model written: refused, naming it.
  for (const std::string unused :
       {"--rope-factor 2", "--rope-original-max 512", "--rope-scaling none --rope-factor 2"}) {
    INFO(unused);
    const orbit::test::CliRun r = orbit::test::cli("make-model --out " + (dir / "bad") + " " + unused);
    CHECK(r.status != 0);
    CHECK_THAT(r.out, Contains("has no RoPE scaling; give --rope-scaling too"));
    CHECK_FALSE(std::filesystem::exists(dir / "bad/config.json"));
  }
  const orbit::test::CliRun ok =
      orbit::test::cli("make-model --out " + (dir / "ok") + " --rope-scaling linear --rope-factor 2");
  REQUIRE(ok.status == 0);
  CHECK_NOTHROW(load_model(dir / "ok"));
}

TEST_CASE("config.json nested past the depth bound or holding 1e999 is refused, not a crash", "[loaders][cpu]") {
  TempDir dir;
  const std::string m = make(dir, "m", "tiny-llama");
  std::ostringstream original;
  original << std::ifstream(m + "/config.json").rdbuf();
  const std::string text = original.str();
  const std::size_t open = text.find('{');
  REQUIRE(open != std::string::npos);
  auto with_field = [&](const std::string& field_json) {
    std::ofstream(m + "/config.json") << text.substr(0, open + 1) << field_json << "," << text.substr(open + 1);
  };
  // An unused field 100k levels deep used to overflow the stack when the config was copied.
  with_field("\"unused\": " + std::string(100000, '[') + std::string(100000, ']'));
  CHECK_THROWS_WITH(load_model(m), Contains("config.json: JSON nests deeper than 128 levels"));
  with_field("\"unused\": 1e999");
  CHECK_THROWS_WITH(load_model(m), Contains("config.json: not valid JSON: a number is out of range"));
}

TEST_CASE("a config.json with billions of layers is refused before anything is sized by it", "[loaders][cpu]") {
  // 2^31 layers ended in std::bad_alloc while the weight list was built.
  TempDir dir;
  const std::string m = make(dir, "m", "tiny-llama");
  edit_config(m, [](nlohmann::json& j) { j["num_hidden_layers"] = int64_t{1} << 31; });
  CHECK_THROWS_WITH(load_model(m), Contains("field 'num_hidden_layers' = 2147483648 is past the limit of 4096 layers"));
}

}  // namespace ORBIT_TEST_FILE
