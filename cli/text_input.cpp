#include "text_input.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"
#include "orbit/common/json_input.h"
#include "orbit/runtime/loader.h"

namespace orbit::cli {

std::unique_ptr<runtime::Tokenizer> model_tokenizer(const Args& args, const std::string& model_path,
                                                    int64_t vocab_size) {
  if (auto given = args.get("--tokenizer")) return runtime::load_tokenizer(*given, vocab_size);
  const std::string found = runtime::find_tokenizer(model_path, vocab_size);
  ORBIT_CHECK(!found.empty(), "text needs a tokenizer and "
                                  << model_path << " has none beside it (looked for tok" << vocab_size
                                  << ".bin and tokenizer.bin beside a llama2.c file, tokenizer.json in a Hugging "
                                  << "Face directory): pass --tokenizer FILE (llama2.c .bin or tokenizer.json) or "
                                  << "token ids");
  return runtime::load_tokenizer(found, vocab_size);
}

int64_t model_vocab_size(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool given_config = fs::path(model_path).filename() == "config.json";  // load_model reads it so
  if (given_config || fs::is_directory(model_path, ec)) {
    const fs::path config = given_config ? fs::path(model_path) : fs::path(model_path) / "config.json";
    ORBIT_CHECK(given_config || fs::exists(config, ec), runtime::no_hf_config_message(model_path));
    check_regular_input(config.string(), "config.json (a Hugging Face model directory needs one)");
    std::ifstream in(config);
    ORBIT_CHECK(in.good(), config.string() << ": cannot open (a Hugging Face model directory needs config.json)");
    std::ostringstream text;
    text << in.rdbuf();
    const nlohmann::json j = parse_json_input(text.str(), config.string());
    ORBIT_CHECK(j.is_object() && j.contains("vocab_size") && j["vocab_size"].is_number_integer(),
                config.string() << ": field 'vocab_size': missing or not an integer");
    return j["vocab_size"].get<int64_t>();
  }
  check_regular_input(model_path, "the model (a llama2.c .bin file or a Hugging Face directory)");
  // The header checked as loading checks it: a file that is no checkpoint is named as one, not sent looking
  // for a tokenizer of its bytes' vocabulary size (tok1647262324.bin for a text file).
  return runtime::llama2c_vocab_size(model_path);
}

}  // namespace orbit::cli
