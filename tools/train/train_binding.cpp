// train_binding: trains a tiny GQA or MLA model on the binding task (binding_task.h) and writes a Hugging
// Face checkpoint that orbit's runtime loads.
//
//   train_binding --out DIR [--model gqa|mla] [--steps N] [--batch B] [--seed S] [--threads T] [--lr X]
//                 [--layers L] [--eval-every N] [--eval-episodes N] [--stop-at ACC] [--warmup N]
//                 [--caption-weight W] [--aux-weight W] [--aux-layer L] [--max-intros N] [--frame-max N]
//                 [--gap-prob P] [--max-gap-texts N]          (--help: every argument, its range and default)
//
// Every argument, DIR included, is checked before training (train_command.h, train_output.h). After training
// it verifies the checkpoint three ways:
//   1. runtime::Model built from the trained weights gives the training forward's logits (max |diff|);
//   2. the written directory loaded back with load_hf() gives the same logits;
//   3. test-split accuracy by question kind with the runtime's forward (one window per question).
// DIR gets four files, all or none (train_output.h): config.json, model.safetensors, train_log.json (the command,
// options, loss curve and checks) and README.md (the same run described for a reader). DIR must be new, empty,
// or an earlier train_binding output holding only those four files, which is then replaced as a whole; any other
// DIR is refused before training. A failed check leaves DIR as it was, names the directory beside it that holds
// the unverified files, and exits 1.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "binding_model.h"
#include "binding_train.h"
#include "orbit/common/atomic_file.h"
#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "train_command.h"
#include "train_output.h"

namespace bd = orbit::binding;
namespace rt = orbit::runtime;

namespace {

// How far a runtime model's logits are from the training forward's: the largest |difference|, and the largest
// |logit| of the training forward (the scale that difference is judged against: float32 rounding grows with it).
struct LogitDiff {
  double max_diff = 0;
  double max_logit = 0;
  // Within float32 rounding of a forward pass: 1e-3 per unit of logit, at least 1e-3.
  bool agrees() const { return max_diff < 1e-3 * std::max(1.0, max_logit); }
};

// The logit difference between the training forward and a runtime model over `episodes` (causal, no
// questions: plain windows), plus one question block each.
LogitDiff logit_diff(const rt::ModelConfig& config, const rt::ModelWeights& weights, const rt::Model& model,
                     const std::vector<bd::Episode>& episodes) {
  at::NoGradGuard no_grad;
  LogitDiff d;
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
    in.tokens = std::move(tokens);  // not used below
    rt::ForwardOptions opt;
    opt.logits = rt::LogitsMode::kAll;
    opt.return_content = false;
    const at::Tensor theirs = model.forward(in, nullptr, opt).logits;
    d.max_diff = std::max(d.max_diff, (ours - theirs).abs().max().item<double>());
    d.max_logit = std::max(d.max_logit, ours.abs().max().item<double>());
  }
  return d;
}

