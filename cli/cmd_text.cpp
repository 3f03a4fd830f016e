// `orbit tokenize` and `orbit generate`: text in, ids or text out, with the model's tokenizer.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "commands.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "text_input.h"

namespace orbit::cli {

using nlohmann::json;

namespace {

const char* kTokenizeUsage =
    "usage: orbit tokenize (--model PATH [--tokenizer FILE] | --tokenizer FILE) --text TEXT [--no-bos] [--pieces]\n"
    "  Prints {\"tokens\": [...]}: TEXT encoded by the model's tokenizer: a llama2.c one as llama2.c does (BOS,\n"
    "  the dummy-prefix space, code points or their bytes <0xNN>, merges by score), a tokenizer.json as\n"
    "  Hugging Face's tokenizers do.\n"
    "  --model PATH       a llama2.c .bin (its tokenizer is tok<vocab>.bin or tokenizer.bin beside it) or a\n"
    "                     Hugging Face directory (its tokenizer.json)\n"
    "  --text TEXT        UTF-8 text\n"
    "  --no-bos           no BOS id first\n"
    "  --pieces           also print \"pieces\": each id's vocabulary entry\n"
    "  --tokenizer FILE   a tokenizer (llama2.c .bin or tokenizer.json) instead of the one beside the model (or "
    "without a model)\n";

const char* kGenerateUsage =
    "usage: orbit generate --model PATH --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P] [--seed S]\n"
    "                      [--json] [--tokenizer FILE] [--no-bos]\n"
    "  Continues PROMPT (encoded with BOS) and prints the continuation as text, as it is decoded (--json: once,\n"
    "  at the end). Generation stops at BOS or\n"
    "  EOS (as llama2.c's run.c stops at BOS), at N tokens, or at the model's last position.\n"
    "  --model PATH       a llama2.c .bin with its tokenizer beside it, a Hugging Face directory with its\n"
    "                     tokenizer.json, or any model with --tokenizer\n"
    "  --prompt TEXT      UTF-8 text (may be empty: generation from BOS alone)\n"
    "  --max-tokens N     most tokens to generate (default 256, run.c's default steps)\n"
    "  --temperature T    0 = greedy (default); > 0 samples softmax(logits / T)\n"
    "  --top-p P          nucleus sampling: the smallest set of tokens with mass >= P (default 1; with\n"
    "                     --temperature > 0)\n"
    "  --seed S           sampling seed (default 0; with --temperature > 0)\n"
    "  --json             print {\"tokens\": [generated ids], \"text\": \"...\", \"stop_reason\": R} instead;\n"
    "                     R: \"stop_token\" (BOS or EOS, not in tokens), \"max_tokens\" or \"position_limit\"\n"
    "  --tokenizer FILE   a tokenizer (llama2.c .bin or tokenizer.json) instead of the one beside the model\n"
    "  --no-bos           encode PROMPT without BOS: for text that writes its own, such as a chat template's\n"
    "                     rendering (the tokens `orbit serve` reads for the same messages)\n";

}  // namespace

int run_tokenize(int argc, char** argv, int first) {
  const Args args("tokenize", ArgSpec{{"--model", "--text", "--tokenizer"}, {"--no-bos", "--pieces"}, kTokenizeUsage},
                  argc, argv, first);
  const std::string text = args.required("--text");
  ORBIT_CHECK(args.has("--model") || args.has("--tokenizer"),
              "tokenize: missing required argument '--model' (or '--tokenizer')");
  const std::unique_ptr<runtime::Tokenizer> tokenizer =
      args.has("--model") ? model_tokenizer(args, args.required("--model"), model_vocab_size(args.required("--model")))
                          : runtime::load_tokenizer(args.required("--tokenizer"));
  const std::vector<int64_t> ids = tokenizer->encode(text, !args.flag("--no-bos"));
  json out = {{"tokens", ids}};
  if (args.flag("--pieces")) {
    std::vector<std::string> pieces;
    for (int64_t id : ids) pieces.push_back(tokenizer->piece(id));
    out["pieces"] = pieces;
  }
  std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

int run_generate(int argc, char** argv, int first) {
  const Args args("generate",
                  ArgSpec{{"--model", "--prompt", "--max-tokens", "--temperature", "--top-p", "--seed", "--tokenizer"},
                          {"--json", "--no-bos"},
                          kGenerateUsage},
                  argc, argv, first);
  EngineOptions eo;
  eo.model = args.required("--model");
  const std::string prompt = args.required("--prompt");
  eo.tokenizer = args.get_or("--tokenizer", "");
  GenerateOptions go;
  go.max_tokens = args.get_int("--max-tokens", 256, 1);
  go.temperature = args.get_double("--temperature", 0.0);
  go.top_p = args.get_double("--top-p", 1.0);
  go.seed = args.get_seed("--seed", 0);
  ORBIT_CHECK(go.temperature >= 0 && std::isfinite(go.temperature),
              "generate: argument '--temperature' must be a finite number >= 0, got " << go.temperature);
  ORBIT_CHECK(go.top_p >= 0 && go.top_p <= 1, "generate: argument '--top-p' must be in [0, 1], got " << go.top_p);
  // Greedy decoding takes the top token: nucleus sampling and the seed would change nothing.
  for (const char* name : {"--top-p", "--seed"}) {
    ORBIT_CHECK(!args.has(name) || go.temperature > 0,
                "generate: argument '" << name << "' applies only with --temperature > 0 (greedy decoding otherwise)");
  }
  eo.pool_bytes = int64_t{8} << 20;
  if (eo.tokenizer.empty()) {
    // Fail before loading the weights when there is no tokenizer to read the prompt with.
    (void)model_tokenizer(args, eo.model, model_vocab_size(eo.model));
  }
  auto engine = Engine::open(eo);
  const ModelInfo info = engine->model_info();  // its BOS and EOS end the run (GenerateOptions::ignore_eos false)
  const std::vector<int64_t> query = engine->tokenize(prompt, !args.flag("--no-bos"));
  ORBIT_CHECK(!query.empty(), "generate: --prompt is empty and --no-bos leaves no token to continue from");
  ORBIT_CHECK(info.max_positions <= 0 || static_cast<int64_t>(query.size()) < info.max_positions,
              "generate: --prompt gives " << query.size() << " tokens, and the model's " << info.max_positions
                                          << " positions leave no room for an answer after them");
  Window window = engine->new_window();
  const bool as_json = args.flag("--json");
  if (!as_json) {
    // The text is written as it is decoded (Ctrl-C keeps what came so far): its pieces join to the answer's text.
    go.on_text = [](const std::string& piece) {  // a failed write stops the decode (main reports it)
      return std::fwrite(piece.data(), 1, piece.size(), stdout) == piece.size() && std::fflush(stdout) == 0;
    };
  }
  Generation g = window.generate(query, go);
  if (!as_json) {
    std::fputc('\n', stdout);
    return 0;
  }
  if (g.stop_reason == "stop_token") g.tokens.pop_back();  // the BOS / EOS that ended it is not output
  const std::string text = engine->detokenize(g.tokens, query.back());
  std::cout << json{{"tokens", g.tokens}, {"text", text}, {"stop_reason", g.stop_reason}}.dump(
                   -1, ' ', false, json::error_handler_t::replace)
            << "\n";
  return 0;
}

}  // namespace orbit::cli
