// bench_constrain: a constrained decode step against an unconstrained one, side by side in one run.
//
// 1. The bundled models (stories260K: llama2.c, 512 tokens; TinyStories-656K: Hugging Face, 2048 tokens),
//    on workloads that cannot finish within --steps, so both runs make the same number of steps:
//      string   {"type": "string", "minLength": 4096}: every step inside one string (the widest masks)
//      people   an array of at least 100 objects {name, age, pets, happy}: keys, strings, numbers, enums
//    (TinyStories-656K has no '[': its "people" run stops at once, constraint_no_token, and is skipped.)
//    "generate": Window::generate of --steps tokens after a short story turn, greedy, with and without
//    GenerateOptions::constraint; a step is Generation::seconds / tokens (the forward, the logits' copy, the
//    mask and the matcher's advance when constrained, the argmax), the fastest of --reps runs each,
//    interleaved and each going first in turn (on a shared machine, the least disturbed run). "cold" is the
//    first masked run of a fresh Constraint, its masks computed as states come up.
//    "decode loop": the model's own forward, one token a step after a prompt, its KV extended as generate
//    does, timed in one loop with both steps (below). The mask's cost is there apart from the machine's noise.
// 2. A synthetic byte-level vocabulary of --vocab tokens (default 128000: the 256 bytes, JSON's punctuation,
//    and random strings of BPE-like lengths, 2 to 16 bytes, most of them letters after a space), where a
//    real model is not at hand. The forward is stood in for by the LM head alone: logits = h · W with
//    h [1, --hidden] and W [--hidden, vocab] float32 (one GEMV, what any model of that vocabulary pays at
//    least per step: a 1B model of a 128k vocabulary has this very head). Workloads: object (json_object),
//    people (as above), records (an array of at least 100 objects whose fields are a date-time, an e-mail,
//    a pattern and a number in [0, 1]: byte automata), string ({"type": "string"}: with random logits a
//    token holding '"' soon ends it).
//    Then the same over a real byte-level BPE vocabulary, GPT-2's 50,257 tokens (tests/data/tokenizers).
//    Budgeted rows (over both vocabularies; --budget-only runs them alone): obj/24 (json_object), few/48
//    (one to three people) and names/48 (a map whose keys are a pattern of at most 6 letters: the budget's
//    state bound counts its longest key, Grammar::shaped_extra), runs of 24 and 48 tokens whose answer must
//    finish within them (mask_logits with the tokens left), where the budget binds towards each run's end,
//    names/4096, where it never binds, and words/48 and words/512 (the same map, keys of every length); the
//    sample column says at how many steps it dropped some token, and how many of the budget's '"'/',' tokens its bound
//    settled and how many the key log walked (TokenConstraint:: budget_counts; the untimed check of whether it dropped
//    one counts too, so each step's tokens are counted twice).
// A loop times both steps over the same forward: unmasked = forward + argmax; masked = forward + mask +
// argmax + advance, the constrained choice fed back; runs restart with the same Constraint when the text
// completes. "mask", "mask p99", "mask max": the mask and the advance alone per step, warm; "cold": the
// masked step of a first run, whose masks are computed as their states come up (each a walk of the
// vocabulary trie). Not a test: absolute numbers depend on the machine and its load; masked / unmasked is
// the figure.
//
// 3. --open-tag: a Sampler step where a reasoning model may still open its block before a constrained
//    answer (bench_open_tag.h) against the plain constrained step, over both vocabularies; nothing else runs.
// 4. --key-growth: a step's cost at the 1st, 51st, 101st and last of --keys members of one object
//    (bench_key_growth.h), over the synthetic vocabulary or --tokenizer's; nothing else runs.
//
//   bench_constrain [--steps 200] [--reps 5] [--vocab 128000] [--hidden 2048] [--synthetic-steps 150]
//                   [--threads N] [--models DIR] [--json PATH] [--models-only] [--budget-only] [--open-tag]
//                   [--key-growth [--keys 200] [--cases a,b] [--values integer|string] [--tokenizer PATH]]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "args.h"
#include "bench_key_growth.h"
#include "bench_open_tag.h"
#include "constrain/tokenizer_vocabulary.h"
#include "orbit/constraint.h"
#include "orbit/engine.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/tokenizer.h"
#include "orbit/window.h"

