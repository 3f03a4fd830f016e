// Messages in, window operations out: Window::sync(messages) (window.h) and Engine::render_chat (engine.h).
//
// An agent framework keeps a message list and sends the whole of it to a chat API on every call. sync takes
// that list as it is, renders it with the model's chat template, and turns the difference between the
// rendering and the window into window operations: evict what was removed, reorder what moved, recall
// what came back, admit what is new, keep the rest. The operations are ordinary plans applied under the
// window's policy (the default one defers repairs to the next read, so a sync with several edits costs
// what their combined effect costs).
//
//   std::vector<orbit::ChatMessage> messages = {{"system", "You are terse."}, {"user", "Read this file."}};
//   orbit::SyncReport r = window.sync(messages);             // the window now holds the rendering
//   orbit::Generation g = window.generate(r.generation_prompt);
//   messages.push_back({"assistant", g.text});               // ... then a tool result, the next user turn
//   window.sync(messages);                                   // appends what is new, nothing else
//
// How a message list becomes instances (the unit of reuse is the rendered message):
//   1. Rendering: the list is rendered with add_generation_prompt = false (the window holds the
//      conversation); the generation prompt (the next assistant header) is returned apart, as
//      SyncReport::generation_prompt, for the caller to pass as generate()'s query.
//   2. Message boundaries in the text: the template is rendered again over every prefix messages[0, i);
//      where that rendering is a prefix of the full one, its end is the boundary of message i. Templates
//      that render a message differently depending on what follows it (Mistral moves the system prompt
//      into the last user turn; a template that treats the last message apart) give no boundary there,
//      and the messages on both sides form one unit.
//   3. Tokens: the window's tokens are exactly tokenize(rendering) (no special tokens added; templates
//      write their own BOS). A text boundary is cut in the tokens only where it is also a token boundary:
//      each unit's tokens tokenized alone concatenate to the whole (true for templates whose turns start
//      with a special token: Llama 3, Qwen2.5, ChatML, Gemma), or else tokenize(rendering[0, boundary))
//      is a prefix of tokenize(rendering). Where BPE merges across a boundary (text that runs on from
//      one message into the next without a special token or a space the merges respect), the two
//      messages form one unit. So the concatenation of the window's instances always equals
//      tokenize(rendering): the only price of a merged boundary is coarser reuse. The second test tokenizes
//      each prefix: O(messages x text) work, paid only by tokenizers that fail the first.
//   4. Content addressing: a unit's key is the content key of its tokens (chunks and turns alike). A unit
//      of at least SyncOptions::chunk_min_tokens tokens (a tool output, a document) is a chunk: stored
//      position-free, patched, reusable at any position and recallable after eviction. A shorter unit
//      appended at the tail is a live turn (prefilled, never stored). A short unit that must go anywhere
//      but the tail becomes a chunk too (turns are only ever appended).
//   5. Diff: each unit is matched to an instance of the window with the same key (first match in window
//      order); instances nothing matches are evicted (chunks stay recallable); if the matched instances'
//      order differs from the list's, one reorder puts them in order; each unmatched unit is then placed
//      before the next matched one: a chunk the window evicted earlier is recalled, another chunk admitted,
//      a short unit at the tail added as a turn. A unit whose key is in the window twice (the same message
//      text rendered identically twice) is added once as a chunk and otherwise as a turn at the tail,
//      followed by a reorder. sync works on any window: instances it did not make are evicted unless the
//      rendering contains them.
//
// Models without a chat template (llama2.c models such as stories260K, TinyStories-656K) use
// SyncOptions::chat.chat_template when given, else kPlainChatTemplate: "role: content" and a newline per
// message, and "assistant:" as the generation prompt, with the tokenizer's BOS text first when the tokenizer
// reads that text back as BOS (Hugging Face tokenizers; llama2.c's does not, so its plain rendering has no
// BOS).
//
// Limits: message content is text (a list of content parts, images included, is not accepted here: admit
// media chunks with Window::admit, in a window sync does not manage); a unit's key depends on its rendering,
// so a message whose rendering depends on its place (a template that numbers turns, or marks the first one)
// is a new unit when it moves. Several units inserted between kept instances in one sync are separate
// admits, each re-planning what follows it, so an instance after two insertions may be repaired twice.
//
// Against a prefix cache (tests/cpp/test_sync.cpp measures it): over random edits (append, trim, remove,
// summarize, move, re-insert, duplicate) sync forwards fewer tokens in total than a prefix cache reading the
// same lists. Single reads can cost more: a repair the KL budget deferred is paid at a later read, and a list
// that comes back to one read before (a retried branch) is where a radix cache that kept every sequence
// wins: it holds that list's exact KV, while orbit recomputes what it did not store for that context (turns
// are never stored; a chunk kept approximate there, or whose rank-16 patch the budget rejects near the
// tail, is formed again). A unit that appears twice (the same message rendered identically) is a turn the
// second time, recomputed whenever it comes back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "orbit/chunk.h"
#include "orbit/plan.h"

