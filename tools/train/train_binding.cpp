// train_binding: trains a tiny GQA or MLA model on the binding task (binding_task.h) and writes a Hugging
// Face checkpoint (config.json + model.safetensors) that orbit's runtime loads.
//
//   train_binding --model gqa|mla --out DIR [--steps N] [--batch B] [--seed S] [--threads T] [--lr X]
//                 [--layers L] [--eval-every N] [--eval-episodes N] [--stop-at ACC] [--warmup N]
//                 [--caption-weight W] [--aux-weight W] [--aux-layer L] [--max-intros N] [--frame-max N]
//                 [--gap-prob P] [--max-gap-texts N]
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
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "args.h"
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
               "                     [--lr X] [--layers L] [--eval-every N] [--eval-episodes N] [--stop-at ACC]\n"
               "                     [--warmup N] [--caption-weight W] [--aux-weight W] [--aux-layer L]\n"
               "                     [--max-intros N] [--frame-max N] [--gap-prob P] [--max-gap-texts N]\n",
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
    in.tokens = std::move(tokens);  // not used below
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

// DIR/README.md, every number in it from this run.
void write_readme(const std::string& out, const bd::TrainOptions& o, const bd::TrainResult& r, int threads,
                  const std::string& command, const nlohmann::json& acc, double diff, const std::string& fingerprint,
                  int64_t parameters) {
  const rt::ModelConfig& c = r.config;
  std::ofstream md(std::string(out) + "/README.md");
  const std::string name = std::filesystem::path(out).filename().string();
  md << "# " << name << "\n\n";
  md << "_Written by `train_binding` at the end of the run that made this checkpoint; every number below was measured "
        "by that run._\n\n";
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
  md << "Made with (from the repository root, after `ninja -C build-binding train_binding`; deterministic for the "
        "seed at one thread: re-running it re-makes `model.safetensors` bit for bit on this machine):\n\n";
  md << "    OMP_NUM_THREADS=1 " << command << "\n\n";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "It ran %d of %d steps (batch %d episodes, Adam, lr %.3g with %d warm-up steps then cosine, %d "
                "thread(s)) in **%.0f s** wall time on this 2-core machine (shared with other work while it ran).\n\n",
                r.steps_run, o.steps, o.batch, o.lr, o.warmup, threads, r.seconds);
  md << buf;
  md << "Loss: cross-entropy on the question answers (one token each) plus " << o.caption_weight
     << " × the caption loss (the object word at every token of a ref frame, at an intro frame's [FEND], at a text "
        "chunk's room word) plus "
     << o.aux_weight << " × the same captions read through the output head after layer " << o.aux_layer
     << " (deep supervision, so the binding is in place before the layers that read it). Training stops at the "
        "first evaluation where single-hop, multi-hop and caption accuracy on the held-out evaluation episodes all "
        "reach `--stop-at`.\n\n";
  md << "Held-out accuracy under full re-prefill (the runtime's forward on the reloaded checkpoint, 100 test-split "
        "episodes that training never saw, every question of each):\n\n";
  md << "| question | accuracy |\n|---|---|\n";
  md << "| single-hop: colour (read from an intro frame) | " << acc_text(acc, "color") << " |\n";
  md << "| single-hop: room (read from a text fact) | " << acc_text(acc, "room") << " |\n";
  md << "| multi-hop: where (through a ref frame bound to its antecedent) | " << acc_text(acc, "where") << " |\n";
  md << "| all single-hop | " << acc_text(acc, "single_hop") << " |\n";
  md << "| all multi-hop | " << acc_text(acc, "multi_hop") << " |\n\n";
  std::snprintf(buf, sizeof buf,
                "Largest |logit difference| between the training forward and the runtime on the reloaded checkpoint: "
                "%.3g. Weights fingerprint `%s`.\n\n",
                diff, fingerprint.c_str());
  md << buf;
  md << "Files: `config.json` (Hugging Face), `model.safetensors` (float32), `train_log.json` (the command, options, "
        "wall seconds, loss curve, accuracies).\n";
}

// The command line: the training options, the output directory, the thread count and the command as typed
// (for the log). A bad one ends the process with usage().
struct Command {
  bd::TrainOptions o;
  std::string out;
  int threads = 1;
  std::string line;
};

