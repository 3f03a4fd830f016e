// The fidelity model: the next-token KL (against a re-prefill of the same window) that serving one chunk
// instance approximately adds, predicted from plan metadata alone. It sits beside the cost model
// (cost_model.h): the cost model says what an action costs, this one what it loses, and the planner picks
// per instance the cheapest action whose loss fits a policy's per-step KL budget.
//
// Every approximate action has one feature f in [0, 1] describing how far its KV is from the exact one,
// scaled by the instance's recency weight w = length / (tokens from its first position to the window's
// end) (recency_weight below: 1 for the last instance). An instance's error reaches the next token
// through the attention it receives, and a causal LM attends most to what is recent: a short turn at
// the tail outweighs a long page far back, which a plain share of the window's tokens misses.
//
//   keep        f = Σ over the operations since it was formed of keep_change(delta, gap): the tokens
//               removed or inserted before it (delta) over delta plus the tokens between the latest
//               change and it (gap), capped at 1: the share of what it attended to, from the change on,
//               that changed (removal / insertion). Linear, not steeper: an instance spreads its attention
//               over the span before it far more evenly than the recency of a probe's attention suggests.
//               Measured with `orbit replay --attribute` on generated web traces, the tail screenshot's KV
//               change² / s after a 32-token removal 88 tokens back was 0.2 against a share of 0.22, and
//               with a cubed share the budget held on 79% of the probed steps of 18 held-out traces
//               A reorder counts what it moves from behind the instance to before it as an insertion and what
//               it moves from before it to behind it as a removal (antecedents.h)
//   blind       f = 1 (the canonical alone; its whole context is unseen)
//   orbit       f = 1 (an orbit patch: the mean over orderings applied to one ordering; also a kept instance
//               whose antecedents were reordered, the same set in another order: alone, or on top of its
//               keep loss where tokens were also removed or inserted before it since it was formed)
//   stale       f = the divergence of the stale patch's context from the current one. Calibrated on two
//               patterns: the chunk's predecessor replaced (formed behind [A, X], used behind [A, Y]), and a
//               recall (formed behind [P, A], used at the end of [P, A, X, Y]), which loses about half as
//               much per unit of divergence; the fit lies between them
//   truncated   f = the share of the deficit's energy the patch's factors leave out (runtime::Patch::
//               residual, recorded when the patch is formed): an exact-context patch at less than full
//               rank. A deficit's spectrum falls off fast, so rank 16 of 32 typically leaves 9e-4..8e-3
//               of it out, far less than half; where the residual is unknown (a patch formed by another
//               process, or still queued) truncation_stand_in(rank share) below stands in for it
//   first-k     f = 1 − k / n (tokens left canonical)
//   cacheblend  f = 1 − r (tokens left canonical, after the deviation-ranked selection)
//
//   predicted KL = coefficient[kind] · f · w · g(s / s_ref),   g(r) = r^0.4 for r ≤ 1, r above
//
// s is the chunk's sensitivity (runtime::Patch::sensitivity: ‖Δ‖² / ‖conditioned KV‖² of a patch formed
// for it, known once one is): how much its KV depends on what precedes it at all. s_ref is the
// calibration chunks' (geometric mean). On stories260K (bench/fidelity/README.md) the agent traces'
// documents, which start afresh ("Once upon a time..."), have s ~1e-3; text sampled from the model, which
// continues its context, ~1e-2; uniform random ids ~3e-2. A chunk more sensitive than the reference is
// charged in proportion (r): the energy of its KV's error under a given change of context scales with s,
// and a next-token KL is quadratic in a small logit error, linear in that energy. Below the reference the
// factor falls only as r^0.4, between the slopes of log(KL / feature) on log s measured there (blind 0.29,
// keep 0.69): a low s, measured once for one context, is weaker evidence that a chunk is safe to reuse
// than a high one is that it is not (over-prediction costs forwards, under-prediction fidelity). g is
// clamped to [1/8, 64]. A live turn's s is measured the same way after its first prefill behind a context
// (its tokens forwarded alone in the background: the deficit's share of its KV in context), since turns
// differ as much as chunks do: measured with `orbit replay --attribute`, a turn of 5 to 8 tokens of text
// sampled from the model moved its KV by 7% to 10% when the turn before it was evicted, a 22-token turn of
// the agent traces by 0.6%. A turn not measured yet uses factor 1; a chunk nothing has measured (never
// patched: a window's first chunk, formed at position 0) is priced at the largest patch sensitivity the
// engine has measured on its model (the planner's PlanEnv::sensitivity_prior), factor 1 before any: its own
// sensitivity is as likely as its neighbours' to be far from the reference (tinystories-656k's patched
// chunks measure 9-25x s_ref, and the first chunk's loss followed them, not the reference).
//
// A kept instance's prediction is recomputed from its current f and w at every plan (never accumulated
// from the previous plan's), plus what its own serving action left (coefficient · f of that action, per
// unit weight, carried with the instance).
//
// A kept instance formed exactly with nothing before it (the window's first, at position 0, holding its
// attention sink: a BOS, a system prompt's first rows) and now behind content (a chunk admitted or recalled
// in front of it) is served blind, kept or relocated (the same KV), and predicted kDisplacedStartFactor times
// the blind loss at its recency weight (below); a first-k or CacheBlend recompute of it leaves its other
// tokens with that KV, and their residual (the loss of the tokens left canonical) carries the same factor.
//
// Exact actions (form, prefill, canonical at position 0, exact full-rank patch) predict 0. Coefficients
// come from measured deficits (FidelitySample: a measured KL with its f·s) by least squares through the
// origin per kind; kinds without samples keep the defaults (what Engine::calibrate() fits on the bundled
// stories260K). The keep samples remove a chunk behind a kept first piece, as agents do (a system prompt
// stays); a removal of the window's very first tokens takes the attention sink with it and loses more
// than this predicts. On the shipped agent traces the predictions err high (replay's pred/meas: 1.6x to
// 9x), on the random-token traces low.
//
// A measured correction (FidelityCorrection below) scales every prediction: where the engine's self-checks
// (Window::idle) measured more loss than the model predicted, scale() > 1 makes every later plan see its
// approximate actions as that much more lossy, so a budget buys exact actions sooner.
//
// Thread-safety: an immutable value; const methods may be called concurrently (FidelityCorrection: a plain
// value its owner guards).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace orbit::planner {

