// Shared pieces of the binding experiments (bench_binding): converting task chunks to runtime inputs,
// answer-row fidelity, and pooled statistics.
//
// Measures are taken on the answer row: the query is one question token Q(kind, obj) and the answer is the
// argmax of the logits at it (the last row). Pooled over items:
//   η             1 − Σ KL(exact‖arm) / Σ KL(exact‖blind)   (pooled, so items where blind reuse is already
//                 exact do not divide by ~0)
//   flip-recover  over items where argmax(blind) ≠ argmax(exact), the fraction where argmax(arm) == argmax(exact)
//   accuracy      argmax(arm) == the task's answer token
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "binding_task.h"
#include "orbit/runtime/fidelity.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/repair.h"
#include "orbit/runtime/reuse.h"

namespace orbit::bench::binding {

namespace bd = orbit::binding;
namespace rt = orbit::runtime;
using json = nlohmann::json;

inline rt::ChunkInput to_input(const bd::Chunk& c) {
  rt::ChunkInput in;
  in.tokens = c.tokens;
  return in;
}

inline std::vector<rt::ChunkInput> to_inputs(const std::vector<bd::Chunk>& chunks) {
  std::vector<rt::ChunkInput> out;
  for (const bd::Chunk& c : chunks) out.push_back(to_input(c));
  return out;
}

inline rt::Scenario to_scenario(const std::vector<bd::Chunk>& context, const bd::Chunk& chunk, const bd::Question& q) {
  rt::Scenario s;
  s.context = to_inputs(context);
  s.chunk = to_input(chunk);
  s.query = q.tokens;
  return s;
}

inline at::Tensor last_row(const at::Tensor& logits) { return logits.narrow(0, logits.size(0) - 1, 1); }
inline int64_t argmax_last(const at::Tensor& logits) { return last_row(logits).argmax(-1).item<int64_t>(); }

// Pooled fidelity and accuracy of one arm over items.
struct Pool {
  double kl_arm = 0, kl_blind = 0;
  int64_t flips = 0, recovered = 0, correct = 0, agree = 0, n = 0;

  // exact/blind/arm: logits whose rows are compared (all rows, or pass last_row() for the answer row only).
  void add(const at::Tensor& exact, const at::Tensor& blind, const at::Tensor& arm, int64_t answer = -1) {
    kl_arm += rt::mean_kl(exact, arm) * static_cast<double>(exact.size(0));
    kl_blind += rt::mean_kl(exact, blind) * static_cast<double>(exact.size(0));
    const rt::FlipRecover f = rt::flip_recover(exact, blind, arm);
    flips += f.flips;
    recovered += f.recovered;
    agree += static_cast<int64_t>(std::lround(rt::top1_agreement(exact, arm) * static_cast<double>(exact.size(0))));
    if (answer >= 0) correct += argmax_last(arm) == answer;
    n += exact.size(0);
  }
  double eta() const { return kl_blind > 0 ? 1.0 - kl_arm / kl_blind : std::numeric_limits<double>::quiet_NaN(); }
  json to_json() const {
    auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
    return {{"eta", num(eta())},
            {"kl", n ? kl_arm / static_cast<double>(n) : 0.0},
            {"kl_blind", n ? kl_blind / static_cast<double>(n) : 0.0},
            {"flips", flips},
            {"recovered", recovered},
            {"flip_recover", flips ? json(static_cast<double>(recovered) / static_cast<double>(flips)) : json(nullptr)},
            {"top1", n ? static_cast<double>(agree) / static_cast<double>(n) : 0.0},
            {"accuracy", n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0},
            {"n", n}};
  }
};

// Content with rows `rows` (int64 [R]) of every layer taken from `source`, the rest from `base`.
inline rt::Content mix_rows(const rt::Content& base, const rt::Content& source, const at::Tensor& rows) {
  rt::Content out;
  for (size_t l = 0; l < base.size(); ++l) {
    out.push_back({base[l].k.clone().index_copy_(0, rows, source[l].k.index_select(0, rows)),
                   base[l].v.clone().index_copy_(0, rows, source[l].v.index_select(0, rows))});
  }
  return out;
}

// Patch options for a rank on this model: the key rank is capped at the key width (MLA k_pe is narrow).
inline rt::PatchOptions patch_options(const rt::Model& model, int64_t rank, int64_t n) {
  rt::PatchOptions o;
  const int64_t dk = model.config().content_k_shape().width(), dv = model.config().content_v_shape().width();
  o.rank_k = std::min({rank, dk, n});
  o.rank_v = std::min({rank, dv, n});
  return o;
}

// "patch:M" or, where keys are narrower than M, "patch:MK/MV".
inline std::string patch_spec(const rt::Model& model, int64_t rank, const std::string& suffix = "") {
  const int64_t dk = model.config().content_k_shape().width(), dv = model.config().content_v_shape().width();
  const int64_t mk = std::min(rank, dk), mv = std::min(rank, dv);
  return "patch:" + (mk == mv ? std::to_string(mk) : std::to_string(mk) + "/" + std::to_string(mv)) + suffix;
}

// The experiments (each returns its JSON section and prints a table).
struct Settings {
  int n = 200;            // probes per kind
  int reorder_sets = 16;  // sets per K
  int window_cases = 100;
  int recall_cases = 60;
  uint64_t seed = 2024;
  std::vector<int64_t> ranks{1, 2, 4, 8, 16, 32};  // B has 34 rows: rank 34 is exact by construction
};

json run_reuse_experiments(const rt::Model& model, const std::string& name, const Settings& s);
json run_window_experiments(const rt::Model& model, const std::string& name, const Settings& s);
json run_stories_experiment(const rt::Model& model, const Settings& s);

}  // namespace orbit::bench::binding