namespace {

using namespace orbit;
namespace rt = orbit::runtime;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The fastest of several runs: on a shared machine, the run the least disturbed by other work.
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

const char* kPeople = R"({"type": "array", "minItems": 100, "items": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog", "bird"]}, "maxItems": 3},
    "happy": {"type": "boolean"}}, "required": ["name", "age", "happy"]}})";
// Records whose fields are byte automata (format, pattern, number bounds: sdk/src/constrain/schema_regular.h).
const char* kRecords = R"({"type": "array", "minItems": 100, "items": {"type": "object", "properties": {
    "when": {"type": "string", "format": "date-time"}, "email": {"type": "string", "format": "email"},
    "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"}, "score": {"type": "number", "minimum": 0,
    "maximum": 1}}, "required": ["when", "email", "code", "score"]}})";
// A few people: a completion of some 60 bytes, which a budget of tokens can bind.
const char* kFewPeople = R"({"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object",
    "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}},
    "additionalProperties": {"type": "boolean"}, "required": ["name", "age"]}})";
// A map whose keys are a pattern (Grammar::shaped_extra: its longest key, 8 bytes quoted).
const char* kNamedKeys = R"({"type": "object", "propertyNames": {"pattern": "^[a-z]{1,6}$"},
    "additionalProperties": {"type": "integer"}})";
// The same with keys of every length: its longest key is 6,146 bytes at the default 1,024 characters, but one
// more key than the map may hold (257) is free within 4 bytes ('"', two letters, '"'): counted as 24.
const char* kWordKeys = R"({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"},
    "additionalProperties": {"type": "integer"}})";
const char* kLongString = R"({"type": "string", "minLength": 4096, "maxLength": 8192})";
const char* kString = R"({"type": "string", "maxLength": 8192})";

struct Row {
  std::string setting, workload;
  int64_t vocab = 0;
  double unmasked_ms = 0, masked_ms = 0, cold_ms = 0, mask_ms = -1, mask_p99_ms = -1, mask_max_ms = -1;
  std::string sample;
};

void print_row(const Row& r) {
  std::printf("%-26s %-7s %7lld %9.3f %9.3f %6.3f %9.3f %9.4f %9.4f %9.3f  %s\n", r.setting.c_str(), r.workload.c_str(),
              static_cast<long long>(r.vocab), r.unmasked_ms, r.masked_ms, r.masked_ms / r.unmasked_ms, r.cold_ms,
              r.mask_ms, r.mask_p99_ms, r.mask_max_ms, r.sample.c_str());
}

// ---- 2. a synthetic 100k+ vocabulary with the LM head as the forward

std::shared_ptr<const TokenVocabulary> synthetic_vocabulary(int64_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TokenBytes b;
  std::set<std::string> seen;
  const auto add = [&](const std::string& s) {
    if (seen.insert(s).second) b.text.emplace_back(s);
  };
  for (int c = 0; c < 256; ++c) add(std::string(1, static_cast<char>(c)));
  for (const char* p : {"{\"", "\":", "\": ",  "\", \"", ", \"",  "\"}",         "}}",          "]}",
                        "},",  "[\"", "[{",    "true",   "false", "null",        "\"name\"",    "\"age\"",
                        "\\n", " \"", "\":\"", "\"]",    "\"},",  "<tool_call>", "</tool_call>"}) {
    add(p);
  }
  // Lengths of BPE tokens (bytes), roughly those of a 128k English-and-code vocabulary.
  const std::vector<double> weights{0, 0, 14, 17, 16, 14, 11, 8, 6, 4, 3, 2, 1.5, 1, 0.8, 0.5, 0.4};
  std::discrete_distribution<int> length(weights.begin(), weights.end());
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  const std::string other = "ETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,:;!?'\"-_()[]{}/\\#@*+=<>";
  std::uniform_real_distribution<double> u(0, 1);
  while (static_cast<int64_t>(b.text.size()) < size) {
    const int n = length(rng);
    std::string s;
    if (u(rng) < 0.6) s.push_back(' ');
    while (static_cast<int>(s.size()) < n) {
      // Letters mostly, skewed to the frequent ones; sometimes digits, capitals and punctuation.
      if (u(rng) < 0.85) {
        s.push_back(letters[static_cast<std::size_t>(std::min(25.0, -std::log(1 - u(rng)) * 7.0))]);
      } else {
        s.push_back(other[rng() % other.size()]);
      }
    }
    add(s);
  }
  return TokenVocabulary::from_bytes(std::move(b));
}