// kShortfall: dynamic-NTK content read in a window of another length than it was formed in (shortfall_feature
// below); priced by predict_shortfall, calibrated only on models with dynamic-NTK RoPE.
// kQuantized: stored KV read back from int8 rows (quantized below).
enum class Loss { kKeep = 0, kBlind, kOrbit, kStale, kTruncated, kFirstK, kCacheBlend, kShortfall, kQuantized };
inline constexpr int kLossKinds = 9;
const char* loss_name(Loss kind) noexcept;  // "keep", "blind", ...

// The two features the planner and the calibration share (so a fitted coefficient means the same in both).
// recency_weight: length / tokens_to_end, tokens_to_end = the tokens from the instance's first position
// to the window's end (its own included); 0 when either is 0.
double recency_weight(int64_t length, int64_t tokens_to_end) noexcept;
inline constexpr double kRecencyExponent = 3.0;
// keep_change: delta / (delta + gap), in [0, 1] (0 when delta is 0); a reorder (no tokens removed or
// inserted, another order) is the orbit loss, not this.
double keep_change(double delta_tokens, double gap_tokens) noexcept;
// The truncated feature of a patch whose residual is unknown: (1 − rank / full rank)^6. On the deficits
// the calibration measures on stories260K it errs high up to three quarters of the full rank (rank 16 of
// 32: 1.6e-2 against measured residuals of at most 8e-3) and may err low above (rank 24: 2.4e-4
// against up to 5e-4), where the loss is negligible either way.
double truncation_stand_in(double rank, double full_rank) noexcept;

