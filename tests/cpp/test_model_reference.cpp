// The runtime's forward pass against an independent reference (docs/ARCHITECTURE.md §9).
//
// The reference below shares nothing with the runtime: it parses the llama2.c `.bin` itself with
// std::ifstream and runs llama2.c's forward one token at a time in plain loops with a per-token KV
// cache, as llama2.c's run.c does (weights float32 as stored, every activation in double):
//
//   x = embed[token]
//   per layer:  xb = rmsnorm(x) ; q, k, v = Wq xb, Wk xb, Wv xb ; rotate q, k (interleaved pairs)
//               cache k, v at this position ; per head h: softmax(q_h · k_{0..t, h/group} / sqrt(hs)) · v
//               x += Wo · attn ; x += W2 (silu(W1 rmsnorm(x)) * W3 rmsnorm(x))
//   logits = Wcls rmsnorm(x)
//
// No torch in the reference path; torch is used only to build the runtime's inputs and read its output.
//
// ATen comes before Catch on purpose: Debian's libtorch is built with glog, whose CHECK macro would
// otherwise replace Catch's CHECK (turning a failed check into an abort).
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/model.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

const char* const kModelPath = ORBIT_MODELS_DIR "/stories260K/stories260K.bin";
// Max |runtime − reference| allowed at any position. The reference is float64; a float32 forward
// cannot do better than its own rounding noise, measured on this model (max over 8 random sequences)
// for a plain float32 numpy forward and a plain float32 torch forward against float64:
//   64 tokens 0.9e-4 / 1.1e-4,   300 tokens 1.0e-4 / 1.2e-4,   512 tokens 1.3e-4 / 1.3e-4.
// So 1e-4 sits on the noise floor; 2.5e-4 leaves margin, and every real mistake is far above it
// (rms eps 1e-6 instead of 1e-5 moves logits by 2e-2; a one-token position gap by > 1e-2).
constexpr double kTolerance = 2.5e-4;
constexpr int64_t kBos = 1;

// ---- reference: llama2.c checkpoint reader -------------------------------------------------------

struct RefConfig {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_size(); }
};

// Row-major matrices: w[out][in] stored as w[out * in_dim + in].
struct RefWeights {
  std::vector<float> token_embedding;                // vocab × dim
  std::vector<std::vector<float>> rms_att, rms_ffn;  // per layer: dim
  std::vector<std::vector<float>> wq, wk, wv, wo;    // dim×dim, kv_dim×dim, kv_dim×dim, dim×dim
  std::vector<std::vector<float>> w1, w2, w3;        // hidden×dim, dim×hidden, hidden×dim
  std::vector<float> rms_final;                      // dim
  std::vector<float> classifier;                     // vocab × dim
};

struct RefModel {
  RefConfig config;
  RefWeights weights;
};

std::vector<float> read_floats(std::ifstream& in, size_t count) {
  std::vector<float> out(count);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(count * sizeof(float)));
  REQUIRE(in.good());
  return out;
}

std::vector<std::vector<float>> read_per_layer(std::ifstream& in, int layers, size_t count) {
  std::vector<std::vector<float>> out;
  for (int l = 0; l < layers; ++l) out.push_back(read_floats(in, count));
  return out;
}

RefModel load_reference(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  int32_t header[7];
  in.read(reinterpret_cast<char*>(header), sizeof(header));
  REQUIRE(in.good());
  RefModel m;
  RefConfig& c = m.config;
  c.dim = header[0];
  c.hidden_dim = header[1];
  c.n_layers = header[2];
  c.n_heads = header[3];
  c.n_kv_heads = header[4];
  c.shared_classifier = header[5] > 0;
  c.vocab_size = std::abs(header[5]);
  c.seq_len = header[6];
  const size_t dim = c.dim, hidden = c.hidden_dim, kv_dim = c.kv_dim(), L = c.n_layers;
  RefWeights& w = m.weights;
  w.token_embedding = read_floats(in, static_cast<size_t>(c.vocab_size) * dim);
  w.rms_att = read_per_layer(in, L, dim);
  w.wq = read_per_layer(in, L, dim * dim);
  w.wk = read_per_layer(in, L, kv_dim * dim);
  w.wv = read_per_layer(in, L, kv_dim * dim);
  w.wo = read_per_layer(in, L, dim * dim);
  w.rms_ffn = read_per_layer(in, L, dim);
  w.w1 = read_per_layer(in, L, hidden * dim);
  w.w2 = read_per_layer(in, L, dim * hidden);
  w.w3 = read_per_layer(in, L, hidden * dim);
  w.rms_final = read_floats(in, dim);
  const size_t rope_table = static_cast<size_t>(c.seq_len) * c.head_size() / 2;
  read_floats(in, 2 * rope_table);  // the two unused RoPE tables
  w.classifier = c.shared_classifier ? w.token_embedding : read_floats(in, c.vocab_size * dim);
  in.peek();
  REQUIRE(in.eof());  // nothing left over: the layout was read exactly
  return m;
}