// A decode step's source of logits: start() begins a run (a prefill, say), next(token) returns the logits
// after `token` (-1 at a run's first step) as [vocab] float32 on the CPU, contiguous.
struct StepSource {
  std::function<void()> start;
  std::function<at::Tensor(int64_t)> next;
};

// One loop times both steps over the same forward: unmasked = forward + argmax of the raw logits; masked =
// forward + mask + argmax of the masked logits + advance (and a fresh run when the text is done). The
// constrained choice is what is fed back. Row: the warm run; cold_ms: the masked step of a first run.
// With `budget` >= 0 each run has that many tokens (a max_tokens the answer must finish within): the mask
// gets the tokens left after the step's, and a run that used them all starts over.
Row loop_bench(Row row, const std::shared_ptr<const Constraint>& constraint,
               const std::shared_ptr<const TokenVocabulary>& vocab, const StepSource& source, int64_t steps,
               int64_t budget = -1) {
  struct Times {
    double unmasked = 0, masked = 0;
    std::vector<double> overhead;          // mask + advance, per step
    int64_t binds = 0;                     // steps whose budget dropped some token (not timed)
    TokenConstraint::BudgetCounts budget;  // the budget's '"'/',' tokens settled by its bound or walked
  };
  std::string sample;
  const auto run = [&](int64_t n) {
    Times t;
    TokenConstraint tc(constraint, vocab);
    int64_t used = 0;  // the run's tokens so far
    source.start();
    int64_t token = -1;
    const auto count = [&] {
      t.budget.settled += tc.budget_counts().settled;
      t.budget.walked += tc.budget_counts().walked;
    };
    for (int64_t i = 0; i < n; ++i) {
      if (budget >= 0 && used == budget) {
        count();
        tc = TokenConstraint(constraint, vocab);
        used = 0;
      }
      const int64_t remaining = budget < 0 ? -1 : budget - used - 1;
      if (remaining >= 0) t.binds += tc.allowed(remaining).count() < tc.allowed().count();
      const auto t0 = Clock::now();
      at::Tensor logits = source.next(token);
      const double forward = ms_since(t0);
      const auto t1 = Clock::now();
      (void)logits.argmax().item<int64_t>();
      const double argmax_raw = ms_since(t1);
      const auto t2 = Clock::now();
      tc.mask_logits(logits.data_ptr<float>(), logits.size(0), remaining);
      const double mask = ms_since(t2);
      const auto t3 = Clock::now();
      token = logits.argmax().item<int64_t>();
      const double argmax_masked = ms_since(t3);
      const auto t4 = Clock::now();
      tc.accept(token);
      ++used;
      if (tc.finished()) {
        count();
        if (sample.empty()) sample = tc.matcher().text();
        tc = TokenConstraint(constraint, vocab);
        used = 0;
      }
      const double advance = ms_since(t4);
      t.unmasked += forward + argmax_raw;
      t.masked += forward + mask + argmax_masked + advance;
      t.overhead.push_back(mask + advance);
    }
    if (sample.empty()) sample = tc.matcher().text();
    count();
    t.unmasked /= static_cast<double>(n);
    t.masked /= static_cast<double>(n);
    return t;
  };
  row.vocab = vocab->size();
  row.cold_ms = run(steps).masked;  // every mask computed the first time its state comes up
  Times warm = run(steps);
  row.unmasked_ms = warm.unmasked;
  row.masked_ms = warm.masked;
  row.mask_ms = 0;
  for (double t : warm.overhead) row.mask_ms += t;
  row.mask_ms /= static_cast<double>(warm.overhead.size());
  std::sort(warm.overhead.begin(), warm.overhead.end());
  row.mask_p99_ms = warm.overhead[warm.overhead.size() * 99 / 100];
  row.mask_max_ms = warm.overhead.back();
  row.sample = sample.substr(0, 40);
  for (char& c : row.sample) c = static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  if (budget >= 0) {
    row.sample = "budget " + std::to_string(budget) + ", binds " + std::to_string(warm.binds) + "/" +
                 std::to_string(steps) + " steps, settled " + std::to_string(warm.budget.settled) + " walked " +
                 std::to_string(warm.budget.walked) + ": " + row.sample;
  }
  print_row(row);
  return row;
}