// Accuracy by question kind with the runtime's forward: [context, question] per question.
nlohmann::json runtime_accuracy(const rt::Model& model, const std::vector<bd::Episode>& episodes) {
  std::map<std::string, std::pair<int, int>> tally;
  for (const bd::Episode& e : episodes) {
    const std::vector<int64_t> context = e.flat();
    for (const bd::Question& q : e.questions) {
      rt::ForwardInput in;
      in.tokens.reserve(context.size() + q.tokens.size());
      in.tokens.insert(in.tokens.end(), context.begin(), context.end());
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

std::string acc_text(const nlohmann::json& acc, const char* kind) {
  if (!acc.contains(kind)) return "–";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f (n = %d)", acc[kind]["accuracy"].get<double>(), acc[kind]["n"].get<int>());
  return buf;
}

// What the checkpoint was checked for: the logit differences from the training forward (the runtime's model in
// memory, the checkpoint loaded back) and the runtime's accuracy by question kind.
struct Checks {
  LogitDiff memory;
  LogitDiff loaded;
  nlohmann::json accuracy;
};

// The opening of README.md: what the model is.
void readme_model(std::ostream& md, const bd::TrainOptions& o, const rt::ModelConfig& c, int64_t parameters) {
  if (o.model == "gqa") {
    md << "A tiny GQA decoder (Llama layout: hidden " << c.hidden_size << ", " << c.num_heads << " query heads and "
       << c.num_kv_heads << " KV heads of " << c.head_dim << ", SwiGLU " << c.intermediate_size << ", " << c.num_layers
       << " layers, half-split RoPE, vocabulary " << c.vocab_size << ")";
  } else {
    md << "A tiny MLA decoder (DeepSeek-V2 layout: hidden " << c.hidden_size << ", " << c.num_heads
       << " heads, d_nope = d_rope = d_v = 16, kv_lora_rank " << c.mla.kv_lora_rank << ", no q low-rank, SwiGLU "
       << c.intermediate_size << ", " << c.num_layers << " layers, interleaved RoPE on k_pe, vocabulary "
       << c.vocab_size << ")";
  }
  md << ", " << parameters
     << " parameters, trained from scratch on the synthetic cross-chunk binding task of "
        "`tools/train/binding_task.h` so that paper 000's reuse experiments run on a model that really "
        "binds one chunk to another (`bench/binding`, `bench/REPORT.md`). No M-RoPE variant: the visual chunks "
        "are 1-D token streams, not 2-D grids.\n\n";
}

// How the run went: the command, steps, learning rate and loss, each sentence only where it applies.
void readme_run(std::ostream& md, const bd::Command& c, const bd::TrainResult& r) {
  const bd::TrainOptions& o = c.options;
  md << "Made with (from the repository root, with a build of the `train_binding` target; the same binary at the "
        "same seed and thread count re-makes `model.safetensors` bit for bit, another build, compiler or ATen may "
        "round differently and give slightly different weights):\n\n";
  md << "    OMP_NUM_THREADS=" << c.threads << " " << c.line << "\n\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "It ran %d of %d steps (batch %d episodes, Adam, lr %.3g", r.steps_run, o.steps,
                o.batch, o.lr);
  md << buf;
  if (o.warmup >= o.steps) {
    md << " rising over the whole run towards its peak at step " << o.warmup;
  } else if (o.warmup > 0) {
    md << " with " << o.warmup << " warm-up steps then cosine";
  } else {
    md << " along a cosine";
  }
  std::snprintf(buf, sizeof buf, ", %d thread(s)) in **%.0f s** of training on the machine that ran it.\n\n", c.threads,
                r.seconds);
  md << buf;
  md << "Loss: cross-entropy on the question answers (one token each) plus " << o.caption_weight
     << " × the caption loss (the object word at every token of a ref frame, at an intro frame's [FEND], at a text "
        "chunk's room word)";
  if (o.aux_weight > 0) {
    md << " plus " << o.aux_weight << " × the same captions read through the output head after " << o.aux_layer
       << " layer(s) (deep supervision, so the binding is in place before the layers that read it)";
  }
  md << ".";
  if (o.stop_at > 0) {
    md << " Training stops at the first evaluation (every " << o.eval_every
       << " steps) where single-hop, multi-hop and caption accuracy on the held-out evaluation episodes all reach "
       << o.stop_at << (r.steps_run < o.steps ? "; this run did." : "; this run never did.");
  }
  md << "\n\n";
}

// DIR/README.md, every number in it from this run.
std::string readme_text(const std::string& name, const bd::Command& c, const bd::TrainResult& r, const Checks& checks,
                        const rt::Model& loaded) {
  std::ostringstream md;
  md << "# " << name << "\n\n";
  md << "_Written by `train_binding` at the end of the run that made this checkpoint; every number below was measured "
        "by that run._\n\n";
  readme_model(md, c.options, r.config, loaded.parameter_count());
  readme_run(md, c, r);
  const nlohmann::json& acc = checks.accuracy;
  md << "Held-out accuracy under full re-prefill (the runtime's forward on the reloaded checkpoint, 100 test-split "
        "episodes that training never saw, every question of each):\n\n";
  md << "| question | accuracy |\n|---|---|\n";
  md << "| single-hop: colour (read from an intro frame) | " << acc_text(acc, "color") << " |\n";
  md << "| single-hop: room (read from a text fact) | " << acc_text(acc, "room") << " |\n";
  md << "| multi-hop: where (through a ref frame bound to its antecedent) | " << acc_text(acc, "where") << " |\n";
  md << "| all single-hop | " << acc_text(acc, "single_hop") << " |\n";
  md << "| all multi-hop | " << acc_text(acc, "multi_hop") << " |\n\n";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "Largest |logit difference| between the training forward and the runtime on the reloaded checkpoint: "
                "%.3g. Weights fingerprint `%s`.\n\n",
                checks.loaded.max_diff, loaded.fingerprint().c_str());
  md << buf;
  md << "Files: `config.json` (Hugging Face), `model.safetensors` (float32), `train_log.json` (the command, options, "
        "training seconds, loss curve, accuracies), this README.\n";
  return md.str();
}

// train_log.json: the command, the options, the training's course and the checks.
nlohmann::json train_log(const bd::Command& c, const bd::TrainResult& r, const rt::Model& loaded,
                         const Checks& checks) {
  const bd::TrainOptions& o = c.options;
  nlohmann::json log;
  log["command"] = c.line;
  log["model"] = o.model;
  log["seed"] = o.seed;
  log["steps"] = o.steps;
  log["steps_run"] = r.steps_run;
  log["stop_at"] = o.stop_at;
  log["eval_every"] = o.eval_every;
  log["eval_episodes"] = o.eval_episodes;
  log["batch"] = o.batch;
  log["threads"] = c.threads;
  log["lr"] = o.lr;
  log["warmup"] = o.warmup;
  log["caption_weight"] = o.caption_weight;
  log["aux_weight"] = o.aux_weight;
  log["aux_layer"] = o.aux_layer;
  log["layers"] = r.config.num_layers;
  log["task"] = {{"min_intros", o.task.min_intros},
                 {"max_intros", o.task.max_intros},
                 {"ref_probability", o.task.ref_probability},
                 {"gap_probability", o.task.gap_probability},
                 {"max_gap_texts", o.task.max_gap_texts},
                 {"min_texts", o.task.min_texts},
                 {"max_texts", o.task.max_texts},
                 {"frame_min", o.task.frame_min},
                 {"frame_max", o.task.frame_max},
                 {"signal", o.task.signal}};
  log["train_seconds"] = r.seconds;
  log["fingerprint"] = loaded.fingerprint();
  log["parameters"] = loaded.parameter_count();
  log["max_logit_diff_runtime"] = checks.memory.max_diff;
  log["max_logit_diff_reloaded"] = checks.loaded.max_diff;
  log["loss_curve"] = r.loss_curve;
  log["test_accuracy_training_forward"] = r.final_eval.accuracy;
  log["test_count_training_forward"] = r.final_eval.count;
  log["runtime_accuracy"] = checks.accuracy;
  return log;
}

// Writes the checkpoint into the staging directory `dir`, checks it there and adds the log and README (titled
// `name`, --out's own name); throws when a check or a write fails (nothing is in place yet).
void write_and_verify(const bd::Command& c, const bd::TrainResult& r, const std::string& name, const std::string& dir) {
  const bd::TrainOptions& o = c.options;
  const rt::ModelWeights weights = bd::detached(r.weights);
  bd::TaskGenerator check_gen(o.seed, bd::Split::kTest, o.task);
  std::vector<bd::Episode> check;
  for (int i = 0; i < 8; ++i) check.push_back(check_gen.episode());

  Checks checks;
  const rt::Model in_memory(r.config, weights, "trained (in memory)");
  checks.memory = logit_diff(r.config, weights, in_memory, check);
  ORBIT_CHECK(checks.memory.agrees(), "the runtime's forward disagrees with the training forward: max |logit diff| "
                                          << checks.memory.max_diff << " at logits up to " << checks.memory.max_logit);
  bd::write_checkpoint(r.config, weights, dir);
  const std::unique_ptr<rt::Model> loaded = rt::load_hf(dir);
  checks.loaded = logit_diff(r.config, weights, *loaded, check);
  std::printf("checkpoint: max |logit diff| training forward vs runtime %.3g, vs reloaded %.3g (logits up to %.3g)\n",
              checks.memory.max_diff, checks.loaded.max_diff, checks.loaded.max_logit);
  ORBIT_CHECK(checks.loaded.agrees(), "the reloaded checkpoint disagrees with the training forward: max |logit diff| "
                                          << checks.loaded.max_diff << " at logits up to " << checks.loaded.max_logit);

  bd::TaskGenerator acc_gen(o.seed + 1000, bd::Split::kTest, o.task);
  std::vector<bd::Episode> acc_eps;
  for (int i = 0; i < 100; ++i) acc_eps.push_back(acc_gen.episode());
  checks.accuracy = runtime_accuracy(*loaded, acc_eps);
  std::printf("runtime re-prefill accuracy on 100 held-out episodes: %s\n", checks.accuracy.dump().c_str());

  orbit::write_file_atomically(dir + "/train_log.json", train_log(c, r, *loaded, checks).dump(2) + "\n",
                               "train_log.json");
  orbit::write_file_atomically(dir + "/README.md", readme_text(name, c, r, checks, *loaded), "README.md");
}

}  // namespace

int main(int argc, char** argv) {
  bd::Command c = bd::parse_command(argc, argv);
  std::unique_ptr<bd::OutputDir> out;
  try {
    out = std::make_unique<bd::OutputDir>(c.out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  at::set_num_threads(c.threads);
  c.options.log = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  try {
    const bd::TrainResult r = bd::train(c.options);
    const std::string name = std::filesystem::path(out->path()).filename().string();
    write_and_verify(c, r, name, out->stage());
    out->commit();
    std::printf("trained in %.1f s; wrote %s\n", r.seconds, out->path().c_str());
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::fprintf(stderr, "%s%s\n", what.rfind("train_binding:", 0) == 0 ? "" : "train_binding: ", what.c_str());
    if (!out->staged().empty()) {
      std::fprintf(stderr,
                   "train_binding: left %s as it was; the files this run wrote are in %s (not moved into place)\n",
                   out->path().c_str(), out->staged().c_str());
    }
    return 1;
  }
  return 0;
}