// ---- reference: llama2.c forward, one token at a time --------------------------------------------
// Weights are the file's float32 values; every activation and accumulator is double, so the reference
// carries no float32 rounding of its own (it agrees with the float64 numpy reference to ~1e-12).

using Vec = std::vector<double>;
using Matrix = std::vector<Vec>;  // [T][vocab] (or [T][width])

void rmsnorm(Vec& out, const Vec& x, const std::vector<float>& weight) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
  for (size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * (scale * x[i]);
}

// out[o] = sum_i w[o * in + i] * x[i]
void matvec(Vec& out, const std::vector<float>& w, const Vec& x) {
  const size_t in_dim = x.size();
  for (size_t o = 0; o < out.size(); ++o) {
    double acc = 0.0;
    for (size_t i = 0; i < in_dim; ++i) acc += w[o * in_dim + i] * x[i];
    out[o] = acc;
  }
}

// Rotates pairs (2i, 2i+1) of every head of `v` by pos * 10000^(-2i/head_size).
void rope_interleaved(Vec& v, int head_size, int64_t pos) {
  for (size_t j = 0; j < v.size(); j += 2) {
    const int i2 = static_cast<int>(j % head_size);  // = 2i within the head
    const double freq = 1.0 / std::pow(10000.0, static_cast<double>(i2) / head_size);
    const double angle = static_cast<double>(pos) * freq;
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = v[j], b = v[j + 1];
    v[j] = a * c - b * s;
    v[j + 1] = a * s + b * c;
  }
}

// Incremental decoder with a per-token KV cache, like run.c's RunState.
class RefRunner {
 public:
  explicit RefRunner(const RefModel& model) : m_(model), c_(model.config) {
    key_cache_.resize(c_.n_layers);
    value_cache_.resize(c_.n_layers);
    pre_rope_keys_.resize(c_.n_layers);
  }

  // Logits for `token` at rotary position `pos`, attending to every token fed before it and itself.
  Vec step(int64_t token, int64_t pos) {
    const int dim = c_.dim, hs = c_.head_size(), kv_dim = c_.kv_dim();
    const int group = c_.n_heads / c_.n_kv_heads;
    Vec x(m_.weights.token_embedding.begin() + token * dim, m_.weights.token_embedding.begin() + (token + 1) * dim);
    Vec xb(dim), xb2(dim), q(dim), k(kv_dim), v(kv_dim), hb(c_.hidden_dim), hb2(c_.hidden_dim);
    for (int l = 0; l < c_.n_layers; ++l) {
      rmsnorm(xb, x, m_.weights.rms_att[l]);
      matvec(q, m_.weights.wq[l], xb);
      matvec(k, m_.weights.wk[l], xb);
      matvec(v, m_.weights.wv[l], xb);
      pre_rope_keys_[l].push_back(k);
      rope_interleaved(q, hs, pos);
      rope_interleaved(k, hs, pos);
      key_cache_[l].push_back(k);
      value_cache_[l].push_back(v);
      const size_t n_ctx = key_cache_[l].size();
      Vec score(n_ctx);
      for (int h = 0; h < c_.n_heads; ++h) {
        const int kvh = h / group;  // GQA: `group` consecutive query heads share one kv head
        double max_score = -INFINITY;
        for (size_t t = 0; t < n_ctx; ++t) {
          double dot = 0.0;
          for (int i = 0; i < hs; ++i) dot += q[h * hs + i] * key_cache_[l][t][kvh * hs + i];
          score[t] = dot / std::sqrt(static_cast<double>(hs));
          max_score = std::max(max_score, score[t]);
        }
        double sum = 0.0;
        for (size_t t = 0; t < n_ctx; ++t) sum += (score[t] = std::exp(score[t] - max_score));
        for (int i = 0; i < hs; ++i) {
          double acc = 0.0;
          for (size_t t = 0; t < n_ctx; ++t) acc += score[t] / sum * value_cache_[l][t][kvh * hs + i];
          xb[h * hs + i] = acc;
        }
      }
      matvec(xb2, m_.weights.wo[l], xb);
      for (int i = 0; i < dim; ++i) x[i] += xb2[i];

      rmsnorm(xb, x, m_.weights.rms_ffn[l]);
      matvec(hb, m_.weights.w1[l], xb);
      matvec(hb2, m_.weights.w3[l], xb);
      for (int i = 0; i < c_.hidden_dim; ++i) hb[i] = hb[i] / (1.0 + std::exp(-hb[i])) * hb2[i];  // silu(w1 x) * w3 x
      matvec(xb, m_.weights.w2[l], hb);
      for (int i = 0; i < dim; ++i) x[i] += xb[i];
    }
    rmsnorm(xb, x, m_.weights.rms_final);
    Vec logits(c_.vocab_size);
    matvec(logits, m_.weights.classifier, xb);
    return logits;
  }