// What fresh KV reads of approximate KV: an instance forwarded now (a new turn at the tail) behind kept,
// approximate instances is exact in itself and predicted to lose nothing, yet its KV is computed over their
// error and the next query reads it as much as its own weight says. Each fresh instance j passes a share
// of its weight on to every instance i before it, in proportion to len_i / (start_j - start_i): j's
// attention spread over what precedes it with recency (its neighbours most), normalised over i < j.
//   weight_i += kReadThrough · Σ_j weight_j · share_ij      (capped at 1)
// Measured on bindings/python/examples/tool_loop.py without hints (default policy, seeds 16-23): the
// tail turn forwarded behind a trim measured up to 6e-3 nats alone where the window predicted 2.4e-5 in
// all; 170 of 192 steps held the 3e-3 budget at 0.27x the prefix cache's forward tokens. Uniform shares
// (len_i / start_j) bought 180 of 192 at 0.33x with a factor 0.3, 188 at 0.38x with 1; these recency
// shares 187 at 0.31x with 0.3 (the factor chosen), 189 at 0.38x with 1. On seeds never used while
// choosing it (100-111): 275 of 288 at 0.30x (265 at 0.27x without).
inline constexpr double kReadThrough = 0.3;
// `weights` (one per instance, in window order) with the read-through shares of the instances with
// fresh[i] set added (the formula above); lengths in tokens. Throws orbit::Error naming the argument when the
// three sizes differ.
std::vector<double> add_read_through(const std::vector<double>& weights, const std::vector<int64_t>& lengths,
                                     const std::vector<bool>& fresh, double factor = kReadThrough);

// What the window's tail reads by content (WindowPolicy::content_weight): a causal LM's next token reads
// far-back text that repeats what it has just read (a name, a tool call, a quoted page) whatever its
// distance, which the recency weight misses and the last query's attention (WindowPolicy::attention_weight)
// sees only if that query read it too. The reader is the window's last `reader_tokens` positions; its units
// are token bigrams (consecutive ids within one instance). Each distinct reader bigram u that also occurs
// before the reader attends to those occurrences evenly, with mass 1 / occ(u) (a bigram seen once before is
// a pointer; a common one carries little), normalised by the number of distinct reader bigrams:
//   share_i = (1 / |R|) · Σ_{u in R} occ_i(u) / occ(u)²      (Σ_i share_i ≤ 1)
// occ counts only positions before the reader, so the reader's own instances get 0 for their last tokens.
// `tokens` has one entry per instance in window order (null: no token ids, e.g. input embeddings, which
// neither read nor are read here); `lengths` their positions (an instance's ids are its last positions when
// the two differ). Throws orbit::Error naming the argument when the sizes differ or reader_tokens < 0.
inline constexpr int64_t kContentReaderTokens = 32;
std::vector<double> content_shares(const std::vector<const std::vector<int64_t>*>& tokens,
                                   const std::vector<int64_t>& lengths, int64_t reader_tokens = kContentReaderTokens);

