// The scenario harness: shared per-scenario work, the query decode, and one arm end to end.
// The strategies themselves and their spec parser are in repair_strategies.cpp.
#include "orbit/runtime/repair.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <string>

#include "orbit/common/clock.h"
#include "orbit/common/error.h"

namespace orbit::runtime {

namespace {

void check_tokens(const ModelConfig& c, const std::vector<int64_t>& tokens, const std::string& what) {
  ORBIT_CHECK(!tokens.empty(), what << " is empty");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < c.vocab_size, what << ": token " << i << " (" << tokens[i]
                                                                 << ") is outside the vocabulary [0, " << c.vocab_size
                                                                 << ")");
  }
}

void check_chunk(const ModelConfig& c, const ChunkInput& chunk, const std::string& what) {
  const bool has_embeddings = chunk.embeddings.defined();
  ORBIT_CHECK(chunk.tokens.empty() || !has_embeddings, what << ": give token ids or embeddings, not both");
  if (!has_embeddings) {
    check_tokens(c, chunk.tokens, what);
    return;
  }
  ORBIT_CHECK(chunk.embeddings.dim() == 2 && chunk.embeddings.size(0) > 0 && chunk.embeddings.size(1) == c.hidden_size,
              what << ": embeddings must be [n > 0, hidden_size = " << c.hidden_size << "]");
}

}  // namespace

PreparedScenario prepare_scenario(const Model& model, Scenario scenario, const PastKV* context) {
  const ModelConfig& c = model.config();
  int64_t n_c = 0;
  for (std::size_t i = 0; i < scenario.context.size(); ++i) {
    check_chunk(c, scenario.context[i], "context chunk " + std::to_string(i + 1));
    n_c += scenario.context[i].length();
  }
  check_chunk(c, scenario.chunk, "chunk");
  check_tokens(c, scenario.query, "query");
  const int64_t n_b = scenario.chunk.length();
  const int64_t window = n_c + n_b + static_cast<int64_t>(scenario.query.size());
  ORBIT_CHECK(window <= c.max_position_embeddings,
              "the window (context " << n_c << " + chunk " << n_b << " + query " << scenario.query.size() << " = "
                                     << window << " tokens) is longer than the model's limit of "
                                     << c.max_position_embeddings << " positions");

  PreparedScenario p;
  p.model = &model;
  p.context_length = n_c;
  p.chunk_length = n_b;
  // No chunks: num_layers empty layers.
  p.context = context != nullptr ? *context : assemble_context(model, scenario.context);
  ORBIT_CHECK(p.context.length() == n_c, "prepare_scenario: the context KV holds "
                                             << p.context.length() << " positions for " << n_c << " context tokens");
  ORBIT_CHECK(
      static_cast<int64_t>(p.context.layers.size()) == c.num_layers,
      "prepare_scenario: the context KV has " << p.context.layers.size() << " layers, the model " << c.num_layers);
  // B and Q follow the context where conditioned() puts B: from the context's last position + 1.
  const int64_t chunk_start = n_c > 0 ? p.context.positions.max().item<int64_t>() + 1 : 0;
  p.chunk_positions = at::arange(chunk_start, chunk_start + n_b, at::kLong);
  p.query_positions =
      at::arange(chunk_start + n_b, chunk_start + n_b + static_cast<int64_t>(scenario.query.size()), at::kLong);
  check_positions(c, p.query_positions, "prepare_scenario: query positions");
  p.canonical = canonical(model, scenario.chunk);
  const auto start = std::chrono::steady_clock::now();
  p.exact = conditioned(model, scenario.chunk, p.context);
  p.exact_seconds = seconds_since(start);
  p.scenario = std::move(scenario);
  p.exact_logits = decode_query(p, p.exact);
  p.blind_logits = decode_query(p, p.canonical);
  return p;
}

at::Tensor decode_query(const PreparedScenario& prepared, const Content& chunk) {
  ORBIT_CHECK(prepared.model != nullptr, "decode_query: the scenario is not prepared");
  const Model& model = *prepared.model;
  const ModelConfig& c = model.config();
  const int64_t n_c = prepared.context_length, n_b = prepared.chunk_length;
  ORBIT_CHECK(static_cast<int64_t>(chunk.size()) == c.num_layers,
              "decode_query: the chunk has " << chunk.size() << " layers, the model " << c.num_layers);
  c10::InferenceMode guard;
  PastKV past;
  past.layers.reserve(chunk.size());
  for (std::size_t l = 0; l < chunk.size(); ++l) {
    const LayerKV& b = chunk[l];
    ORBIT_CHECK(b.k.defined() && b.v.defined() && b.k.size(0) == n_b && b.v.size(0) == n_b,
                "decode_query: layer " << l << " of the chunk must hold " << n_b << " tokens");
    if (n_c == 0) {
      past.layers.push_back(b);
    } else {
      const LayerKV& ctx = prepared.context.layers[l];
      past.layers.push_back({at::cat({ctx.k, b.k}, 0), at::cat({ctx.v, b.v}, 0)});
    }
  }
  if (n_c == 0) {
    past.positions = prepared.chunk_positions;
  } else {
    const at::Tensor& ctx = prepared.context.positions;  // [T] or an M-RoPE grid [3, T]
    const at::Tensor own =
        ctx.dim() == 2 ? prepared.chunk_positions.unsqueeze(0).expand({ctx.size(0), n_b}) : prepared.chunk_positions;
    past.positions = at::cat({ctx, own}, -1);
  }

  ForwardInput input;
  input.tokens = prepared.scenario.query;
  input.positions = prepared.query_positions;
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  options.return_content = false;
  return model.forward(input, &past, options).logits;
}

ArmResult run_arm(const PreparedScenario& prepared, const RepairStrategy& strategy) {
  ArmResult r;
  r.name = strategy.name();
  r.repair = strategy.repair(prepared);
  const auto start = std::chrono::steady_clock::now();
  r.query_logits = decode_query(prepared, r.repair.content);
  r.decode_seconds = seconds_since(start);
  FidelityInputs in;
  in.exact_content = &prepared.exact;
  in.arm_content = &r.repair.content;
  in.exact_logits = prepared.exact_logits;
  in.blind_logits = prepared.blind_logits;
  in.arm_logits = r.query_logits;
  r.fidelity = measure_fidelity(in);
  r.patch_fraction =
      static_cast<double>(r.repair.cost.patch_bytes) / static_cast<double>(content_bytes(prepared.canonical, 4));
  return r;
}

}  // namespace orbit::runtime
