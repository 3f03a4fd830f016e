#include "binding_train.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "binding_model.h"

namespace orbit::binding {

namespace rt = orbit::runtime;

Batch make_batch(const std::vector<Episode>& episodes, int max_questions, std::mt19937_64& rng) {
  struct Row {
    std::vector<int64_t> tokens, positions;
    std::vector<std::pair<int64_t, int64_t>> blocks;  // (start, length) of question blocks
    int64_t context = 0;
    std::vector<std::pair<int64_t, int64_t>> targets;  // (index, token)
    std::vector<int> kinds, questions;
  };
  std::vector<Row> rows;
  int64_t T = 0;
  for (const Episode& e : episodes) {
    Row r;
    r.tokens = e.flat();
    r.context = static_cast<int64_t>(r.tokens.size());
    for (int64_t i = 0; i < r.context; ++i) r.positions.push_back(i);
    int64_t at = 0;
    for (const Chunk& c : e.chunks) {
      for (int64_t row : c.caption_rows()) {
        r.targets.emplace_back(at + row, c.caption());
        r.kinds.push_back(-1);
        r.questions.push_back(-1);
      }
      at += static_cast<int64_t>(c.tokens.size());
    }
    std::vector<const Question*> chosen, others;
    for (const Question& q : e.questions) (is_multi_hop(q.kind) ? chosen : others).push_back(&q);
    std::shuffle(others.begin(), others.end(), rng);
    for (const Question* q : others) chosen.push_back(q);
    if (max_questions > 0 && static_cast<int>(chosen.size()) > max_questions)
      chosen.resize(static_cast<size_t>(max_questions));
    for (const Question* q : chosen) {
      const int64_t start = static_cast<int64_t>(r.tokens.size());
      for (size_t i = 0; i < q->tokens.size(); ++i) {
        r.tokens.push_back(q->tokens[i]);
        r.positions.push_back(r.context + static_cast<int64_t>(i));
      }
      r.blocks.emplace_back(start, static_cast<int64_t>(q->tokens.size()));
      r.targets.emplace_back(static_cast<int64_t>(r.tokens.size()) - 1, q->answer);
      r.kinds.push_back(static_cast<int>(q->kind));
      r.questions.push_back(static_cast<int>(q - e.questions.data()));
    }
    T = std::max<int64_t>(T, static_cast<int64_t>(r.tokens.size()));
    rows.push_back(std::move(r));
  }
  const int64_t B = static_cast<int64_t>(rows.size());
  Batch b;
  b.tokens = at::full({B, T}, tok::kPad, at::kLong);
  b.positions = at::zeros({B, T}, at::kLong);
  b.mask = at::zeros({B, T, T}, at::kBool);
  std::vector<int64_t> flat_rows, targets;
  auto tokens = b.tokens.accessor<int64_t, 2>();
  auto positions = b.positions.accessor<int64_t, 2>();
  auto mask = b.mask.accessor<bool, 3>();
  for (int64_t i = 0; i < B; ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    const int64_t n = static_cast<int64_t>(r.tokens.size());
    for (int64_t t = 0; t < n; ++t) {
      tokens[i][t] = r.tokens[static_cast<size_t>(t)];
      positions[i][t] = r.positions[static_cast<size_t>(t)];
    }
    for (int64_t t = 0; t < r.context; ++t) {
      for (int64_t s = 0; s <= t; ++s) mask[i][t][s] = true;
    }
    for (const auto& [start, len] : r.blocks) {
      for (int64_t t = start; t < start + len; ++t) {
        for (int64_t s = 0; s < r.context; ++s) mask[i][t][s] = true;
        for (int64_t s = start; s <= t; ++s) mask[i][t][s] = true;
      }
    }
    for (int64_t t = n; t < T; ++t) mask[i][t][t] = true;  // padding sees itself (no empty softmax)
    for (const auto& [index, token] : r.targets) {
      flat_rows.push_back(i * T + index);
      targets.push_back(token);
    }
    b.kinds.insert(b.kinds.end(), r.kinds.begin(), r.kinds.end());
    b.questions.insert(b.questions.end(), r.questions.begin(), r.questions.end());
  }
  b.rows = at::tensor(flat_rows, at::kLong);
  b.targets = at::tensor(targets, at::kLong);
  std::vector<int64_t> question_index, caption_index;
  for (size_t i = 0; i < b.kinds.size(); ++i)
    (b.kinds[i] < 0 ? caption_index : question_index).push_back(static_cast<int64_t>(i));
  b.question_targets = at::tensor(question_index, at::kLong);
  b.caption_targets = at::tensor(caption_index, at::kLong);
  return b;
}

EvalResult evaluate(const rt::ModelConfig& config, const rt::ModelWeights& weights,
                    const std::vector<Episode>& episodes) {
  at::NoGradGuard no_grad;
  std::map<std::string, int64_t> correct, count;
  std::mt19937_64 rng(0);
  const size_t per_batch = 16;
  for (size_t start = 0; start < episodes.size(); start += per_batch) {
    const std::vector<Episode> part(
        episodes.begin() + static_cast<std::ptrdiff_t>(start),
        episodes.begin() + static_cast<std::ptrdiff_t>(std::min(episodes.size(), start + per_batch)));
    const Batch b = make_batch(part, 0, rng);
    const at::Tensor pred = train_forward(config, weights, b.tokens, b.positions, b.mask, b.rows).argmax(-1);
    const at::Tensor hit = pred.eq(b.targets);
    for (size_t i = 0; i < b.kinds.size(); ++i) {
      const int k = b.kinds[i];
      const std::string name = k < 0 ? "caption" : question_kind_name(static_cast<QuestionKind>(k));
      const bool ok = hit[static_cast<int64_t>(i)].item<bool>();
      correct[name] += ok;
      ++count[name];
      if (k >= 0 && !is_multi_hop(static_cast<QuestionKind>(k))) {
        correct["single"] += ok;
        ++count["single"];
      }
    }
  }
  EvalResult r;
  for (const auto& [name, n] : count) {
    r.count[name] = n;
    r.accuracy[name] = n > 0 ? static_cast<double>(correct[name]) / static_cast<double>(n) : 0.0;
  }
  return r;
}

namespace {

std::string eval_line(const EvalResult& e) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "single %.3f (color %.3f room %.3f)  multi-hop where %.3f  caption %.3f",
                e.accuracy.count("single") ? e.accuracy.at("single") : 0.0,
                e.accuracy.count("color") ? e.accuracy.at("color") : 0.0,
                e.accuracy.count("room") ? e.accuracy.at("room") : 0.0,
                e.accuracy.count("where") ? e.accuracy.at("where") : 0.0,
                e.accuracy.count("caption") ? e.accuracy.at("caption") : 0.0);
  return buf;
}

