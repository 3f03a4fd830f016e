// The repair strategies of repair.h and their spec parser. Each is a small immutable object; the
// accounting each reports is stated in repair.h.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "orbit/common/clock.h"
#include "orbit/common/error.h"
#include "orbit/runtime/repair.h"

namespace orbit::runtime {

namespace {

using Clock = std::chrono::steady_clock;

ForwardInput chunk_forward_input(const ChunkInput& chunk) {
  ForwardInput in;
  if (chunk.embeddings.defined()) {
    in.embeddings = chunk.embeddings;
  } else {
    in.tokens = chunk.tokens;
  }
  return in;
}

Content recompute_in_context(const PreparedScenario& p, const at::Tensor& indices) {
  ForwardInput input = chunk_forward_input(p.scenario.chunk);
  input.positions = p.chunk_positions;
  return recompute_tokens(*p.model, input, p.context, p.canonical, indices);
}

// Repair that keeps the canonical: exact only when there is no context to absorb.
Repair keep_canonical(const PreparedScenario& p) {
  Repair r;
  r.content = p.canonical;
  r.cost.exact = p.context_length == 0;
  return r;
}

Repair full_reprefill(const PreparedScenario& p) {
  Repair r;
  const auto start = Clock::now();
  r.content = conditioned(*p.model, p.scenario.chunk, p.context);
  r.cost.seconds = seconds_since(start);
  r.cost.forward_tokens = static_cast<double>(p.chunk_length);
  r.cost.exact = true;
  return r;
}

// ---- re-prefill, blind, prefix -----------------------------------------------------------------

class Reprefill final : public RepairStrategy {
 public:
  std::string name() const override { return "reprefill"; }
  void check(const PreparedScenario&) const override {}
  Repair repair(const PreparedScenario& p) const override { return full_reprefill(p); }
};

class Blind final : public RepairStrategy {
 public:
  std::string name() const override { return "blind"; }
  void check(const PreparedScenario&) const override {}
  Repair repair(const PreparedScenario& p) const override { return keep_canonical(p); }
};

class PrefixCache final : public RepairStrategy {
 public:
  std::string name() const override { return "prefix"; }
  void check(const PreparedScenario&) const override {}
  // The cached entry for B was computed behind the empty prefix: a hit only when the context is empty.
  Repair repair(const PreparedScenario& p) const override {
    return p.context_length == 0 ? keep_canonical(p) : full_reprefill(p);
  }
};

// ---- token recompute: CacheBlend, first-k ------------------------------------------------------

class CacheBlend final : public RepairStrategy {
 public:
  explicit CacheBlend(double ratio) : ratio_(ratio) {}
  std::string name() const override {
    std::ostringstream s;
    s << "cacheblend:" << ratio_;
    return s.str();
  }
  void check(const PreparedScenario&) const override {}

  Repair repair(const PreparedScenario& p) const override {
    check(p);
    const int64_t n = p.chunk_length;
    // ⌈ratio·n⌉, robust to 0.15·20 = 3.0000000000000004.
    const int64_t count = std::min<int64_t>(n, static_cast<int64_t>(std::ceil(ratio_ * n - 1e-9)));
    if (count == 0) return keep_canonical(p);
    c10::InferenceMode guard;
    Repair r;
    const auto start = Clock::now();
    at::Tensor selected;
    if (count == n) {
      selected = at::arange(n, at::kLong);
    } else {
      ForwardInput input = chunk_forward_input(p.scenario.chunk);
      input.positions = p.chunk_positions;
      double probe_tokens = 0;
      selected = cacheblend_select(*p.model, input, p.context, p.canonical, count, &probe_tokens);
      r.cost.forward_tokens += probe_tokens;
    }
    r.content = recompute_in_context(p, selected);
    r.cost.seconds = seconds_since(start);
    r.cost.forward_tokens += static_cast<double>(count);
    r.cost.exact = count == n || p.context_length == 0;
    return r;
  }

 private:
  double ratio_;
};

class FirstK final : public RepairStrategy {
 public:
  explicit FirstK(int64_t k) : k_(k) {}
  std::string name() const override { return "firstk:" + std::to_string(k_); }
  void check(const PreparedScenario&) const override {}

  Repair repair(const PreparedScenario& p) const override {
    const int64_t count = std::min(k_, p.chunk_length);
    if (count == 0) return keep_canonical(p);
    Repair r;
    const auto start = Clock::now();
    r.content = recompute_in_context(p, at::arange(count, at::kLong));
    r.cost.seconds = seconds_since(start);
    r.cost.forward_tokens = static_cast<double>(count);
    r.cost.exact = count == p.chunk_length || p.context_length == 0;
    return r;
  }

