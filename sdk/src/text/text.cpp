// Text in and out of the Engine and its windows (engine.h, window.h): each text call tokenizes with the
// engine's tokenizer, then does what the token-id call does. Also the window's token ids as a prefix cache
// reads them (Window::token_ids).
#include "engine/engine_core.h"
#include "orbit/common/error.h"
#include "orbit/engine.h"
#include "text/text_bound.h"
#include "window/window_state.h"

namespace orbit {

// Like every Engine call but stats(), each holds the engine: after close() it throws "engine is closed".
bool Engine::has_tokenizer() const {
  const detail::OpHold hold(*core_);
  return core_->has_tokenizer();
}

std::vector<int64_t> Engine::tokenize(std::string_view text, bool bos) const {
  const detail::OpHold hold(*core_);
  return core_->tokenizer().encode(text, bos);
}

std::string Engine::detokenize(const std::vector<int64_t>& tokens, int64_t previous) const {
  const detail::OpHold hold(*core_);
  const int64_t vocab = core_->tokenizer().vocab_size();
  ORBIT_CHECK(previous >= -1 && previous < vocab,
              "detokenize: previous = " << previous << " is neither -1 (nothing) nor a token of the vocabulary [0, "
                                        << vocab << ")");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ORBIT_CHECK(tokens[i] >= 0 && tokens[i] < vocab,
                "detokenize: tokens[" << i << "] = " << tokens[i] << " is outside the vocabulary [0, " << vocab << ")");
  }
  return core_->tokenizer().decode(tokens, previous);
}

std::string Engine::piece(int64_t token) const {
  const detail::OpHold hold(*core_);
  const int64_t vocab = core_->tokenizer().vocab_size();
  ORBIT_CHECK(token >= 0 && token < vocab,
              "piece: token " << token << " is outside the vocabulary [0, " << vocab << ")");
  return core_->tokenizer().piece(token);
}

namespace {

// check_text_fits against the engine's model and tokenizer.
void check_fits(const detail::EngineCore& core, std::string_view text, const char* what) {
  const runtime::Tokenizer& tokenizer = core.tokenizer();
  detail::check_text_fits(
      text, core.max_positions(), [&] { return tokenizer.longest_piece_bytes(); }, what);
}

}  // namespace

void Engine::check_text_fits(std::string_view text, const std::string& what) const {
  check_fits(*core_, text, what.c_str());
}

ChunkRef Engine::add_text(std::string_view text, const ChunkOptions& options, bool bos) {
  check_fits(*core_, text, "add_text");
  const std::vector<int64_t> tokens = core_->tokenizer().encode(text, bos);
  ORBIT_CHECK(!tokens.empty(), "add_text: the text is empty");
  return add_tokens(tokens, options);
}

namespace {

std::vector<int64_t> continuation(const detail::WindowState& state, std::string_view text, const char* what) {
  check_fits(*state.core, text, what);
  std::vector<int64_t> tokens = state.core->tokenizer().encode(text, false);
  ORBIT_CHECK(!tokens.empty(), what << ": the text is empty");
  return tokens;
}

}  // namespace

std::vector<int64_t> Window::token_ids() const {
  const detail::OpHold hold(*state_->core);
  return state_->token_ids();
}

Plan Window::plan_add_turn(std::string_view text) const {
  return plan_add_turn(continuation(*state_, text, "add_turn"));
}

ApplyReport Window::add_turn(std::string_view text) { return add_turn(continuation(*state_, text, "add_turn")); }

Logits Window::logits(std::string_view query, bool all_rows) const {
  return logits(continuation(*state_, query, "logits"), all_rows);
}

Generation Window::generate(std::string_view query, const GenerateOptions& options) const {
  return generate(continuation(*state_, query, "generate"), options);
}

}  // namespace orbit