namespace orbit {

// One call in an assistant message; templates see {"id", "type": "function", "function": {"name",
// "arguments": the arguments parsed as JSON}}.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments = "{}";  // a JSON object, as text
};

// One message as a chat API takes it.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ... (required)
  std::string content;
  std::optional<std::string> name;          // message.name when set
  std::optional<std::string> tool_call_id;  // message.tool_call_id when set (tool results)
  std::vector<ChatToolCall> tool_calls;     // message.tool_calls when non-empty
};

// The built-in template for models without one (Jinja, as a chat_template string).
inline constexpr const char* kPlainChatTemplate =
    "{{ bos_token }}{% for message in messages %}{{ message.role }}: {{ message.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

struct ChatOptions {
  // A chat template (Jinja source) to use instead of the model's. Empty: the model's (tokenizer_config.json
  // of a Hugging Face directory), else kPlainChatTemplate.
  std::string chat_template;
  std::string tools_json;  // a JSON array of tool schemas (the template's `tools`); empty: none
  std::string extra_json;  // a JSON object of further template variables; empty: none
};

struct SyncOptions {
  ChatOptions chat;
  // A unit (a message's rendered span, template tokens included) of at least this many tokens becomes a
  // chunk (stored, reusable at any position, recallable); a shorter one appended at the tail stays a
  // live turn. 0: every unit is a chunk.
  int64_t chunk_min_tokens = 64;
};

// What sync does with one unit of the rendering.
enum class SyncAction {
  kKeep,    // an instance of the window holds it already (kept in place, or moved by the reorder)
  kAdmit,   // a new chunk admitted
  kRecall,  // a chunk the window evicted earlier, recalled
  kTurn,    // a live turn added at the tail
};
const char* sync_action_name(SyncAction action) noexcept;  // "keep", "admit", "recall", "turn"

// One unit of the rendering: the messages [first_message, end_message) and their tokens in the window.
struct SyncUnit {
  int64_t first_message = 0;
  int64_t end_message = 0;  // > first_message, except a rendering of no messages (a template's own text)
  int64_t position = 0;     // first token in the window after sync
  std::vector<int64_t> tokens;
  std::string key;  // content key of the tokens
  bool is_turn = false;
  SyncAction action = SyncAction::kKeep;
  bool moved = false;       // kKeep: the reorder moved it
  InstanceId instance = 0;  // the instance holding it (kKeep: before sync too; else: known after apply)
};

// What sync will do, planned on the window as it is (Window::plan_sync; const).
struct SyncPlan {
  std::vector<SyncUnit> units;             // the window after sync, in order
  std::vector<InstanceId> evict;           // instances to evict, in window order
  bool reorder = false;                    // the kept instances change order (one reorder)
  std::vector<int64_t> tokens;             // the window's tokens after sync: tokenize(rendering)
  std::vector<int64_t> generation_prompt;  // tokens the template adds with add_generation_prompt
  bool generation_prompt_exact = true;     // tokens + generation_prompt == tokenize(rendering with it)
  int64_t merged_boundaries = 0;           // message boundaries no unit boundary could follow
  std::string chat_template;               // which template rendered it ("model", "options", "plain")
  int64_t count(SyncAction action) const;
  bool changes() const;          // false: the window holds the rendering already (sync applies nothing)
  std::string describe() const;  // one line per unit and eviction
};

// What Window::sync did.
struct SyncReport {
  SyncPlan plan;                           // what it planned (units carry their instance ids)
  std::vector<Plan> plans;                 // every window operation applied, in order
  std::vector<ApplyReport> reports;        // their reports, one per plan
  double forward_tokens = 0;               // Σ reports: critical-path token-forwards (repairs deferred to the
                                           // next read are counted there, not here)
  std::vector<int64_t> generation_prompt;  // = plan.generation_prompt: generate()'s query for the next turn
};

}  // namespace orbit