 private:
  int64_t k_;
};

// ---- feature patches: exact-signature and orbit --------------------------------------------------

struct Ranks {
  int64_t k = 0;
  int64_t v = 0;
};

std::string ranks_text(const Ranks& r) {
  return r.k == r.v ? std::to_string(r.k) : std::to_string(r.k) + "/" + std::to_string(r.v);
}

// A stored tensor's row width D: H_kv·d for GQA/MHA keys and values (for MLA, d_rope for k and r_kv for v).
int64_t row_width(const at::Tensor& t) { return t.numel() / std::max<int64_t>(1, t.size(0)); }

void check_ranks(const std::string& name, const Ranks& r, const PreparedScenario& p) {
  const LayerKV& layer = p.canonical.front();
  for (const auto& [rank, width, what] : {std::tuple<int64_t, int64_t, const char*>{r.k, row_width(layer.k), "key"},
                                          {r.v, row_width(layer.v), "value"}}) {
    const int64_t limit = std::min(p.chunk_length, width);
    ORBIT_CHECK(rank <= limit, "strategy '" << name << "': " << what << " rank " << rank << " is larger than min(n_B = "
                                            << p.chunk_length << ", D = " << width << ") = " << limit);
  }
}

PatchOptions patch_options(const Ranks& r, bool randomized) {
  PatchOptions o;
  o.rank_k = r.k;
  o.rank_v = r.v;
  o.method = randomized ? SvdMethod::kRandomized : SvdMethod::kExact;
  return o;
}

// Serves `patch` on the canonical into `r`: zero forwards, one GEMM per layer and tensor (timed), the patch's
// bytes, and exact only when there is no context to absorb.
void serve_patch(const PreparedScenario& p, const Patch& patch, Repair& r) {
  const auto start = Clock::now();
  r.content = apply_patch(*p.model, p.canonical, patch);
  r.cost.seconds = seconds_since(start);
  r.cost.patch_bytes = patch.bytes(4);
  r.cost.exact = p.context_length == 0;
}

class PatchRepair final : public RepairStrategy {
 public:
  PatchRepair(Ranks ranks, bool deep, bool randomized) : ranks_(ranks), deep_(deep), randomized_(randomized) {}
  std::string name() const override {
    return "patch:" + ranks_text(ranks_) + (deep_ ? ":deep" : "") + (randomized_ ? ":rand" : "");
  }
  void check(const PreparedScenario& p) const override { check_ranks(name(), ranks_, p); }

  Repair repair(const PreparedScenario& p) const override {
    check(p);
    Repair r;
    // Forming: the conditioned forward (shared, already run by prepare_scenario) plus the factorisation.
    const auto start = Clock::now();
    const Content delta = deficit(p.exact, p.canonical);
    PatchOptions options = patch_options(ranks_, randomized_);
    if (deep_) options.first_layer = choose_first_layer(delta, 0.9);
    const Patch patch = form_patch(*p.model, delta, options);
    r.cost.forming_seconds = p.exact_seconds + seconds_since(start);
    r.cost.forming_tokens = static_cast<double>(p.chunk_length);
    serve_patch(p, patch, r);
    return r;
  }

 private:
  Ranks ranks_;
  bool deep_;
  bool randomized_;
};

// Orderings of K antecedents for the orbit, as index lists into the scenario's context. Exhaustive (all
// K!) up to OrbitOptions::exhaustive_up_to, else `sampled_orderings` distinct seeded shuffles. With
// `hold_out_identity` the scenario's own order (0, 1, …, K−1) is never among them.
std::vector<std::vector<int64_t>> orbit_orderings(int64_t k, const OrbitOptions& o, bool hold_out_identity) {
  std::vector<int64_t> identity(static_cast<std::size_t>(k));
  for (int64_t i = 0; i < k; ++i) identity[static_cast<std::size_t>(i)] = i;
  std::vector<std::vector<int64_t>> out;
  if (k <= o.exhaustive_up_to) {
    std::vector<int64_t> perm = identity;
    do {
      if (!hold_out_identity || perm != identity) out.push_back(perm);
    } while (std::next_permutation(perm.begin(), perm.end()));
    return out;
  }
  // K > exhaustive_up_to ≥ 1 means K! > sampled_orderings for every practical setting; the draw below
  // still stops after a bounded number of tries.
  std::mt19937_64 rng(o.seed);
  std::set<std::vector<int64_t>> seen;
  if (hold_out_identity) seen.insert(identity);
  std::vector<int64_t> perm = identity;
  for (int64_t tries = 0; static_cast<int64_t>(out.size()) < o.sampled_orderings && tries < 100 * o.sampled_orderings;
       ++tries) {
    for (int64_t i = k - 1; i > 0; --i) {  // Fisher–Yates with an explicit draw (portable across libraries)
      std::swap(perm[static_cast<std::size_t>(i)],
                perm[static_cast<std::size_t>(rng() % static_cast<uint64_t>(i + 1))]);
    }
    if (seen.insert(perm).second) out.push_back(perm);
  }
  return out;
}

// The orbit patch evaluated on the scenario's order. reuse.h's form_orbit_patch holds out an ordering of
// its own choosing; the protocol here needs the *scenario's* ordering held out, so the mean deficit is
// taken over the orderings above with reuse.h's mean_deficit (the computation form_orbit_patch shares).
class OrbitRepair final : public RepairStrategy {
 public:
  OrbitRepair(Ranks ranks, bool include_own_order, bool randomized)
      : ranks_(ranks), include_own_order_(include_own_order), randomized_(randomized) {}
  std::string name() const override {
    return "orbit:" + ranks_text(ranks_) + (include_own_order_ ? ":all" : "") + (randomized_ ? ":rand" : "");
  }
  void check(const PreparedScenario& p) const override { check_ranks(name(), ranks_, p); }

