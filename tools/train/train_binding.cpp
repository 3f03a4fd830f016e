// train_binding: trains a tiny GQA or MLA model on the binding task (binding_task.h) and writes a Hugging
// Face checkpoint (config.json + model.safetensors) that orbit's runtime loads.
//
//   train_binding --model gqa|mla --out DIR [--steps N] [--batch B] [--seed S] [--threads T] [--lr X]
//                 [--layers L] [--eval-every N] [--eval-episodes N] [--stop-at ACC]
//
// After training it verifies the checkpoint three ways and writes DIR/train_log.json:
//   1. runtime::Model built from the trained weights gives the training forward's logits (max |diff|);
//   2. the written directory loaded back with load_hf() gives the same logits;
//   3. test-split accuracy by question kind with the runtime's forward (one window per question).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "binding_model.h"
#include "binding_train.h"
#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"

namespace bd = orbit::binding;
namespace rt = orbit::runtime;

namespace {

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: train_binding --model gqa|mla --out DIR [--steps N] [--batch B] [--seed S] [--threads T]\n"
               "                     [--lr X] [--layers L] [--eval-every N] [--eval-episodes N] [--stop-at ACC]\n",
               why);
  std::exit(2);
}

// Max |logit difference| between the training forward and a runtime model over `episodes` (causal, no
// questions: plain windows), plus one question block each.
double max_logit_diff(const rt::ModelConfig& config, const rt::ModelWeights& weights, const rt::Model& model,
                      const std::vector<bd::Episode>& episodes) {
  at::NoGradGuard no_grad;
  double worst = 0;
  for (const bd::Episode& e : episodes) {
    std::vector<int64_t> tokens = e.flat();
    const std::vector<int64_t>& q = e.questions.front().tokens;
    tokens.insert(tokens.end(), q.begin(), q.end());
    const int64_t T = static_cast<int64_t>(tokens.size());
    const at::Tensor t = at::tensor(tokens, at::kLong).view({1, T});
    const at::Tensor pos = at::arange(T, at::kLong).view({1, T});
    const at::Tensor mask = at::ones({T, T}, at::kBool).tril().view({1, T, T});
    const at::Tensor ours = bd::train_forward(config, weights, t, pos, mask, at::arange(T, at::kLong));
    rt::ForwardInput in;
    in.tokens = tokens;
    rt::ForwardOptions opt;
    opt.logits = rt::LogitsMode::kAll;
    opt.return_content = false;
    const at::Tensor theirs = model.forward(in, nullptr, opt).logits;
    worst = std::max(worst, (ours - theirs).abs().max().item<double>());
  }
  return worst;
}

// Accuracy by question kind with the runtime's forward: [context, question] per question.
nlohmann::json runtime_accuracy(const rt::Model& model, const std::vector<bd::Episode>& episodes) {
  std::map<std::string, std::pair<int, int>> tally;
  for (const bd::Episode& e : episodes) {
    const std::vector<int64_t> context = e.flat();
    for (const bd::Question& q : e.questions) {
      rt::ForwardInput in;
      in.tokens = context;
      in.tokens.insert(in.tokens.end(), q.tokens.begin(), q.tokens.end());
      rt::ForwardOptions opt;
      opt.return_content = false;
      const bool ok = model.forward(in, nullptr, opt).logits.argmax(-1).item<int64_t>() == q.answer;
      const std::string kind = bd::question_kind_name(q.kind);
      tally[kind].first += ok;
      ++tally[kind].second;
      const std::string group = bd::is_multi_hop(q.kind) ? "multi_hop" : "single_hop";
      tally[group].first += ok;
      ++tally[group].second;
    }
  }
  nlohmann::json out;
  for (const auto& [k, v] : tally) out[k] = {{"accuracy", static_cast<double>(v.first) / v.second}, {"n", v.second}};
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bd::TrainOptions o;
  std::string out;
  int threads = 1;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--model") o.model = next();
    else if (a == "--out") out = next();
    else if (a == "--steps") o.steps = std::atoi(next().c_str());
    else if (a == "--batch") o.batch = std::atoi(next().c_str());
    else if (a == "--seed") o.seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--lr") o.lr = std::atof(next().c_str());
    else if (a == "--layers") o.layers = std::atoi(next().c_str());
    else if (a == "--eval-every") o.eval_every = std::atoi(next().c_str());
    else if (a == "--eval-episodes") o.eval_episodes = std::atoi(next().c_str());
    else if (a == "--stop-at") o.stop_at = std::atof(next().c_str());
    else usage(("unknown argument " + a).c_str());
  }
  if (out.empty()) usage("--out is required");
  if (o.model != "gqa" && o.model != "mla") usage("--model must be gqa or mla");
  at::set_num_threads(threads);
  o.log = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  try {
    bd::TrainResult r = bd::train(o);
    const rt::ModelWeights weights = bd::detached(r.weights);
    bd::TaskGenerator check_gen(o.seed, bd::Split::kTest, o.task);
    std::vector<bd::Episode> check;
    for (int i = 0; i < 8; ++i) check.push_back(check_gen.episode());

    rt::Model in_memory(r.config, weights, "trained (in memory)");
    const double diff_memory = max_logit_diff(r.config, weights, in_memory, check);
    bd::write_checkpoint(r.config, weights, out);
    std::unique_ptr<rt::Model> loaded = rt::load_hf(out);
    const double diff_loaded = max_logit_diff(r.config, weights, *loaded, check);
    std::printf("checkpoint %s: max |logit diff| training forward vs runtime %.3g, vs reloaded %.3g\n", out.c_str(),
                diff_memory, diff_loaded);
    ORBIT_CHECK(diff_loaded < 1e-3, "reloaded checkpoint disagrees with the training forward: " << diff_loaded);

    bd::TaskGenerator acc_gen(o.seed + 1000, bd::Split::kTest, o.task);
    std::vector<bd::Episode> acc_eps;
    for (int i = 0; i < 100; ++i) acc_eps.push_back(acc_gen.episode());
    const nlohmann::json acc = runtime_accuracy(*loaded, acc_eps);
    std::printf("runtime re-prefill accuracy on 100 held-out episodes: %s\n", acc.dump().c_str());

    nlohmann::json log;
    log["command"] = command;
    log["model"] = o.model;
    log["seed"] = o.seed;
    log["steps"] = o.steps;
    log["steps_run"] = r.steps_run;
    log["stop_at"] = o.stop_at;
    log["batch"] = o.batch;
    log["threads"] = threads;
    log["lr"] = o.lr;
    log["train_seconds"] = r.seconds;
    log["fingerprint"] = loaded->fingerprint();
    log["parameters"] = loaded->parameter_count();
    log["max_logit_diff_runtime"] = diff_memory;
    log["max_logit_diff_reloaded"] = diff_loaded;
    log["loss_curve"] = r.loss_curve;
    log["test_accuracy_training_forward"] = r.final_eval.accuracy;
    log["runtime_accuracy"] = acc;
    std::ofstream(std::string(out) + "/train_log.json") << log.dump(2) << "\n";
    std::printf("trained in %.1f s; wrote %s\n", r.seconds, out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_binding: %s\n", e.what());
    return 1;
  }
  return 0;
}