// Dynamic-NTK RoPE's shortfall (docs/ARCHITECTURE.md §7, "The window position limit"). Under Hugging Face's
// "dynamic" scaling the rotary base grows with the window's length n past the anchor L:
// base(n) = base · scale(n)^(d/(d−2)), scale(n) = max(1, factor·n/L − factor + 1). Keys are rotated exactly
// when read, but an instance's content past layer 0 came through attention at the base of the window it was
// formed in (its `formed window`), so read in a window of another length it is not a re-prefill's. The loss,
// measured by tests/cpp/test_reuse_dynamic ("[.measure]": a 16-token chunk formed at N − s behind its
// context, read by an 8-token query at N), grows as the square of the change in log scale:
//   feature = (ln scale(read window) − ln scale(formed window))²
//   predicted KL = coefficient(kShortfall) · feature · recency weight      (FidelityModel::predict_shortfall)
// The default coefficient (kShortfallCoefficient) was fitted (geometric mean of measured / (feature · weight)) on
// stories260K's means over seeds 1-3, factors 2 and 8, N = 128 and 256, s = 1..32: measured / predicted 0.24-0.53
// at factor 2 and 1.2-4.6 at factor 8 there. Another model loses far less or more: tinystories-656k (heads twice as
// wide, each frequency moves less) 0.002-0.11 of it. Engine::calibrate_fidelity measures it per model (kind
// kShortfall: calibrate_fidelity.cpp's shortfall arm, the same window test_reuse_dynamic measures) and the fitted
// coefficient replaces the default whole, not blended halfway (kCalibrationWeight says why). Past s = 32 the square
// over-predicts (a chunk formed at the anchor and read at 4x: 4-25x), where the loss is far past any budget either
// way.
struct DynamicNtk {
  int64_t anchor = 0;  // L, tokens (0: the model has no dynamic-NTK RoPE)
  double factor = 1.0;
  bool active() const noexcept { return anchor > 0 && factor > 1.0; }
};
// scale(n) above; 1 when not active or n <= anchor.
double dynamic_ntk_scale(const DynamicNtk& rope, int64_t window) noexcept;
// The feature above; 0 when `rope` is not active or either window is <= 0 (unknown). Symmetric: content
// formed in a longer window than it is read in is as far off.
double shortfall_feature(const DynamicNtk& rope, int64_t formed_window, int64_t read_window) noexcept;
inline constexpr double kShortfallCoefficient = 0.29;

// Stored KV read back from int8 rows (EngineOptions::cold_tier = "int8"; a canonical, a prefix cache's conditioned
// KV or rows kept for exact reuse, read from disk): every value carries a rounding error, and the next token reads
// it through the instance's attention as it reads any other error of its KV. The feature is that error's energy as
// a share of the KV's (store/blob_format.h kQuantizationErrorAttr: ~2.9e-5 on stories260K's canonicals, ~2.4e-5 on
// tinystories-656k's; a blob not read yet is priced at the largest its store has read, 5e-5 before any):
//   predicted KL = coefficient(kQuantized) · error share · recency weight       (no sensitivity factor: the error
//                                                                                does not depend on the context)
// on the instance's rows left as read (a recompute's share of its tokens is formed anew). The default was measured
// with windows of 1, 2 and 4 TinyStories paragraphs read from an int8 store (the first as the canonical, the rest
// blind) against the same windows read from an exact engine, a 3-token query each: the least-squares fit through
// the origin is 2.3 on both bundled models (seeds 0-4; measured / predicted per window 0.03 to 12, median 1.7);
// 4 covers 25 of those 30 windows, and 27 of 30 on seeds 5-9 (not used to choose it), the largest miss 5.9e-4
// nats. Engine::calibrate_fidelity measures it per model (calibrate_fidelity.cpp's quantized arm: a chunk behind
// its context read back from int8 rows, against the same rows exact), blended halfway like the other kinds.
inline constexpr double kQuantizedCoefficient = 4.0;

// How far Engine::calibrate moves the fidelity model from the defaults (the bundled stories260K's fit) toward
// its fit on the engine's own model, in log space (FidelityModel::blend): halfway. The calibration's windows
// (two to four short pieces of sampled text) carry a model's scale, not the traces' structure, and neither
// end predicts another model's agent traces as the defaults predict stories260K's (median measured /
// predicted KL on the probed steps 0.06-0.12 there). Chosen on tinystories-656k's development traces (the 7
// converted real runs and generated seeds 601-602; bench/fidelity/README.md): the defaults held the 3e-3
// budget on every probed step at 0.885x / 0.866x the radix cache's critical tokens, the full fit on 594 of
// 602 and 557 of 587, halfway on every step at 0.819x / 0.723x, three quarters on 599 of 602.
// Not kShortfall: its fit is taken whole (FidelityModel::with_coefficient_of). Its calibration window is the
// one the planner prices (a chunk formed at N − s behind its exact context in one continuous text, read at N),
// and its default is another model's loss: on tinystories-656k anchored at 32 (factor 4) the fit is 4.2e-3,
// 70x below it, and still predicts test_reuse_dynamic_answers' conversation 50-1000x high (measured / predicted
// 0.0008-0.02). Halfway (3.5e-2) would price that conversation's kept first turn at 2.2e-2 on turn 2, 7x the
// 3e-3 budget (2.6e-3 with the whole fit), so the plan would re-prefill it as with the default.
inline constexpr double kCalibrationWeight = 0.5;