// The LM head alone as the forward: logits = h · W, h one of 64 random rows.
StepSource lm_head_source(int64_t hidden, int64_t vocab) {
  at::manual_seed(1);
  auto w = std::make_shared<at::Tensor>(at::randn({hidden, vocab}) / std::sqrt(static_cast<double>(hidden)));
  auto hs = std::make_shared<std::vector<at::Tensor>>();
  for (int i = 0; i < 64; ++i) hs->push_back(at::randn({1, hidden}));
  auto i = std::make_shared<int64_t>(0);
  return {[] {},
          [=](int64_t) { return at::matmul((*hs)[static_cast<std::size_t>((*i)++ % 64)], *w).view(-1).contiguous(); }};
}

// A bundled model decoding one token per step after a prompt, its KV kept as Window::generate keeps it.
StepSource model_source(const std::shared_ptr<const rt::Model>& model, const std::vector<int64_t>& prompt) {
  struct State {
    rt::PastKV past;
    int64_t pos = 0;
  };
  auto st = std::make_shared<State>();
  const auto forward = [model, st](const std::vector<int64_t>& tokens) {
    c10::InferenceMode guard;
    rt::ForwardInput in;
    in.tokens = tokens;
    in.positions = at::arange(st->pos, st->pos + static_cast<int64_t>(tokens.size()), at::kLong);
    rt::ForwardOptions fo;
    fo.logits = rt::LogitsMode::kLast;
    rt::ForwardResult r = model->forward(in, st->past.length() > 0 ? &st->past : nullptr, fo);
    if (st->past.length() == 0) {
      st->past.layers = r.content;
      st->past.positions = in.positions;
    } else {
      for (std::size_t l = 0; l < st->past.layers.size(); ++l) {
        st->past.layers[l].k = at::cat({st->past.layers[l].k, r.content[l].k}, 0);
        st->past.layers[l].v = at::cat({st->past.layers[l].v, r.content[l].v}, 0);
      }
      st->past.positions = at::cat({st->past.positions, in.positions}, -1);
    }
    st->pos += static_cast<int64_t>(tokens.size());
    return r.logits.view(-1).to(at::kFloat).contiguous();
  };
  auto first = std::make_shared<at::Tensor>();
  return {[=] {
            *st = State{};
            *first = forward(prompt);
          },
          [=](int64_t token) { return token < 0 ? *first : forward({token}); }};
}

// ---- 1. the bundled models through Window::generate

