// `orbit fidelity`: repair strategies side by side on one window [context chunks, chunk B, query].
//
//   orbit fidelity --model PATH --chunk 4,5,6 [--context "1,2,3;7,8,9"] [--query 10,11]
//                  [--strategies reprefill,blind,patch:8,...] [--json]
//
// The context is exact (prefilled); B is reused through each strategy; the query is decoded over
// [context, B] and compared with re-prefill of the whole window (runtime/include/orbit/runtime/repair.h,
// fidelity.h). Default query: the single token 1 (BOS in llama2.c vocabularies), a next-token probe that
// reads the whole window; pass --query for a longer probe. Default strategies: reprefill, blind, prefix,
// cacheblend:0.15, firstk:16, patch:8, patch:32, with patch ranks capped at min(n_B, D).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "device_args.h"
#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/repair.h"
#include "text_input.h"

namespace orbit::cli {

using nlohmann::json;
namespace rt = orbit::runtime;

namespace {

const char* kFidelityUsage =
    "usage: orbit fidelity --model PATH (--chunk IDS | --chunk-text TEXT) [--context \"IDS;IDS\" | --context-text "
    "\"TEXT|TEXT\"]\n"
    "                      [--query IDS | --query-text TEXT] [--strategies S,...] [--tokenizer FILE] [--json]\n"
    "  Repair strategies for a reused chunk B side by side on one window [context chunks, B, query], each\n"
    "  against a re-prefill of the window: KL, eta, top-1, flip-recover, forward tokens, patch bytes, time.\n"
    "  --chunk IDS            B's token ids, comma-separated\n"
    "  --context \"A;B\"       earlier chunks: ids, chunks separated by ';' (prefilled exactly); \"\" is no\n"
    "                         context, as leaving it out (B starts the window), likewise --context-text \"\"\n"
    "  --query IDS            the probe read after B (default: 1)\n"
    "  --chunk-text, --context-text, --query-text   the same as text, encoded by the model's tokenizer;\n"
    "                         context chunks are separated by '|'; the window's first chunk gets BOS\n"
    "  --tokenizer FILE       a tokenizer (llama2.c .bin or tokenizer.json) instead of the one beside the model\n"
    "                         (with the -text arguments)\n"
    "  --strategies S,...     reprefill, blind, prefix, cacheblend:R, firstk:K, patch:M[/MV][:deep][:rand],\n"
    "                         orbit:M[/MV][:all][:rand] (default: reprefill, blind, prefix, cacheblend:0.15,\n"
    "                         firstk:16, patch:8, patch:32, their ranks capped at min(n_B, D), D the narrower\n"
    "                         of the key and value rows' widths; a rank given here above that is refused);\n"
    "                         firstk:0 and cacheblend:0 recompute nothing (the blind KV, for ablations)\n"
    "  --device D             cpu (default), cuda or cuda:N;  --dtype T   float32 (default), bfloat16, float16\n"
    "  --json                 print the report as JSON\n";

void check_ids(const std::vector<int64_t>& ids, int64_t vocab, const std::string& what) {
  ORBIT_CHECK(!ids.empty(), what << " is empty");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ORBIT_CHECK(ids[i] >= 0 && ids[i] < vocab,
                what << ": item " << i << " (" << ids[i] << ") is outside the vocabulary [0, " << vocab << ")");
  }
}

// "1,2,3;7,8,9" -> two chunks; "" -> none. Every chunk must hold at least one token.
std::vector<rt::ChunkInput> parse_context(const std::string& text, int64_t vocab) {
  std::vector<rt::ChunkInput> chunks;
  if (text.empty()) return chunks;
  std::size_t start = 0;
  while (true) {
    const std::size_t semi = text.find(';', start);
    const std::string piece = text.substr(start, semi == std::string::npos ? std::string::npos : semi - start);
    const std::string what = "--context: chunk " + std::to_string(chunks.size() + 1);
    ORBIT_CHECK(!piece.empty(), what << " is empty (chunks are separated by ';', e.g. 1,2,3;7,8,9)");
    rt::ChunkInput chunk;
    chunk.tokens = parse_int_list(piece, what);
    check_ids(chunk.tokens, vocab, what);
    chunks.push_back(std::move(chunk));
    if (semi == std::string::npos) break;
    start = semi + 1;
  }
  return chunks;
}

// Patch ranks are capped at min(n_B, D) (D: the narrower of the key and value row widths).
std::vector<std::string> default_strategies(int64_t chunk_length, int64_t width) {
  std::vector<std::string> specs{"reprefill", "blind", "prefix", "cacheblend:0.15", "firstk:16"};
  const int64_t limit = std::min(chunk_length, width);
  for (int64_t rank : {int64_t{8}, int64_t{32}}) {
    const std::string spec = "patch:" + std::to_string(std::min(rank, limit));
    if (std::find(specs.begin(), specs.end(), spec) == specs.end()) specs.push_back(spec);
  }
  return specs;
}

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

std::string fixed(double x, const char* format) {
  if (std::isnan(x)) return "n/a";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, x);
  return buffer;
}

}  // namespace