Command parse_command(int argc, char** argv) {
  Command c;
  bd::TrainOptions& o = c.o;
  for (int i = 0; i < argc; ++i) c.line += (i ? " " : "") + std::string(argv[i]);
  try {
    const orbit::cli::Args a(
        "train_binding",
        {{"--model", "--out", "--steps", "--batch", "--seed", "--threads", "--lr", "--layers", "--eval-every",
          "--eval-episodes", "--stop-at", "--warmup", "--caption-weight", "--aux-weight", "--aux-layer", "--max-intros",
          "--frame-max", "--gap-prob", "--max-gap-texts"},
         {}},
        argc, argv, 1);
    o.model = a.get_or("--model", o.model);
    c.out = a.get_or("--out", c.out);
    o.steps = static_cast<int>(a.get_int("--steps", o.steps, 1));
    o.batch = static_cast<int>(a.get_int("--batch", o.batch, 1));
    o.seed = static_cast<uint64_t>(a.get_int("--seed", static_cast<int64_t>(o.seed), 0));
    c.threads = static_cast<int>(a.get_int("--threads", c.threads, 1));
    o.lr = a.get_double("--lr", o.lr);
    o.layers = static_cast<int>(a.get_int("--layers", o.layers, 1));
    o.eval_every = static_cast<int>(a.get_int("--eval-every", o.eval_every, 0));
    o.eval_episodes = static_cast<int>(a.get_int("--eval-episodes", o.eval_episodes, 1));
    o.stop_at = a.get_double("--stop-at", o.stop_at);
    o.warmup = static_cast<int>(a.get_int("--warmup", o.warmup, 0));
    o.caption_weight = a.get_double("--caption-weight", o.caption_weight);
    o.aux_weight = a.get_double("--aux-weight", o.aux_weight);
    o.aux_layer = static_cast<int>(a.get_int("--aux-layer", o.aux_layer, 0));
    o.task.max_intros = static_cast<int>(a.get_int("--max-intros", o.task.max_intros, 1));
    o.task.frame_max = static_cast<int>(a.get_int("--frame-max", o.task.frame_max, 1));
    o.task.gap_probability = a.get_double("--gap-prob", o.task.gap_probability);
    o.task.max_gap_texts = static_cast<int>(a.get_int("--max-gap-texts", o.task.max_gap_texts, 0));
  } catch (const orbit::Error& e) {
    usage(e.what());
  }
  if (c.out.empty()) usage("--out is required");
  if (o.model != "gqa" && o.model != "mla") usage("--model must be gqa or mla");
  return c;
}

// What the written checkpoint was checked for: the largest logit differences from the training forward (the
// runtime's model in memory, the checkpoint loaded back) and the runtime's accuracy by question kind.
struct Checks {
  double diff_memory = 0;
  double diff_loaded = 0;
  nlohmann::json accuracy;
};

// train_log.json: the command, the options, the training's course and the checks.
nlohmann::json train_log(const Command& c, const bd::TrainResult& r, const rt::Model& loaded, const Checks& checks) {
  const bd::TrainOptions& o = c.o;
  nlohmann::json log;
  log["command"] = c.line;
  log["model"] = o.model;
  log["seed"] = o.seed;
  log["steps"] = o.steps;
  log["steps_run"] = r.steps_run;
  log["stop_at"] = o.stop_at;
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
  log["max_logit_diff_runtime"] = checks.diff_memory;
  log["max_logit_diff_reloaded"] = checks.diff_loaded;
  log["loss_curve"] = r.loss_curve;
  log["test_accuracy_training_forward"] = r.final_eval.accuracy;
  log["runtime_accuracy"] = checks.accuracy;
  return log;
}

}  // namespace

int main(int argc, char** argv) {
  const Command c = parse_command(argc, argv);
  bd::TrainOptions o = c.o;
  const std::string& out = c.out;
  at::set_num_threads(c.threads);
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

    Checks checks;
    rt::Model in_memory(r.config, weights, "trained (in memory)");
    checks.diff_memory = max_logit_diff(r.config, weights, in_memory, check);
    bd::write_checkpoint(r.config, weights, out);
    std::unique_ptr<rt::Model> loaded = rt::load_hf(out);
    checks.diff_loaded = max_logit_diff(r.config, weights, *loaded, check);
    std::printf("checkpoint %s: max |logit diff| training forward vs runtime %.3g, vs reloaded %.3g\n", out.c_str(),
                checks.diff_memory, checks.diff_loaded);
    ORBIT_CHECK(checks.diff_loaded < 1e-3,
                "reloaded checkpoint disagrees with the training forward: " << checks.diff_loaded);

    bd::TaskGenerator acc_gen(o.seed + 1000, bd::Split::kTest, o.task);
    std::vector<bd::Episode> acc_eps;
    for (int i = 0; i < 100; ++i) acc_eps.push_back(acc_gen.episode());
    checks.accuracy = runtime_accuracy(*loaded, acc_eps);
    std::printf("runtime re-prefill accuracy on 100 held-out episodes: %s\n", checks.accuracy.dump().c_str());

    std::ofstream(std::string(out) + "/train_log.json") << train_log(c, r, *loaded, checks).dump(2) << "\n";
    write_readme(out, o, r, c.threads, c.line, checks.accuracy, checks.diff_loaded, loaded->fingerprint(),
                 loaded->parameter_count());
    std::printf("trained in %.1f s; wrote %s\n", r.seconds, out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_binding: %s\n", e.what());
    return 1;
  }
  return 0;
}
