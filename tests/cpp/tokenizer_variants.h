// Edited copies of TinyStories-656K's tokenizer.json for the tokenizer tests (test_text_stream,
// test_tokenizer_prefix, test_sync_encode): the file as JSON, a variant of it loaded from memory, and the
// normalizer that maps one character into several.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "orbit/runtime/hf_tokenizer.h"

namespace orbit::test::tokenizer_variants {

// tests/data/tokenizers/tinystories-656k/tokenizer.json (the model's own, as bundled), parsed.
inline nlohmann::json tinystories_json() {
  std::ifstream in(std::filesystem::path(ORBIT_TEST_DATA_DIR) / "tokenizers/tinystories-656k/tokenizer.json");
  return nlohmann::json::parse(in);
}

// `j` loaded as a tokenizer.json without a tokenizer_config.json beside it; `name` names it in messages.
inline std::unique_ptr<runtime::HfTokenizer> load_variant(const std::string& name, const nlohmann::json& j) {
  return runtime::parse_hf_tokenizer(j.dump(), "", "tokenizer variant '" + name + "'");
}

// A normalizer that maps a character into several ("e" into "▁h", "\n" into "▁▁") and prepends "▁" after a
// Replace: tokens may then share a character, and a token that ends where the next one starts inside the same
// character leaves no cut there.
inline nlohmann::json several_normalizer() {
  return {{"type", "Sequence"},
          {"normalizers",
           {{{"type", "Replace"}, {"pattern", {{"String", "e"}}}, {"content", "\xE2\x96\x81h"}},
            {{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
            {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}},
            {{"type", "Replace"}, {"pattern", {{"String", "\n"}}}, {"content", "\xE2\x96\x81\xE2\x96\x81"}}}}};
}

}  // namespace orbit::test::tokenizer_variants