// Adam's moment estimates, one pair per parameter (zeros to start).
struct AdamState {
  std::vector<at::Tensor> m1, m2;
};

// One Adam step (no weight decay) over the parameters' gradients, clipped to a global norm of 1; the learning
// rate rises linearly over o.warmup steps, then falls along a cosine to 5% of o.lr at o.steps.
void adam_step(const std::vector<at::Tensor>& params, AdamState& adam, int step, const TrainOptions& o) {
  constexpr double beta1 = 0.9, beta2 = 0.98, eps = 1e-8;
  at::NoGradGuard no_grad;
  double norm2 = 0;
  for (const at::Tensor& p : params) norm2 += p.grad().pow(2).sum().item<double>();
  const double clip = std::min(1.0, 1.0 / (std::sqrt(norm2) + 1e-12));
  const double progress = static_cast<double>(step - o.warmup) / std::max(1, o.steps - o.warmup);
  const double lr = step <= o.warmup ? o.lr * step / o.warmup
                                     : o.lr * (0.05 + 0.95 * 0.5 * (1.0 + std::cos(3.14159265358979 * progress)));
  const double bc1 = 1.0 - std::pow(beta1, step), bc2 = 1.0 - std::pow(beta2, step);
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor g = params[i].grad() * clip;
    adam.m1[i].mul_(beta1).add_(g, 1.0 - beta1);
    adam.m2[i].mul_(beta2).addcmul_(g, g, 1.0 - beta2);
    const at::Tensor denom = (adam.m2[i] / bc2).sqrt_().add_(eps);
    params[i].addcdiv_(adam.m1[i], denom, -lr / bc1);
  }
}

