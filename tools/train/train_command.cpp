#include "train_command.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "args.h"
#include "binding_model.h"
#include "orbit/common/error.h"

namespace orbit::binding {

namespace {

const char* const kCommand = "train_binding";

std::string usage_text() {
  const TrainOptions d;
  std::ostringstream u;
  u << "usage: train_binding --out DIR [--model gqa|mla] [options]\n"
    << "Trains a tiny model on the binding task and writes DIR/config.json, DIR/model.safetensors,\n"
    << "DIR/train_log.json and DIR/README.md, all four or none: they are written and verified in a new\n"
    << "directory beside DIR, then moved into place. DIR must be new, empty, or an earlier train_binding\n"
    << "output holding nothing but those four files (it is then replaced as a whole); anything else is refused\n"
    << "before training. A failed verification leaves DIR as it was and names the directory holding the\n"
    << "unverified files.\n\n"
    << "  --out DIR              the checkpoint directory (required)\n"
    << "  --model gqa|mla        architecture (default " << d.model << ")\n"
    << "  --layers L             decoder layers (default " << d.layers << ")\n"
    << "  --steps N              training steps (default " << d.steps << ")\n"
    << "  --batch B              episodes per step (default " << d.batch << ")\n"
    << "  --seed S               seed in [0, 2^64) (default " << d.seed << ")\n"
    << "  --threads T            ATen threads; the result is reproducible per thread count (default 1)\n"
    << "  --lr X                 peak learning rate, > 0 (default " << d.lr << ")\n"
    << "  --warmup N             linear warm-up steps before the cosine decay (default " << d.warmup << ")\n"
    << "  --eval-every N         evaluate every N steps, 0 = never during training (default " << d.eval_every << ")\n"
    << "  --eval-episodes N      held-out evaluation episodes (default " << d.eval_episodes << ")\n"
    << "  --stop-at ACC          stop at the first evaluation where every kind reaches ACC, in (0, 1]\n"
    << "                         (default: run every step; needs --eval-every below --steps)\n"
    << "  --caption-weight W     weight of the caption loss, >= 0 (default " << d.caption_weight << ")\n"
    << "  --aux-weight W         weight of the captions read after --aux-layer layers, >= 0 (default " << d.aux_weight
    << ")\n"
    << "  --aux-layer L          layers before that read, < --layers when --aux-weight > 0 (default " << d.aux_layer
    << ")\n"
    << "  --max-intros N         intro frames per episode, " << d.task.min_intros << " to " << d.task.max_intros
    << " with the default texts (default " << d.task.max_intros << ")\n"
    << "  --frame-max N          longest frame in visual tokens, from " << d.task.frame_min
    << " to what fits the model's positions (default " << d.task.frame_max << ")\n"
    << "  --gap-prob P           probability of text chunks between a frame and its ref, in [0, 1] (default "
    << d.task.gap_probability << ")\n"
    << "  --max-gap-texts N      most text chunks in such a gap, >= 1 (default " << d.task.max_gap_texts << ")\n";
  return u.str();
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "%s\n%s", why.c_str(), train_binding_usage());
  std::exit(2);
}

// The integer argument `name` in [lo, hi] (else an orbit::Error naming it and the range).
int int_argument(const cli::Args& a, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const int64_t v = a.get_int(name, fallback);
  ORBIT_CHECK(v >= lo && v <= hi,
              kCommand << ": argument '" << name << "' must be in [" << lo << ", " << hi << "], got " << v);
  return static_cast<int>(v);
}

// The decimal argument `name`, finite and within [lo, hi] (lo excluded when `open_below`).
double double_argument(const cli::Args& a, const char* name, double fallback, double lo, double hi, bool open_below) {
  const double v = a.get_double(name, fallback);
  if (std::isfinite(v) && (open_below ? v > lo : v >= lo) && v <= hi) return v;
  std::ostringstream range;
  range << (open_below ? "(" : "[") << lo << ", ";
  if (std::isinf(hi)) {
    range << "inf)";
  } else {
    range << hi << "]";
  }
  ORBIT_FAIL(kCommand << ": argument '" << name << "' must be a finite number in " << range.str() << ", got "
                      << a.get_or(name, ""));
}

// The task's flags with the bounds TaskGenerator accepts, then the frame length the model's positions allow.
void parse_task(const cli::Args& a, TaskOptions& t) {
  const int most_intros = std::min(8, static_cast<int>((tok::kNumObjects - t.max_texts) / 2));
  t.max_intros = int_argument(a, "--max-intros", t.max_intros, t.min_intros, most_intros);
  t.max_gap_texts = int_argument(a, "--max-gap-texts", t.max_gap_texts, 1, INT_MAX);
  t.gap_probability = double_argument(a, "--gap-prob", t.gap_probability, 0, 1, false);
  const int64_t positions = gqa_config().max_position_embeddings;  // both architectures: mla_config() agrees
  const int longest = max_frame_for_positions(t, positions);
  ORBIT_CHECK(longest >= t.frame_min, kCommand << ": no --frame-max fits " << positions
                                               << " positions with these --max-intros and --max-gap-texts");
  t.frame_max = int_argument(a, "--frame-max", t.frame_max, t.frame_min, longest);
}

// The cross-argument rules, once every value is in its own range.
void check_combination(const cli::Args& a, const TrainOptions& o) {
  ORBIT_CHECK(o.aux_weight == 0 || o.aux_layer < o.layers,
              kCommand << ": argument '--aux-layer' (" << o.aux_layer << ") must be below --layers (" << o.layers
                       << ") while --aux-weight is above 0: the model has no layer " << o.aux_layer
                       << " to read the auxiliary captions after (or give --aux-weight 0)");
  if (a.has("--stop-at")) {
    ORBIT_CHECK(o.eval_every > 0 && o.eval_every < o.steps,
                kCommand << ": argument '--stop-at' needs an evaluation during training: give --eval-every between 1 "
                            "and --steps - 1 (got --eval-every "
                         << o.eval_every << " with --steps " << o.steps << ")");
  }
  const TaskGenerator check(o.seed, Split::kTrain, o.task);  // its own check, in case the bounds above fall behind
  (void)check;
}

}  // namespace