// The displaced start (above): the window's first instance, formed alone at position 0, kept behind a chunk
// admitted or recalled in front of it. Its first rows were formed as the window's start (the sink every later
// query attends to, whatever its distance); behind content the window then has two, and the next token loses
// far more than a blind canonical elsewhere. Measured per instance (Window.loss_by_instance: an up-to-8-token
// query, mean over its rows) against the blind prediction at the instance's recency weight, a chunk admitted in
// front of the first of 3, 5 or 9 chunks and a turn: on seeds 1-3 (chosen on) tinystories-656k 10-65x on
// TinyStories-like text (its first chunk with BOS), 1.3-77x on random ids, stories260K 0.003-80x and 0.004-0.8x:
// 64 covers 34 of 36, the other two within 1.3x. On seeds 4-8 (held out) 2.8-317x, 1.6-63x, 0.09-15x and
// 0.004-3.8x: 51 of 59 covered; the 8 misses are tinystories-656k text, where 64x still prices 4 of them past
// the 3e-3 budget (a budgeted plan re-forms the chunk), 3 measured under 4e-4 and one 3.2e-3 (predicted 2.2e-3).
// It over-prices stories260K's random ids, where re-forming the chunk costs only its tokens.
// A recompute of the displaced start (first-k: 2 or 4 tokens; CacheBlend: 15%, 30%, 50%; seeds 1-6, a recall in
// front of the first of 3 chunks and a turn): at 1x and the reference sensitivity it measured 6.9x (median) to
// 22x tinystories-656k text, 3.5x to 250x random ids, 1.0x to 26x stories260K text, 1.1x to 3.7x random ids its
// prediction; with the worst measured sensitivity as the chunk's prior (above) the factor it needs is at most
// 1.0, 20, 35 and 0.4: 64 covers them, so the recompute's residual takes the factor too.
inline constexpr double kDisplacedStartFactor = 64.0;

inline constexpr double kSensitivityExponent = 0.4;  // g(r) below the reference sensitivity
inline constexpr double kMinSensitivityFactor = 0.125;
inline constexpr double kMaxSensitivityFactor = 64.0;
// keep_change's exponent: 1, the plain share (see keep above); the recency weight keeps kRecencyExponent.
inline constexpr double kKeepChangeExponent = 1.0;

// One measurement: serving some instances approximately by `kind` gave next-token KL `kl`, and the
// features summed over those instances (Σ f·w·(s/s_ref)^0.4, the sensitivity factor taken against the
// reference the samples are fitted with) were `feature`.
struct FidelitySample {
  Loss kind = Loss::kKeep;
  double feature = 0;
  double kl = 0;
};

class FidelityModel {
 public:
  FidelityModel();  // the defaults
  // Least squares through the origin per kind over `samples` (kinds without a sample with feature > 0
  // keep the default), with `reference_sensitivity` the s_ref the samples' features were scaled against
  // (> 0; <= 0 keeps the default). Throws orbit::Error naming the sample index on a negative or
  // non-finite field.
  static FidelityModel fit(const std::vector<FidelitySample>& samples, double reference_sensitivity = 0);

  // `from` moved toward `to` by `weight` in log space: every coefficient and the reference sensitivity
  // become from^(1 − weight) · to^weight; a kind counts as fitted where `to` fitted it; scale 1. Throws
  // orbit::Error naming `weight` unless it is in [0, 1].
  static FidelityModel blend(const FidelityModel& from, const FidelityModel& to, double weight);
  // This model with `kind`'s coefficient and fitted flag taken from `other`.
  FidelityModel with_coefficient_of(Loss kind, const FidelityModel& other) const;

