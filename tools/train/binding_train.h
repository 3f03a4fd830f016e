// Training the binding models: batches from the task generator, autograd through train_forward(), Adam
// (hand-written on ATen tensors: no torch/torch.h needed), warm-up then cosine learning rate, gradient
// clipping at norm 1. Deterministic for a seed and thread count (ATen's CPU reductions may round
// differently across thread counts).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "binding_task.h"
#include "orbit/runtime/config.h"
#include "orbit/runtime/model.h"

namespace orbit::binding {

// One padded batch: every episode's context, then its question blocks (3 tokens each) at the positions
// right after the context, each block seeing the context and itself only.
struct Batch {
  at::Tensor tokens;            // int64 [B, T] (kPad where padded)
  at::Tensor positions;         // int64 [B, T]
  at::Tensor mask;              // bool [B, T, T]: row may attend column
  at::Tensor rows;              // int64 [N]: flat b·T + t of each supervised position
  at::Tensor targets;           // int64 [N]
  std::vector<int> kinds;       // per target: -1 caption, else int(QuestionKind)
  std::vector<int> questions;   // per target: index into its episode's questions, -1 caption
  at::Tensor question_targets;  // int64: indices into rows/targets of the question answers
  at::Tensor caption_targets;   // int64: indices of the caption rows
};

// `max_questions` per episode (all multi-hop ones first, then the others drawn); 0 = all.
Batch make_batch(const std::vector<Episode>& episodes, int max_questions, std::mt19937_64& rng);

struct EvalResult {
  std::map<std::string, double> accuracy;  // "color", "room", "where", "single" (color+room), "caption"
  std::map<std::string, int64_t> count;
};
// Full re-prefill accuracy with the training forward on `episodes` (every question).
EvalResult evaluate(const runtime::ModelConfig& config, const runtime::ModelWeights& weights,
                    const std::vector<Episode>& episodes);

struct TrainOptions {
  std::string model = "gqa";  // "gqa" or "mla"
  int64_t layers = 4;
  uint64_t seed = 1;
  int steps = 1200;
  int batch = 16;
  double lr = 3e-3;
  int warmup = 60;
  int max_questions = 0;        // per episode; 0 = every question
  double caption_weight = 0.5;  // loss = mean CE(answers) + caption_weight · mean CE(captions)
  int64_t aux_layer = 2;        //   + aux_weight · mean CE(captions read after aux_layer layers)
  double aux_weight = 0.5;
  int eval_every = 200;  // 0 = never during training
  int eval_episodes = 200;
  // Stop after an evaluation where single-hop, multi-hop and caption accuracy all reach this (0 = run
  // every step). Deterministic: the evaluation set is fixed by the seed.
  double stop_at = 0;
  TaskOptions task;
  std::function<void(const std::string&)> log;  // progress lines (may be empty)
};

struct TrainResult {
  runtime::ModelConfig config;
  runtime::ModelWeights weights;  // trained, requires_grad still set (see detached())
  double seconds = 0;
  std::vector<std::pair<int, double>> loss_curve;  // (step, mean loss over the last logging interval)
  EvalResult final_eval;                           // on the test split, eval_episodes episodes
  int steps_run = 0;
};

TrainResult train(const TrainOptions& options);

}  // namespace orbit::binding