namespace {

// The tokens of --chunk / --query and the context chunks of --context, as ids or as text (`tokenizer` set).
// Text pieces continue the window (no BOS), except the first context chunk, which starts it.
rt::Scenario read_scenario(const Args& args, const rt::ModelConfig& c, const rt::Tokenizer* tokenizer) {
  auto encode = [&](const std::string& t, bool bos, const std::string& what) {
    ORBIT_CHECK(!t.empty(), what << " is empty");
    return tokenizer->encode(t, bos);
  };
  rt::Scenario scenario;
  // An empty --context or --context-text is no context, as no argument is (B then starts the window, with BOS).
  const bool context_text = args.has("--context-text") && !args.required("--context-text").empty();
  const bool context_ids = args.has("--context") && !args.required("--context").empty();
  if (args.has("--chunk-text")) {
    scenario.chunk.tokens = encode(args.required("--chunk-text"), !context_text && !context_ids, "--chunk-text");
  } else {
    const std::string chunk_text = args.required("--chunk");
    ORBIT_CHECK(!chunk_text.empty(), "--chunk is empty");
    scenario.chunk.tokens = parse_int_list(chunk_text, "--chunk");
  }
  scenario.query = args.has("--query-text") ? encode(args.required("--query-text"), false, "--query-text")
                                            : parse_int_list(args.get("--query").value_or("1"), "--query");
  if (context_text) {
    const std::string all = args.required("--context-text");
    std::size_t start = 0;
    while (true) {
      const std::size_t bar = all.find('|', start);
      rt::ChunkInput chunk;
      chunk.tokens =
          encode(all.substr(start, bar == std::string::npos ? std::string::npos : bar - start),
                 scenario.context.empty(), "--context-text: chunk " + std::to_string(scenario.context.size() + 1));
      scenario.context.push_back(std::move(chunk));
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
  } else {
    scenario.context = parse_context(args.get("--context").value_or(""), c.vocab_size);
  }
  check_ids(scenario.chunk.tokens, c.vocab_size, "--chunk");
  check_ids(scenario.query, c.vocab_size, "--query");
  return scenario;
}

std::vector<std::unique_ptr<rt::RepairStrategy>> parse_strategies(const std::vector<std::string>& specs) {
  std::vector<std::unique_ptr<rt::RepairStrategy>> out;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string& spec = specs[i];
    ORBIT_CHECK(std::find(specs.begin(), specs.begin() + static_cast<std::ptrdiff_t>(i), spec) ==
                    specs.begin() + static_cast<std::ptrdiff_t>(i),
                "fidelity: argument '--strategies' lists '" << spec
                                                            << "' twice; each strategy is one row of the "
                                                               "report");
    try {
      out.push_back(rt::make_strategy(spec));
    } catch (const orbit::Error& e) {
      ORBIT_FAIL("--strategies: " << e.what());
    }
  }
  return out;
}

// The arms' rows and the scenario as one JSON report (--json).
json fidelity_json(const rt::Model& model, const rt::PreparedScenario& prepared, const std::vector<rt::ArmResult>& arms,
                   int64_t kv_bytes, double kl_blind, int64_t blind_flips) {
  json rows = json::array();
  for (const rt::ArmResult& a : arms) {
    const rt::Fidelity& f = a.fidelity;
    const rt::RepairCost& cost = a.repair.cost;
    json layers = json::array();
    for (std::size_t l = 0; l < f.kv_error.size(); ++l) {
      layers.push_back({{"layer", l}, {"k", number_or_null(f.kv_error[l].k)}, {"v", number_or_null(f.kv_error[l].v)}});
    }
    rows.push_back({{"strategy", a.name},
                    {"kl", f.kl},
                    {"eta", number_or_null(f.eta)},
                    {"top1", f.top1},
                    {"flip_recover",
                     {{"flips", f.flips.flips},
                      {"recovered", f.flips.recovered},
                      {"fraction", number_or_null(f.flips.fraction())}}},
                    {"forward_tokens", cost.forward_tokens},
                    {"forming_tokens", cost.forming_tokens},
                    {"patch_bytes", cost.patch_bytes},
                    {"patch_fraction", a.patch_fraction},
                    {"seconds", cost.seconds},
                    {"forming_seconds", cost.forming_seconds},
                    {"decode_seconds", a.decode_seconds},
                    {"exact", cost.exact},
                    {"kv_error", layers}});
  }
  std::vector<int64_t> context_lengths;
  for (const auto& chunk : prepared.scenario.context) context_lengths.push_back(chunk.length());
  return {{"model", model.origin()},
          {"fingerprint", model.fingerprint()},
          {"context_chunk_lengths", context_lengths},
          {"context_length", prepared.context_length},
          {"chunk_length", prepared.chunk_length},
          {"query_length", prepared.scenario.query.size()},
          {"chunk_kv_bytes", kv_bytes},
          {"kl_blind", kl_blind},
          {"blind_flips", blind_flips},
          {"strategies", rows}};
}

// The arms as a table on stdout.
void print_fidelity(const rt::Model& model, const rt::PreparedScenario& prepared,
                    const std::vector<rt::ArmResult>& arms, int64_t kv_bytes, double kl_blind, int64_t blind_flips) {
  std::printf("model %s: context %lld tokens in %zu chunks, chunk %lld tokens, query %zu tokens\n",
              model.origin().c_str(), (long long)prepared.context_length, prepared.scenario.context.size(),
              (long long)prepared.chunk_length, prepared.scenario.query.size());
  std::printf(
      "vs. re-prefill of the window: KL(blind) = %.4g nats, blind flips the argmax at %lld of %zu positions; "
      "B's KV = %lld bytes (float32)\n\n",
      kl_blind, (long long)blind_flips, prepared.scenario.query.size(), (long long)kv_bytes);
  std::printf("%-22s %11s %8s %6s %10s %9s %9s %8s %10s %10s %5s\n", "strategy", "KL", "eta", "top1", "flip-rec",
              "fwd-tok", "form-tok", "patch/KV", "repair-s", "form-s", "exact");
  for (const rt::ArmResult& a : arms) {
    const rt::Fidelity& f = a.fidelity;
    const rt::RepairCost& cost = a.repair.cost;
    const std::string flips =
        f.flips.flips == 0 ? "0/0" : std::to_string(f.flips.recovered) + "/" + std::to_string(f.flips.flips);
    std::printf("%-22s %11.4e %8s %6.3f %10s %9.1f %9.0f %7.1f%% %10.4f %10.4f %5s\n", a.name.c_str(), f.kl,
                fixed(f.eta, "%.3f").c_str(), f.top1, flips.c_str(), cost.forward_tokens, cost.forming_tokens,
                100.0 * a.patch_fraction, cost.seconds, cost.forming_seconds, cost.exact ? "yes" : "no");
  }
  std::printf(
      "\nKL: mean next-token KL(re-prefill || arm) over query positions; eta = 1 - KL/KL(blind); "
      "flip-rec: recovered/flipped argmaxes;\nfwd-tok: per-reuse forward tokens on B (l of L layers = l/L); "
      "form-tok: one-time forming forward tokens; patch/KV: stored bytes / B's KV bytes.\n");
}

}  // namespace