  Repair repair(const PreparedScenario& p) const override {
    check(p);
    c10::InferenceMode guard;
    Repair r;
    const std::vector<ChunkInput>& context = p.scenario.context;
    const auto k = static_cast<int64_t>(context.size());
    // With fewer than two antecedents the orbit is the scenario's order alone: nothing can be held out.
    const bool hold_out = !include_own_order_ && k >= 2;
    const std::vector<std::vector<int64_t>> orderings = orbit_orderings(k, OrbitOptions{}, hold_out);
    const auto start = Clock::now();
    const Content mean = mean_deficit(*p.model, p.scenario.chunk, p.canonical, {}, context, orderings);
    const Patch patch = form_patch(*p.model, mean, patch_options(ranks_, randomized_));
    r.cost.forming_seconds = seconds_since(start);
    r.cost.forming_tokens =
        static_cast<double>(orderings.size()) * static_cast<double>(p.context_length + p.chunk_length);
    serve_patch(p, patch, r);
    return r;
  }

 private:
  Ranks ranks_;
  bool include_own_order_;
  bool randomized_;
};

// ---- spec parser ---------------------------------------------------------------------------------

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = text.find(sep, start);
    out.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  ORBIT_FAIL("repair strategy '" << spec << "': " << why << "; valid specs:\n" << strategy_spec_help());
}

int64_t parse_count(const std::string& spec, const std::string& text, int64_t min_value, const char* what) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || value < min_value) {
    bad_spec(spec, std::string(what) + " '" + text + "' is not an integer >= " + std::to_string(min_value));
  }
  return value;
}

Ranks parse_ranks(const std::string& spec, const std::string& text) {
  const std::vector<std::string> parts = split(text, '/');
  if (parts.size() > 2) bad_spec(spec, "ranks are M or MK/MV");
  Ranks r;
  r.k = parse_count(spec, parts[0], 1, "rank");
  r.v = parts.size() == 2 ? parse_count(spec, parts[1], 1, "value rank") : r.k;
  return r;
}

}  // namespace

std::string strategy_spec_help() {
  return "  reprefill                   B prefilled in context (the ceiling)\n"
         "  blind                       canonical relocated, no repair\n"
         "  prefix                      prefix/radix cache: hit only behind the empty prefix, else re-prefill\n"
         "  cacheblend:R                CacheBlend: recompute the top R (0..1) of B's tokens by KV deviation\n"
         "  firstk:K                    EPIC/MPIC: recompute B's first K tokens in context\n"
         "  patch:M[/MV][:deep][:rand]  rank-M patch formed on this context (MV: separate value rank)\n"
         "  orbit:M[/MV][:all][:rand]   orbit patch over orderings of the context chunks (own order held out)\n";
}