std::vector<Row> bench_model(const std::string& name, const std::string& path, int64_t steps, int64_t reps) {
  EngineOptions eo;
  eo.model = path;
  eo.pool_bytes = int64_t{64} << 20;
  auto engine = Engine::open(eo);
  Window w = engine->new_window();
  w.add_turn("Once upon a time, there was a little girl named Lily. She loved to play outside.");
  const std::vector<int64_t> query = engine->tokenize(" One day", false);
  GenerateOptions plain;
  plain.max_tokens = steps;
  const auto t_vocab = Clock::now();
  const auto vocabulary = token_vocabulary(*engine);  // read once per tokenizer; generate reuses it
  std::printf("%s: vocabulary of %lld tokens read in %.1f ms (once per tokenizer)\n", name.c_str(),
              static_cast<long long>(vocabulary->size()), ms_since(t_vocab));
  std::vector<Row> rows;
  for (const auto& [workload, schema] : {std::pair<std::string, const char*>{"string", kLongString},
                                         std::pair<std::string, const char*>{"people", kPeople}}) {
    GenerateOptions masked = plain;
    masked.constraint = Constraint::json_schema(schema);
    (void)w.generate(query, plain);  // warm up the forward
    const Generation cold = w.generate(query, masked);
    std::vector<double> on, off;
    Generation last;
    for (int64_t r = 0; r < reps; ++r) {  // interleaved, each going first in turn
      for (int k = 0; k < 2; ++k) {
        if ((r + k) % 2 == 0) {
          const Generation u = w.generate(query, plain);
          off.push_back(1e3 * u.seconds / static_cast<double>(u.tokens.size()));
        } else {
          last = w.generate(query, masked);
          on.push_back(1e3 * last.seconds / static_cast<double>(last.tokens.size()));
        }
      }
    }
    if (cold.tokens.empty()) {
      std::printf("%-26s %-7s: %s (its vocabulary cannot start this text)\n", (name + " generate").c_str(),
                  workload.c_str(), cold.stop_reason.c_str());
      continue;
    }
    Row row;
    row.setting = name + " generate";
    row.workload = workload;
    row.vocab = vocabulary->size();
    row.unmasked_ms = fastest(off);
    row.masked_ms = fastest(on);
    row.cold_ms = 1e3 * cold.seconds / static_cast<double>(cold.tokens.size());
    row.sample = last.text.substr(0, 40) + "... (" + std::to_string(last.tokens.size()) + " tokens)";
    for (char& c : row.sample) c = c == '\n' ? ' ' : c;
    rows.push_back(row);
    print_row(row);
  }
  // The same decode step timed inside one loop (the model's forward; the mask between it and the argmax).
  const std::shared_ptr<const rt::Model> model = rt::load_model(path);
  std::vector<int64_t> prompt = engine->tokenize(
      "Once upon a time, there was a little girl named Lily. She loved to play outside. One day", true);
  for (const auto& [workload, schema] : {std::pair<std::string, const char*>{"string", kLongString},
                                         std::pair<std::string, const char*>{"people", kPeople}}) {
    Row row;
    row.setting = name + " decode loop";
    row.workload = workload;
    const auto constraint = Constraint::json_schema(schema);
    if (TokenConstraint(constraint, vocabulary).allowed().count() == 0) continue;  // cannot start it
    rows.push_back(loop_bench(row, constraint, vocabulary, model_source(model, prompt), steps));
  }
  return rows;
}

