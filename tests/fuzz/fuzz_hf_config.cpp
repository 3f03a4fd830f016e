// libFuzzer target for a Hugging Face config.json: the loader's steps on the file's text,
// parse_json_input (bounded nesting) then parse_hf_config, must accept the bytes or throw orbit::Error.
// An accepted config must survive the generator's round trip: hf_config_json writes a config.json that
// parse_hf_config reads back to the same config (compared through hf_config_json's output).
#include <cstdint>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "orbit/common/error.h"
#include "orbit/common/json_input.h"
#include "orbit/runtime/loader.h"

namespace rt = orbit::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  rt::ModelConfig config;
  try {
    config = rt::parse_hf_config(orbit::parse_json_input(text, text + size, "config.json"), "config.json");
  } catch (const orbit::Error&) {
    return 0;  // refused with a message
  }
  const nlohmann::json written = rt::hf_config_json(config);
  nlohmann::json rewritten;
  try {
    rewritten = rt::hf_config_json(rt::parse_hf_config(written, "config.json (written back)"));
  } catch (const orbit::Error&) {
    std::abort();  // a config the generator would write no longer loads
  }
  if (rewritten != written) std::abort();
  return 0;
}
