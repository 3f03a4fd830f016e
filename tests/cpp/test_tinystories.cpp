// The bundled Hugging Face model models/tinystories-656k: a trained Llama whose safetensors file stores the
// tied embedding once, as lm_head.weight (with a "__metadata__" alias for model.embed_tokens.weight).
// `orbit generate` reproduces the reference continuation of its README and stops at EOS (id 2); the loader
// finds a tied embedding under either name.
#include "orbit_catch.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "orbit/runtime/loader.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/safetensors.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit::runtime;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using orbit::test::TempDir;

namespace {

const std::string kModel = std::string(ORBIT_MODELS_DIR) + "/tinystories-656k";

// The README's reference greedy continuation of "Once upon a time" (llama2.c's run.c and a plain-Python
// forward agree): its first generated ids, and the text, which the model continues past.
const std::vector<int64_t> kReferenceIds = {313, 598, 303, 1049, 1468, 267, 628,  333, 94,  1210,
                                            263, 251, 604, 94,   1030, 94,  1030, 94,  436, 220};
const char* const kReferenceText =
    ", a little girl named Lily lived in a small house with her mom, dad, and her dog, Spot, Spot, loved to play all "
    "day. One day, Lily saw a small bird on the ground. She picked it up and tried to reach the bird and see what it "
    "was.";

// Copies the model's JSON files to `dir` and writes `tensors` as its model.safetensors.
void write_variant(const TempDir& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                   const StWriteOptions& options = {}) {
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(kModel + "/" + f, dir / f);
  }
  write_safetensors(dir / "model.safetensors", tensors, options);
}

std::vector<std::pair<std::string, at::Tensor>> stored_tensors() {
  SafetensorsFile f(kModel + "/model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const StTensorInfo& info : f.header().tensors) out.emplace_back(info.name, f.load(info.name, at::kFloat));
  return out;
}

}  // namespace

TEST_CASE("orbit generate continues 'Once upon a time' as the README says and stops at EOS", "[tinystories][cpu]") {
  const orbit::test::CliRun plain =
      orbit::test::cli("generate --model " + kModel + " --prompt 'Once upon a time' --temperature 0");
  REQUIRE(plain.status == 0);
  CHECK_THAT(plain.out, StartsWith(kReferenceText));

  const orbit::test::CliRun js =
      orbit::test::cli("generate --model " + kModel + " --prompt 'Once upon a time' --temperature 0 --json");
  REQUIRE(js.status == 0);
  const auto j = nlohmann::json::parse(js.out);
  CHECK(j["stop_reason"] == "stop_token");
  CHECK(j["text"].get<std::string>() + "\n" == plain.out);
  const auto ids = j["tokens"].get<std::vector<int64_t>>();
  REQUIRE(ids.size() > kReferenceIds.size());
  CHECK(std::vector<int64_t>(ids.begin(), ids.begin() + kReferenceIds.size()) == kReferenceIds);
  // The stop token is EOS, not BOS: greedy decoding over the same tokens ranks id 2 first next.
  auto model = load_model(kModel);
  ForwardInput in;
  in.tokens = {1, 80, 147, 201, 282, 57};
  in.tokens.insert(in.tokens.end(), ids.begin(), ids.end());
  const at::Tensor logits = model->forward(in, nullptr, {}).logits;
  CHECK(logits.reshape({-1}).argmax().item<int64_t>() == 2);
}

TEST_CASE("TinyStories-656K loads with one matrix as embedding and output head", "[tinystories][cpu]") {
  auto model = load_model(kModel);
  CHECK(model->config().tie_word_embeddings);
  CHECK(model->weights().embed.is_same(model->weights().lm_head));
  SafetensorsFile f(kModel + "/model.safetensors");
  CHECK(f.find("model.embed_tokens.weight") == nullptr);
  CHECK(model->weights().embed.equal(f.load("lm_head.weight", at::kFloat)));
}

TEST_CASE("a tied embedding is found under either name, with or without the metadata alias", "[tinystories][cpu]") {
  const auto original = load_model(kModel);
  const at::Tensor matrix = original->weights().embed;
  auto renamed = stored_tensors();
  for (auto& [name, t] : renamed) {
    if (name == "lm_head.weight") name = "model.embed_tokens.weight";
  }
  TempDir as_embed;  // the usual tied export: the embedding's name only
  write_variant(as_embed, renamed);
  CHECK(load_model(as_embed.path().string())->weights().lm_head.equal(matrix));

  TempDir no_metadata;  // lm_head.weight only, no alias: the tie says where the embedding is
  write_variant(no_metadata, stored_tensors());
  CHECK(load_model(no_metadata.path().string())->weights().embed.equal(matrix));

  TempDir untied;  // untied without an embedding: nothing to fall back on
  write_variant(untied, stored_tensors());
  auto config = nlohmann::json::parse(std::ifstream(untied / "config.json"));
  config["tie_word_embeddings"] = false;
  std::ofstream(untied / "config.json") << config.dump();
  CHECK_THROWS_WITH(load_model(untied.path().string()),
                    Contains("missing tensor 'model.embed_tokens.weight'") && Contains("untied embeddings"));

  TempDir aliased;  // untied, but the file says the embedding shares lm_head.weight's storage
  StWriteOptions with_alias;
  with_alias.metadata = {{"format", "pt"}, {"model.embed_tokens.weight", "lm_head.weight"}};
  write_variant(aliased, stored_tensors(), with_alias);
  std::ofstream(aliased / "config.json") << config.dump();
  auto loaded = load_model(aliased.path().string());
  CHECK(loaded->weights().embed.equal(matrix));
  CHECK(loaded->weights().lm_head.equal(matrix));
}

}  // namespace ORBIT_TEST_FILE