  double coefficient(Loss kind) const { return coef_[static_cast<std::size_t>(kind)]; }
  bool fitted(Loss kind) const { return fitted_[static_cast<std::size_t>(kind)]; }
  double reference_sensitivity() const { return reference_sensitivity_; }
  // g(sensitivity / reference) above: r^kSensitivityExponent for r <= 1, r above, clamped to
  // [kMinSensitivityFactor, kMaxSensitivityFactor]; 1 when sensitivity < 0 (unknown).
  double sensitivity_factor(double sensitivity) const;
  // scale() · coefficient(kind) · feature · share · sensitivity_factor(sensitivity), with feature and share
  // clamped to [0, 1].
  double predict(Loss kind, double feature, double share, double sensitivity = -1) const;
  // scale() · coefficient(kShortfall) · feature · share (share clamped to [0, 1], feature to >= 0): dynamic-NTK
  // content read in a window of another length than it was formed in (shortfall_feature above).
  double predict_shortfall(double feature, double share) const;
  // The measured correction every prediction is multiplied by (1 = the model as fitted).
  double scale() const { return scale_; }
  // This model with scale() = `scale` (finite, > 0; throws orbit::Error otherwise).
  FidelityModel scaled(double scale) const;
  // "keep 3.1e-02 (fitted), blind 8.0e-02 (default), ..., s_ref 1.2e-02" (", correction x2.40" when scaled);
  // shortfall and quantized are named only when fitted (only a dynamic-NTK model's calibration measures the
  // first; a calibration measures the second).
  std::string describe() const;

 private:
  std::array<double, kLossKinds> coef_{};
  std::array<bool, kLossKinds> fitted_{};
  double reference_sensitivity_ = 0;
  double scale_ = 1.0;
};

// The engine's correction of its fidelity model from self-checks: each check (Window::idle) measures the
// KL a window's approximate KV carried on a probe against an exact recompute and compares it with what the
// model predicted for that window. factor() = exp(the largest log(measured / predicted) among the last
// kRecentChecks checks counted), clamped to [1, kMaxFactor]:
//   - the largest, not an average: the budget bounds every step, not the mean, so the correction has to
//     cover the model's worst recent miss. The misses are heavy-tailed: on the Python tool loop
//     (bindings/python/examples/tool_loop.py before it prepared its next list; seeds 0-3) an exponential moving average
//     of the log ratio (half way up, a twentieth down) kept 75 of 96 steps within the budget, the largest of the last 8
//     checks 86; on seeds 4-7, not used to choose it, 74 and 80;
//   - over the last kRecentChecks only, so a miss ages out as the content the agent works on changes and
//     the planner does not stay more careful than the checks since then justify;
//   - at least 1, so checks that found the model pessimistic never make the planner less careful than
//     the fitted model (a lucky probe, where the approximated rows happen not to matter, would otherwise
//     loosen every later plan; over-prediction only costs forwards, under-prediction costs fidelity);
//   - at most kMaxFactor, so one probe on a window whose prediction was next to nothing cannot make every
//     approximation look prohibitive (64x the default model's keep loss still leaves tail-end keeps of
//     short turns affordable under the default budget).
// A check where both the measured and the predicted KL are below kNegligibleKl says nothing (both agree
// the loss is negligible) and is not counted. The prediction is compared unscaled: the window's predicted
// KL divided by the factor the plans were made with, so the ratios describe the model, not the correction.
class FidelityCorrection {
 public:
  static constexpr double kMaxFactor = 64.0;
  static constexpr std::size_t kRecentChecks = 8;
  static constexpr double kNegligibleKl = 1e-5;  // nats
  // Records one check; false (nothing changed) when it says nothing (see above) or a value is not finite
  // or negative.
  bool observe(double measured_kl, double predicted_kl_unscaled);
  double factor() const;                             // in [1, kMaxFactor]
  int64_t checks() const { return checks_; }         // checks counted
  double last_ratio() const { return last_ratio_; }  // measured / predicted of the last one counted (0: none)

 private:
  std::array<double, kRecentChecks> recent_log_ratio_{};  // a ring: the newest at (checks_ - 1) % size
  int64_t checks_ = 0;
  double last_ratio_ = 0;
};

}  // namespace orbit::planner