  const Matrix& pre_rope_keys(int layer) const { return pre_rope_keys_[layer]; }
  const Matrix& values(int layer) const { return value_cache_[layer]; }

 private:
  const RefModel& m_;
  const RefConfig& c_;
  std::vector<Matrix> key_cache_, value_cache_, pre_rope_keys_;  // [layer][t][kv_dim]
};

// Reference logits at every position of `tokens`; rotary positions `positions` (default 0, 1, 2, ...).
// Order, not position, decides causality: token t attends to tokens 0..t whatever their positions.
Matrix reference_logits(const RefModel& model, const std::vector<int64_t>& tokens,
                        const std::vector<int64_t>& positions = {}) {
  RefRunner runner(model);
  Matrix out;
  for (size_t t = 0; t < tokens.size(); ++t)
    out.push_back(runner.step(tokens[t], positions.empty() ? static_cast<int64_t>(t) : positions[t]));
  return out;
}

std::vector<int64_t> iota_positions(int64_t first, int64_t count) {
  std::vector<int64_t> out(count);
  for (int64_t i = 0; i < count; ++i) out[i] = first + i;
  return out;
}

// Greedy continuation of `prompt` to `length` tokens, decoded by the reference.
std::vector<int64_t> reference_greedy(const RefModel& model, const std::vector<int64_t>& prompt, size_t length) {
  RefRunner runner(model);
  std::vector<int64_t> tokens = prompt;
  Vec logits;
  for (size_t t = 0; t < prompt.size(); ++t) logits = runner.step(prompt[t], static_cast<int64_t>(t));
  while (tokens.size() < length) {
    tokens.push_back(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tokens.size() < length) logits = runner.step(tokens.back(), static_cast<int64_t>(tokens.size()) - 1);
  }
  return tokens;
}

// Deterministic token ids in [0, vocab): a fixed 64-bit LCG, identical on every platform.
std::vector<int64_t> random_tokens(uint64_t seed, size_t length, int64_t vocab, bool bos_first) {
  std::vector<int64_t> out;
  uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (size_t i = 0; i < length; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out.push_back(static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(vocab)));
  }
  if (bos_first && !out.empty()) out[0] = kBos;
  return out;
}

// ---- comparison helpers ---------------------------------------------------------------------------

const RefModel& reference_model() {
  static const RefModel model = load_reference(kModelPath);
  return model;
}

const orbit::runtime::Model& runtime_model() {
  static const std::unique_ptr<orbit::runtime::Model> model = orbit::runtime::load_model(kModelPath);
  return *model;
}

at::Tensor positions_tensor(const std::vector<int64_t>& positions) {
  return at::tensor(at::ArrayRef<int64_t>(positions), at::kLong);
}