const char* train_binding_usage() {
  static const std::string text = usage_text();
  return text.c_str();
}

Command parse_command(int argc, char** argv) {
  Command c;
  TrainOptions& o = c.options;
  for (int i = 0; i < argc; ++i) c.line += (i ? " " : "") + std::string(argv[i]);
  try {
    const cli::Args a(kCommand,
                      {{"--model", "--out", "--steps", "--batch", "--seed", "--threads", "--lr", "--layers",
                        "--eval-every", "--eval-episodes", "--stop-at", "--warmup", "--caption-weight", "--aux-weight",
                        "--aux-layer", "--max-intros", "--frame-max", "--gap-prob", "--max-gap-texts"},
                       {},
                       train_binding_usage()},
                      argc, argv, 1);
    ORBIT_CHECK(a.has("--out"), kCommand << ": argument '--out' is required");
    c.out = a.get_or("--out", "");
    o.model = a.get_or("--model", o.model);
    ORBIT_CHECK(o.model == "gqa" || o.model == "mla",
                kCommand << ": argument '--model' must be gqa or mla, got '" << o.model << "'");
    o.steps = int_argument(a, "--steps", o.steps, 1, INT_MAX);
    o.batch = int_argument(a, "--batch", o.batch, 1, INT_MAX / 8);  // episodes are drawn 8 batches at a time
    o.seed = a.get_seed("--seed", o.seed);
    c.threads = int_argument(a, "--threads", c.threads, 1, INT_MAX);
    o.lr = double_argument(a, "--lr", o.lr, 0, HUGE_VAL, true);
    o.layers = int_argument(a, "--layers", o.layers, 1, INT_MAX);
    o.eval_every = int_argument(a, "--eval-every", o.eval_every, 0, INT_MAX);
    o.eval_episodes = int_argument(a, "--eval-episodes", o.eval_episodes, 1, INT_MAX);
    o.stop_at = a.has("--stop-at") ? double_argument(a, "--stop-at", 0, 0, 1, true) : 0;
    o.warmup = int_argument(a, "--warmup", o.warmup, 0, INT_MAX);
    o.caption_weight = double_argument(a, "--caption-weight", o.caption_weight, 0, HUGE_VAL, false);
    o.aux_weight = double_argument(a, "--aux-weight", o.aux_weight, 0, HUGE_VAL, false);
    o.aux_layer = int_argument(a, "--aux-layer", o.aux_layer, 0, INT_MAX);
    parse_task(a, o.task);
    check_combination(a, o);
  } catch (const std::exception& e) {
    usage(e.what());
  }
  return c;
}

}  // namespace orbit::binding