// The next batch's episodes. Episodes are drawn `bucket` batches at a time, sorted by length and cut into
// batches (less padding: a batch is as long as its longest episode), the batches then taken in a drawn order
// (`pending` holds those not taken yet). Deterministic.
std::vector<Episode> next_episodes(std::vector<std::vector<Episode>>& pending, TaskGenerator& gen, int batch,
                                   std::mt19937_64& rng) {
  constexpr int bucket = 8;
  if (pending.empty()) {
    std::vector<Episode> pool;
    for (int i = 0; i < batch * bucket; ++i) pool.push_back(gen.episode());
    std::stable_sort(pool.begin(), pool.end(),
                     [](const Episode& a, const Episode& b) { return a.length() < b.length(); });
    for (int j = 0; j < bucket; ++j) {
      pending.emplace_back(pool.begin() + static_cast<std::ptrdiff_t>(j) * batch,
                           pool.begin() + static_cast<std::ptrdiff_t>(j + 1) * batch);
    }
    std::shuffle(pending.begin(), pending.end(), rng);
  }
  std::vector<Episode> episodes = std::move(pending.back());
  pending.pop_back();
  return episodes;
}

// The loss of one batch: the mean over question answers plus caption_weight × the mean over caption rows
// (there are many more caption rows than questions; weighting the means keeps the answers in charge), plus
// aux_weight × the caption read after aux_layer layers (deep supervision: the binding computed early enough
// for a question to read it in the layers after).
at::Tensor batch_loss(const rt::ModelConfig& config, const rt::ModelWeights& w, const Batch& b, const TrainOptions& o) {
  at::Tensor aux;
  const at::Tensor caption_rows = b.rows.index_select(0, b.caption_targets);
  const at::Tensor logits = train_forward(config, w, b.tokens, b.positions, b.mask, b.rows, o.aux_layer, caption_rows,
                                          o.aux_weight > 0 ? &aux : nullptr);
  at::Tensor loss =
      at::cross_entropy_loss(logits.index_select(0, b.question_targets), b.targets.index_select(0, b.question_targets));
  if (o.caption_weight > 0 && b.caption_targets.numel() > 0) {
    loss = loss + o.caption_weight * at::cross_entropy_loss(logits.index_select(0, b.caption_targets),
                                                            b.targets.index_select(0, b.caption_targets));
  }
  if (o.aux_weight > 0 && aux.defined() && aux.size(0) > 0) {
    loss = loss + o.aux_weight * at::cross_entropy_loss(aux, b.targets.index_select(0, b.caption_targets));
  }
  return loss;
}

// Evaluates at the steps o.eval_every asks for (not the last: the final evaluation follows it) and says whether
// the run stops here: every kind reached o.stop_at.
bool stop_here(const TrainOptions& o, int step, const rt::ModelConfig& config, const rt::ModelWeights& w,
               const std::vector<Episode>& test, const std::function<void(const std::string&)>& log) {
  if (o.eval_every <= 0 || step % o.eval_every != 0 || step == o.steps) return false;
  const EvalResult e = evaluate(config, w, test);
  log("  test (full re-prefill): " + eval_line(e));
  return o.stop_at > 0 && e.accuracy.at("single") >= o.stop_at && e.accuracy.at("where") >= o.stop_at &&
         e.accuracy.at("caption") >= o.stop_at;
}

}  // namespace