Matrix to_matrix(const at::Tensor& logits) {
  REQUIRE(logits.defined());
  REQUIRE(logits.dim() == 2);
  const at::Tensor cpu = logits.to(at::kCPU, at::kFloat).contiguous();
  Matrix out(cpu.size(0), Vec(cpu.size(1)));
  const float* data = cpu.data_ptr<float>();
  for (int64_t r = 0; r < cpu.size(0); ++r)
    std::copy(data + r * cpu.size(1), data + (r + 1) * cpu.size(1), out[r].begin());
  return out;
}

struct Diff {
  double max_abs = 0.0;
  size_t position = 0;  // row of the largest difference
};

Diff max_abs_diff(const Matrix& a, const Matrix& b) {
  REQUIRE(a.size() == b.size());
  Diff d;
  for (size_t r = 0; r < a.size(); ++r) {
    REQUIRE(a[r].size() == b[r].size());
    for (size_t i = 0; i < a[r].size(); ++i) {
      const double diff = std::abs(a[r][i] - b[r][i]);
      if (std::isnan(diff)) return {INFINITY, r};
      if (diff > d.max_abs) d = {diff, r};
    }
  }
  return d;
}

double g_max_diff_seen = 0.0;  // across every runtime-vs-reference comparison, for the report line

Matrix runtime_logits(const std::vector<int64_t>& tokens, const at::Tensor& positions = {}) {
  orbit::runtime::ForwardInput input;
  input.tokens = tokens;
  input.positions = positions;
  orbit::runtime::ForwardOptions options;
  options.logits = orbit::runtime::LogitsMode::kAll;
  return to_matrix(runtime_model().forward(input, nullptr, options).logits);
}

// Checks the runtime against the reference at every position of `tokens`.
void check_matches_reference(const std::vector<int64_t>& tokens, const std::string& label) {
  const Matrix expected = reference_logits(reference_model(), tokens);
  const Matrix actual = runtime_logits(tokens);
  REQUIRE(actual.size() == tokens.size());
  REQUIRE(actual[0].size() == 512);
  const Diff d = max_abs_diff(actual, expected);
  g_max_diff_seen = std::max(g_max_diff_seen, d.max_abs);
  INFO(label << ": length " << tokens.size() << ", max |runtime - reference| = " << d.max_abs << " at position "
             << d.position);
  CHECK(d.max_abs <= kTolerance);
}

}  // namespace

TEST_CASE("reference reader parses stories260K exactly", "[model][reference][cpu]") {
  const RefModel& m = reference_model();
  CHECK(m.config.dim == 64);
  CHECK(m.config.hidden_dim == 172);
  CHECK(m.config.n_layers == 5);
  CHECK(m.config.n_heads == 8);
  CHECK(m.config.n_kv_heads == 4);
  CHECK(m.config.vocab_size == 512);
  CHECK(m.config.seq_len == 512);
  CHECK(m.config.shared_classifier);
  // A trained model: BOS is followed by a confident, non-degenerate distribution.
  const Vec logits = reference_logits(m, {kBos})[0];
  const double top = *std::max_element(logits.begin(), logits.end());
  const double low = *std::min_element(logits.begin(), logits.end());
  CHECK(std::isfinite(top));
  CHECK(top - low > 5.0);
}

TEST_CASE("runtime config of stories260K", "[model][reference][cpu]") {
  const orbit::runtime::ModelConfig& c = runtime_model().config();
  CHECK(c.arch == orbit::runtime::Arch::kLlama);
  CHECK(c.hidden_size == 64);
  CHECK(c.intermediate_size == 172);
  CHECK(c.num_layers == 5);
  CHECK(c.num_heads == 8);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.vocab_size == 512);
  CHECK(c.max_position_embeddings == 512);
  CHECK(c.rms_norm_eps == Approx(1e-5));
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.attention_bias);
  CHECK(c.rope.layout == orbit::runtime::RopeLayout::kInterleaved);
  CHECK(c.rope.head_dim == 8);
  CHECK(c.rope.rotary_dim == 8);
  CHECK(c.rope.theta == Approx(10000.0));
  CHECK(c.rope.scaling == orbit::runtime::RopeScaling::kNone);
  CHECK(c.source_format == "llama2c");
  CHECK(c.weight_dtype == "float32");
}