std::unique_ptr<RepairStrategy> make_strategy(const std::string& spec) {
  const std::vector<std::string> parts = split(spec, ':');
  const std::string& kind = parts[0];
  const std::size_t params = parts.size() - 1;
  if (kind == "reprefill" || kind == "blind" || kind == "prefix") {
    if (params != 0) bad_spec(spec, "'" + kind + "' takes no parameter");
    if (kind == "reprefill") return std::make_unique<Reprefill>();
    if (kind == "blind") return std::make_unique<Blind>();
    return std::make_unique<PrefixCache>();
  }
  if (kind == "cacheblend") {
    if (params != 1) bad_spec(spec, "cacheblend takes one ratio, e.g. cacheblend:0.15");
    char* end = nullptr;
    const double ratio = std::strtod(parts[1].c_str(), &end);
    if (parts[1].empty() || *end != '\0' || !(ratio >= 0.0 && ratio <= 1.0)) {
      bad_spec(spec, "ratio '" + parts[1] + "' is not a number in [0, 1]");
    }
    return std::make_unique<CacheBlend>(ratio);
  }
  if (kind == "firstk") {
    if (params != 1) bad_spec(spec, "firstk takes one token count, e.g. firstk:16");
    return std::make_unique<FirstK>(parse_count(spec, parts[1], 0, "token count"));
  }
  if (kind == "patch" || kind == "orbit") {
    if (params < 1) bad_spec(spec, kind + " needs a rank, e.g. " + kind + ":32");
    const Ranks ranks = parse_ranks(spec, parts[1]);
    bool deep = false, randomized = false, all = false;
    for (std::size_t i = 2; i < parts.size(); ++i) {
      const std::string& m = parts[i];
      bool* slot = m == "rand"                        ? &randomized
                   : (m == "deep" && kind == "patch") ? &deep
                   : (m == "all" && kind == "orbit")  ? &all
                                                      : nullptr;
      if (slot == nullptr) bad_spec(spec, "unknown modifier '" + m + "' for " + kind);
      if (*slot) bad_spec(spec, "modifier '" + m + "' given twice");
      *slot = true;
    }
    if (kind == "patch") return std::make_unique<PatchRepair>(ranks, deep, randomized);
    return std::make_unique<OrbitRepair>(ranks, all, randomized);
  }
  bad_spec(spec, "unknown strategy '" + kind + "'");
}

// ---- token-selective recompute on explicit inputs ----------------------------------------------------

Content recompute_tokens(const Model& model, const ForwardInput& input, const PastKV& context, const Content& canonical,
                         const at::Tensor& indices, const std::function<void(int64_t layer)>& before_layer,
                         int64_t window_len) {
  ForwardOptions options;
  options.logits = LogitsMode::kNone;
  options.rope_window_len = window_len;
  options.recompute = indices;
  options.cached = canonical;
  options.before_layer = before_layer;
  return model.forward(input, &context, options).content;
}

at::Tensor cacheblend_select(const Model& model, const ForwardInput& input, const PastKV& context,
                             const Content& canonical, int64_t count, double* probe_forward_tokens,
                             const std::function<void(int64_t layer)>& before_layer, int64_t window_len) {
  c10::InferenceMode guard;
  ORBIT_CHECK(!canonical.empty(), "cacheblend_select: empty canonical");
  const int64_t n = canonical.front().k.size(0);
  ORBIT_CHECK(count >= 0 && count <= n, "cacheblend_select: count " << count << " outside [0, " << n << "]");
  if (probe_forward_tokens != nullptr) *probe_forward_tokens = 0;
  if (count == n) return at::arange(n, at::kLong);
  if (count == 0) return at::empty({0}, at::kLong);
  const int64_t num_layers = model.config().num_layers;
  // Layer 0's KV is a function of each token's own embedding, identical in and out of context; the
  // first layer whose KV sees the context is layer 1.
  const int64_t probe = num_layers >= 2 ? 1 : 0;
  ForwardOptions options;
  options.logits = LogitsMode::kNone;
  options.max_layers = probe + 1;
  options.before_layer = before_layer;
  options.rope_window_len = window_len;
  const Content in_context = model.forward(input, &context, options).content;
  const LayerKV& a = in_context[static_cast<std::size_t>(probe)];
  const LayerKV& b = canonical[static_cast<std::size_t>(probe)];
  const at::Tensor deviation = (a.k - b.k).pow(2).sum({1, 2}) + (a.v - b.v).pow(2).sum({1, 2});  // [n]
  // Stable ranking: larger deviation first, ties to the earlier token (so a 1-layer model takes the
  // first tokens).
  std::vector<int64_t> order(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  const at::Tensor dev = deviation.to(at::kDouble).contiguous();
  const double* d = dev.data_ptr<double>();
  std::stable_sort(order.begin(), order.end(), [d](int64_t x, int64_t y) { return d[x] > d[y]; });
  order.resize(static_cast<std::size_t>(count));
  std::sort(order.begin(), order.end());
  if (probe_forward_tokens != nullptr) {
    *probe_forward_tokens = static_cast<double>((probe + 1) * n) / static_cast<double>(num_layers);
  }
  return at::tensor(at::ArrayRef<int64_t>(order), at::kLong);
}

}  // namespace orbit::runtime