TrainResult train(const TrainOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  auto log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  TrainResult result;
  rt::ModelConfig config = config_by_name(o.model);
  if (o.layers != config.num_layers) {
    config = o.model == "gqa" ? gqa_config(o.layers) : mla_config(o.layers);
  }
  result.config = config;
  ORBIT_CHECK(o.aux_weight == 0 || o.aux_layer < config.num_layers,
              "binding train: aux_layer " << o.aux_layer << " needs more than " << config.num_layers
                                          << " layers while aux_weight > 0");
  ORBIT_CHECK(max_episode_length(o.task) < config.max_position_embeddings,
              "binding train: episodes of up to " << max_episode_length(o.task)
                                                  << " tokens and their questions do not fit "
                                                  << config.max_position_embeddings << " positions (lower frame_max)");
  rt::ModelWeights w = init_weights(config, o.seed);
  const std::vector<at::Tensor> params = parameters(w, config);
  AdamState adam;
  int64_t count = 0;
  for (const at::Tensor& p : params) {
    adam.m1.push_back(at::zeros_like(p).detach());
    adam.m2.push_back(at::zeros_like(p).detach());
    count += p.numel();
  }
  {
    char buf[200];
    std::snprintf(buf, sizeof buf, "model %s: %lld parameters, %lld layers; %d steps x %d episodes", o.model.c_str(),
                  static_cast<long long>(count), static_cast<long long>(config.num_layers), o.steps, o.batch);
    log(buf);
  }

  TaskGenerator train_gen(o.seed, Split::kTrain, o.task);
  TaskGenerator test_gen(o.seed, Split::kTest, o.task);
  std::vector<Episode> test;
  for (int i = 0; i < o.eval_episodes; ++i) test.push_back(test_gen.episode());
  std::mt19937_64 batch_rng(o.seed * 7919 + 17);

  double loss_sum = 0;
  int loss_n = 0;
  int64_t tokens_seen = 0;
  const int log_every = std::max(1, std::min(50, o.steps / 10));
  std::vector<std::vector<Episode>> pending;
  for (int step = 1; step <= o.steps; ++step) {
    const std::vector<Episode> episodes = next_episodes(pending, train_gen, o.batch, batch_rng);
    const Batch b = make_batch(episodes, o.max_questions, batch_rng);
    tokens_seen += b.tokens.numel();
    const at::Tensor loss = batch_loss(config, w, b, o);
    for (const at::Tensor& p : params) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    loss.backward();
    adam_step(params, adam, step, o);
    const double step_loss = loss.item<double>();
    ORBIT_CHECK(std::isfinite(step_loss),
                "binding train: the loss is not finite at step " << step << " (lr " << o.lr << " too large?)");
    loss_sum += step_loss;
    ++loss_n;
    // A point of the loss curve: the mean since the last one.
    auto log_loss = [&] {
      result.loss_curve.emplace_back(step, loss_sum / loss_n);
      char buf[200];
      std::snprintf(buf, sizeof buf, "step %5d/%d  loss %.4f  %.0fs  %.0f padded tok/s", step, o.steps,
                    loss_sum / loss_n, elapsed(), tokens_seen / std::max(1e-9, elapsed()));
      log(buf);
      loss_sum = 0;
      loss_n = 0;
    };
    if (step % log_every == 0 || step == o.steps) log_loss();
    result.steps_run = step;
    if (stop_here(o, step, config, w, test, log)) {
      if (loss_n > 0) log_loss();  // the steps since the last point, so the curve ends at steps_run
      log("  reached --stop-at " + std::to_string(o.stop_at) + " on every kind: stopping");
      break;
    }
  }
  result.final_eval = evaluate(config, w, test);
  log("final test (full re-prefill, " + std::to_string(test.size()) + " episodes): " + eval_line(result.final_eval));
  result.seconds = elapsed();
  result.weights = w;
  return result;
}

}  // namespace orbit::binding