void write_json(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "[\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << "  {\"setting\": \"" << r.setting << "\", \"workload\": \"" << r.workload << "\", \"vocab\": " << r.vocab
        << ", \"unmasked_ms\": " << r.unmasked_ms << ", \"masked_ms\": " << r.masked_ms
        << ", \"ratio\": " << r.masked_ms / r.unmasked_ms << ", \"cold_ms\": " << r.cold_ms
        << ", \"mask_ms\": " << r.mask_ms << ", \"mask_p99_ms\": " << r.mask_p99_ms
        << ", \"mask_max_ms\": " << r.mask_max_ms << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  out << "]\n";
}

// --open-tag: the open-or-answer step against the constrained step, over the synthetic vocabulary and GPT-2's.
int open_tag_rows(const orbit::cli::Args& args) {
  const int64_t reps = args.get_int("--reps", 200, 1);
  std::printf("us per Sampler step (median of %lld fresh samplers; JSON after at most two newlines)\n",
              static_cast<long long>(reps));
  orbit::bench::bench_open_tag("synthetic", synthetic_vocabulary(args.get_int("--vocab", 128000, 300), 42), reps);
  const auto gpt2 = rt::load_tokenizer(std::string(ORBIT_TOKENIZERS_DIR) + "/gpt2/tokenizer.json");
  orbit::bench::bench_open_tag("gpt2", constrain::tokenizer_vocabulary(*gpt2, gpt2->vocab_size()), reps);
  return 0;
}

// --key-growth: a decode step's cost as an object's keys pile up, over the synthetic vocabulary.
int key_growth_rows(const orbit::cli::Args& args) {
  const int64_t keys = args.get_int("--keys", 200, 2), reps = args.get_int("--reps", 3, 1);
  // The bench's objects take the default limits, whose free-form objects end at max_object_members: past it the
  // decode would find no allowed token part way.
  const int64_t most = orbit::ConstraintLimits{}.max_object_members;
  if (keys > most) {
    ORBIT_FAIL("bench_constrain: --keys " << keys << " is more than an object holds (at most " << most
                                          << ", ConstraintLimits::max_object_members)");
  }
  std::printf(
      "ms per step at the member of each key, the fastest of %lld runs; timed: TokenConstraint::allowed + "
      "accept, not the bench's search for the next token; close: the step that closes the object alone (its '}', "
      "counted in the last key's too)\n",
      static_cast<long long>(reps));
  const auto cases = orbit::bench::key_growth_cases(args.get_or("--cases", ""));
  const std::string values = args.get_or("--values", "integer"), path = args.get_or("--tokenizer", "");
  if (path.empty()) {
    orbit::bench::bench_key_growth("synthetic", synthetic_vocabulary(args.get_int("--vocab", 128000, 300), 42), keys,
                                   reps, cases, values);
    return 0;
  }
  const auto tokenizer = rt::load_tokenizer(path);
  const std::string name = std::filesystem::path(path).parent_path().filename().string();
  orbit::bench::bench_key_growth(name, constrain::tokenizer_vocabulary(*tokenizer, tokenizer->vocab_size()), keys, reps,
                                 cases, values);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  orbit::cli::ArgSpec spec;
  spec.options = {"--steps",  "--reps", "--vocab", "--hidden", "--synthetic-steps", "--threads",
                  "--models", "--json", "--keys",  "--cases",  "--values",          "--tokenizer"};
  spec.flags = {"--models-only", "--budget-only", "--open-tag", "--key-growth"};
  spec.usage =
      "bench_constrain [--steps 200] [--reps 5] [--vocab 128000] [--hidden 2048] [--synthetic-steps 150]\n"
      "                [--threads N] [--models DIR] [--json PATH] [--models-only] [--budget-only] [--open-tag]\n"
      "                [--key-growth [--keys 200] [--cases a,b] [--values integer|string] [--tokenizer PATH]]\n"
      "  a constrained decode step against an unconstrained one: the bundled models' generate, and a synthetic\n"
      "  vocabulary with the LM head standing in for the forward";
  try {
    const orbit::cli::Args args("bench_constrain", spec, argc, argv, 1);
    const int64_t threads = args.get_int("--threads", 0, 0);
    if (threads > 0) at::set_num_threads(static_cast<int>(threads));
    const std::string models = args.get_or("--models", ORBIT_MODELS_DIR);
    if (args.flag("--open-tag")) return open_tag_rows(args);
    if (args.flag("--key-growth")) return key_growth_rows(args);
    const int64_t steps = args.get_int("--steps", 200, 1), reps = args.get_int("--reps", 5, 1);
    std::printf("%d threads; ms per decode step (fastest of %lld runs of %lld steps for the models)\n",
                at::get_num_threads(), static_cast<long long>(reps), static_cast<long long>(steps));
    std::printf("%-26s %-7s %7s %9s %9s %6s %9s %9s %9s %9s  %s\n", "setting", "workload", "vocab", "unmasked",
                "masked", "ratio", "cold", "mask", "mask p99", "mask max", "sample");
    std::vector<Row> rows;
    const bool budget_only = args.flag("--budget-only");
    for (const auto& [name, dir] : {std::pair<std::string, std::string>{"stories260K", "/stories260K/stories260K.bin"},
                                    std::pair<std::string, std::string>{"tinystories-656k", "/tinystories-656k"}}) {
      if (budget_only) break;
      const std::vector<Row> r = bench_model(name, models + dir, steps, reps);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    if (args.flag("--models-only")) {
      if (args.has("--json")) write_json(args.required("--json"), rows);
      return 0;
    }
    const auto t_vocab = Clock::now();
    const auto vocab = synthetic_vocabulary(args.get_int("--vocab", 128000, 300), 42);
    std::printf("synthetic vocabulary: %lld tokens, longest %lld bytes, built in %.1f ms\n",
                static_cast<long long>(vocab->size()), static_cast<long long>(vocab->max_token_bytes()),
                ms_since(t_vocab));
    const int64_t hidden = args.get_int("--hidden", 2048, 1);
    const int64_t syn_steps = args.get_int("--synthetic-steps", 150, 10);
    const StepSource head = lm_head_source(hidden, vocab->size());
    for (const auto& [workload, constraint] :
         {std::pair<std::string, std::shared_ptr<const Constraint>>{"object", Constraint::json_object()},
          {"people", Constraint::json_schema(kPeople)},
          {"records", Constraint::json_schema(kRecords)},
          {"string", Constraint::json_schema(kString)}}) {
      if (budget_only) break;
      Row row;
      row.setting = "synthetic LM head " + std::to_string(hidden);
      row.workload = workload;
      rows.push_back(loop_bench(row, constraint, vocab, head, syn_steps));
    }
    // Runs of a few tokens that the answer must finish within: the budget binds towards each run's end.
    const auto budget_rows = [&](const std::string& setting, const std::shared_ptr<const TokenVocabulary>& v,
                                 const StepSource& source) {
      for (const auto& [workload, constraint, budget] :
           {std::tuple<std::string, std::shared_ptr<const Constraint>, int64_t>{"obj/24", Constraint::json_object(),
                                                                                24},
            {"few/48", Constraint::json_schema(kFewPeople), 48},
            {"names/48", Constraint::json_schema(kNamedKeys), 48},
            {"names/4096", Constraint::json_schema(kNamedKeys), 4096},
            {"words/48", Constraint::json_schema(kWordKeys), 48},
            {"words/512", Constraint::json_schema(kWordKeys), 512}}) {
        Row row;
        row.setting = setting;
        row.workload = workload;
        rows.push_back(loop_bench(row, constraint, v, source, syn_steps, budget));
      }
    };
    budget_rows("synthetic LM head " + std::to_string(hidden), vocab, head);
    // A real byte-level BPE vocabulary: GPT-2's 50,257 tokens (tests/data/tokenizers/gpt2), bytes read
    // through its tokenizer as generate reads an engine's.
    const auto gpt2 = rt::load_tokenizer(std::string(ORBIT_TOKENIZERS_DIR) + "/gpt2/tokenizer.json");
    const auto t_gpt2 = Clock::now();
    const auto gpt2_vocab = constrain::tokenizer_vocabulary(*gpt2, gpt2->vocab_size());
    std::printf("gpt2 vocabulary: %lld tokens, longest %lld bytes, read in %.1f ms\n",
                static_cast<long long>(gpt2_vocab->size()), static_cast<long long>(gpt2_vocab->max_token_bytes()),
                ms_since(t_gpt2));
    const StepSource gpt2_head = lm_head_source(hidden, gpt2_vocab->size());
    budget_rows("gpt2 LM head " + std::to_string(hidden), gpt2_vocab, gpt2_head);
    for (const auto& [workload, constraint] :
         {std::pair<std::string, std::shared_ptr<const Constraint>>{"object", Constraint::json_object()},
          {"people", Constraint::json_schema(kPeople)},
          {"records", Constraint::json_schema(kRecords)}}) {
      if (budget_only) break;
      Row row;
      row.setting = "gpt2 LM head " + std::to_string(hidden);
      row.workload = workload;
      rows.push_back(loop_bench(row, constraint, gpt2_vocab, gpt2_head, syn_steps));
    }
    if (args.has("--json")) write_json(args.required("--json"), rows);
  } catch (const orbit::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