int run_fidelity(int argc, char** argv, int first) {
  const Args args("fidelity",
                  ArgSpec{{"--model", "--context", "--chunk", "--query", "--strategies", "--context-text",
                           "--chunk-text", "--query-text", "--tokenizer", "--device", "--dtype"},
                          {"--json"},
                          kFidelityUsage},
                  argc, argv, first);
  const std::string model_path = args.required("--model");
  for (const char* name : {"chunk", "context", "query"}) {
    ORBIT_CHECK(!(args.has(std::string("--") + name) && args.has(std::string("--") + name + "-text")),
                "fidelity: give --" << name << " or --" << name << "-text, not both");
  }
  const bool text = args.has("--chunk-text") || args.has("--context-text") || args.has("--query-text");
  ORBIT_CHECK(text || !args.has("--tokenizer"),
              "fidelity: argument '--tokenizer' goes with --chunk-text, --context-text or --query-text (token ids "
              "need no tokenizer)");
  const std::unique_ptr<rt::Model> model = rt::load_model(model_path, compute_target(args));
  const std::unique_ptr<rt::Tokenizer> tokenizer =
      text ? model_tokenizer(args, model_path, model->config().vocab_size) : nullptr;
  rt::Scenario scenario = read_scenario(args, model->config(), tokenizer.get());

  // Given strategies are parsed before any forward, so a bad spec fails fast.
  const std::optional<std::string> given = args.get("--strategies");
  std::vector<std::unique_ptr<rt::RepairStrategy>> strategies;
  if (given) strategies = parse_strategies(split_commas(*given));
  const rt::PreparedScenario prepared = rt::prepare_scenario(*model, std::move(scenario));
  if (!given) {
    const rt::LayerKV& layer = prepared.canonical.front();
    const int64_t width = std::min(layer.k.numel(), layer.v.numel()) / prepared.chunk_length;
    strategies = parse_strategies(default_strategies(prepared.chunk_length, width));
  }
  for (const auto& s : strategies) {
    try {
      s->check(prepared);
    } catch (const orbit::Error& e) {
      ORBIT_FAIL("--strategies: " << e.what());
    }
  }
  std::vector<rt::ArmResult> arms;
  for (const auto& s : strategies) arms.push_back(rt::run_arm(prepared, *s));

  const int64_t kv_bytes = rt::content_bytes(prepared.canonical, 4);
  const int64_t blind_flips =
      rt::flip_recover(prepared.exact_logits, prepared.blind_logits, prepared.blind_logits).flips;
  const double kl_blind = rt::mean_kl(prepared.exact_logits, prepared.blind_logits);
  if (args.flag("--json")) {
    std::cout << fidelity_json(*model, prepared, arms, kv_bytes, kl_blind, blind_flips).dump(2) << "\n";
  } else {
    print_fidelity(*model, prepared, arms, kv_bytes, kl_blind, blind_flips);
  }
  return 0;
}

}  // namespace orbit::cli