TEST_CASE("runtime logits equal the reference at every position", "[model][reference][cpu]") {
  const std::vector<int64_t> fixed = {kBos, 5, 9, 300, 17, 42, 511, 0, 2, 128, 64, 33, 250, 7};
  for (size_t length : {size_t{1}, size_t{7}, size_t{64}, size_t{300}}) {
    std::vector<int64_t> bos_fixed;
    for (size_t i = 0; i < length; ++i) bos_fixed.push_back(fixed[i % fixed.size()]);
    check_matches_reference(bos_fixed, "fixed, BOS first");
    check_matches_reference(random_tokens(1000 + length, length, 512, false),
                            "random ids, seed " + std::to_string(1000 + length));
    check_matches_reference(random_tokens(7 * length, length, 512, true), "random ids after BOS");
  }
  // A full context: the last position the model supports.
  check_matches_reference(random_tokens(99, 512, 512, true), "full 512-token context");
  WARN("max |runtime - reference| over all sequences: " << g_max_diff_seen);
}

TEST_CASE("greedy text from the reference matches the runtime", "[model][reference][cpu]") {
  const RefModel& ref = reference_model();
  const std::vector<int64_t> text = reference_greedy(ref, {kBos}, 120);
  // Model-like text: greedy decoding is not stuck on a single token.
  std::vector<int64_t> distinct(text);
  std::sort(distinct.begin(), distinct.end());
  CHECK(std::unique(distinct.begin(), distinct.end()) - distinct.begin() > 10);
  check_matches_reference(text, "greedy continuation of BOS");

  // And the runtime's own argmax reproduces the continuation wherever the choice is not a near-tie.
  const Matrix actual = runtime_logits(text);
  for (size_t t = 0; t + 1 < text.size(); ++t) {
    const Vec& row = actual[t];
    const auto best = std::max_element(row.begin(), row.end()) - row.begin();
    Vec sorted(row);
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted[0] - sorted[1] < 1e-3) continue;
    INFO("position " << t);
    CHECK(best == text[t + 1]);
  }
}

TEST_CASE("embeddings input gives the same logits as token ids", "[model][reference][cpu]") {
  const orbit::runtime::Model& model = runtime_model();
  const RefModel& ref = reference_model();
  const std::vector<int64_t> tokens = random_tokens(4242, 40, 512, true);

  const Matrix embeds = to_matrix(model.embed(tokens));
  REQUIRE(embeds.size() == tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    const Vec row(ref.weights.token_embedding.begin() + tokens[t] * 64,
                  ref.weights.token_embedding.begin() + (tokens[t] + 1) * 64);
    CHECK(embeds[t] == row);  // a row copy: bit-exact
  }

  orbit::runtime::ForwardInput input;
  input.embeddings = model.embed(tokens);
  orbit::runtime::ForwardOptions options;
  options.logits = orbit::runtime::LogitsMode::kAll;
  const Matrix from_embeddings = to_matrix(model.forward(input, nullptr, options).logits);
  const Matrix from_tokens = runtime_logits(tokens);
  CHECK(max_abs_diff(from_embeddings, from_tokens).max_abs <= 1e-6);
  const Diff d = max_abs_diff(from_embeddings, reference_logits(ref, tokens));
  INFO("embeddings vs reference: " << d.max_abs << " at position " << d.position);
  CHECK(d.max_abs <= kTolerance);
}

TEST_CASE("explicit positions rotate like the reference; bad positions and ids throw", "[model][reference][cpu]") {
  const RefModel& ref = reference_model();
  const std::vector<int64_t> tokens = random_tokens(31337, 24, 512, true);
  const int64_t T = static_cast<int64_t>(tokens.size());

  // Explicit 0..T-1 is the default.
  CHECK(max_abs_diff(runtime_logits(tokens, at::arange(T, at::kLong)), runtime_logits(tokens)).max_abs <= 1e-6);

  // RoPE is relative: a uniform shift leaves attention unchanged, and the runtime at positions 100..
  // agrees with the reference there (and hence with the unshifted reference).
  const Matrix shifted = runtime_logits(tokens, at::arange(100, 100 + T, at::kLong));
  const Diff same = max_abs_diff(shifted, reference_logits(ref, tokens, iota_positions(100, T)));
  INFO("shifted positions vs reference: " << same.max_abs << " at position " << same.position);
  CHECK(same.max_abs <= kTolerance);
  CHECK(max_abs_diff(shifted, reference_logits(ref, tokens)).max_abs <= kTolerance);

  // A gap in the positions changes relative distances: the runtime follows the reference's gapped
  // rotation, which is far from the contiguous one (a runtime ignoring positions would fail here).
  std::vector<int64_t> gapped = iota_positions(0, T);
  for (int64_t t = 10; t < T; ++t) gapped[t] += 37;
  const Matrix with_gap = runtime_logits(tokens, positions_tensor(gapped));
  const Diff gap = max_abs_diff(with_gap, reference_logits(ref, tokens, gapped));
  INFO("gapped positions vs reference: " << gap.max_abs << " at position " << gap.position);
  CHECK(gap.max_abs <= kTolerance);
  CHECK(max_abs_diff(with_gap, reference_logits(ref, tokens)).max_abs > 1e-2);

  // The last position the model supports works; one past it throws.
  CHECK(max_abs_diff(runtime_logits(tokens, at::arange(512 - T, 512, at::kLong)),
                     reference_logits(ref, tokens, iota_positions(512 - T, T)))
            .max_abs <= kTolerance);
  CHECK_THROWS_AS(runtime_logits(tokens, at::arange(512 - T + 1, 513, at::kLong)), orbit::Error);
  CHECK_THROWS_AS(runtime_logits(tokens, at::full({T}, 512, at::kLong)), orbit::Error);
  CHECK_THROWS_AS(runtime_logits(tokens, at::full({T}, -1, at::kLong)), orbit::Error);
  CHECK_THROWS_AS(runtime_logits({kBos, 512}), orbit::Error);
  CHECK_THROWS_AS(runtime_logits({kBos, -1}), orbit::Error);
  CHECK_THROWS_AS(runtime_model().embed({512}), orbit::Error);
}

TEST_CASE("content channel and past KV match the reference's cache", "[model][reference][cpu]") {
  const orbit::runtime::Model& model = runtime_model();
  const RefModel& ref = reference_model();
  const std::vector<int64_t> tokens = random_tokens(2024, 48, 512, true);
  const size_t split = 30;

  RefRunner runner(ref);
  Matrix expected;
  for (size_t t = 0; t < tokens.size(); ++t) expected.push_back(runner.step(tokens[t], static_cast<int64_t>(t)));

  // The prefix's content channel (k before RoPE, v) equals the reference's per-token cache.
  const std::vector<int64_t> prefix(tokens.begin(), tokens.begin() + split);
  orbit::runtime::ForwardInput first;
  first.tokens = prefix;
  orbit::runtime::ForwardOptions options;
  options.logits = orbit::runtime::LogitsMode::kAll;
  const orbit::runtime::ForwardResult head = model.forward(first, nullptr, options);
  REQUIRE(head.content.size() == 5);
  for (int l = 0; l < 5; ++l) {
    const std::vector<int64_t> kv_shape = {int64_t(split), 4, 8};
    REQUIRE(head.content[l].k.sizes().vec() == kv_shape);
    REQUIRE(head.content[l].v.sizes().vec() == kv_shape);
    const Matrix k = to_matrix(head.content[l].k.reshape({int64_t(split), 32}));
    const Matrix v = to_matrix(head.content[l].v.reshape({int64_t(split), 32}));
    const Matrix ref_k(runner.pre_rope_keys(l).begin(), runner.pre_rope_keys(l).begin() + split);
    const Matrix ref_v(runner.values(l).begin(), runner.values(l).begin() + split);
    INFO("layer " << l);
    CHECK(max_abs_diff(k, ref_k).max_abs <= kTolerance);
    CHECK(max_abs_diff(v, ref_v).max_abs <= kTolerance);
  }

  // Feeding the rest after that past reproduces the reference's logits for the suffix.
  orbit::runtime::PastKV past;
  past.layers = head.content;
  past.positions = at::arange(int64_t(split), at::kLong);
  orbit::runtime::ForwardInput rest;
  rest.tokens.assign(tokens.begin() + split, tokens.end());
  const Matrix tail = to_matrix(model.forward(rest, &past, options).logits);
  const Matrix ref_tail(expected.begin() + split, expected.end());
  const Diff d = max_abs_diff(tail, ref_tail);
  INFO("suffix after past KV vs reference: " << d.max_abs << " at suffix position " << d.position);
  CHECK(d.max_abs <= kTolerance);
}

}  // namespace ORBIT_TEST_FILE
