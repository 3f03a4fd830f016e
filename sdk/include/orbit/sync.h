// Messages in, window operations out: Window::sync(messages) (window.h) and Engine::render_chat (engine.h).
//
// An agent framework keeps a message list and sends the whole of it to a chat API on every call. sync takes
// that list as it is, renders it with the model's chat template, and turns the difference between the
// rendering and the window into window operations: evict what was removed, reorder what moved, recall
// what came back, admit what is new, keep the rest. A sync that adds units (an admit, a recall or a turn) is
// one plan (Operation::kSync) of the window after all of them, so each instance is served once, for the
// window the whole edit leaves (never more forwards than re-prefilling from the first change). A sync that
// only removes or moves is its evictions and a reorder: edits, whose repairs the default policy defers to
// the next read. Either way, under the window's policy.
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
//      and the messages on both sides form one unit. Where a turn renders otherwise once later messages
//      arrive (Qwen3 hides an answer's reasoning once a query follows it), steps 2 and 3 read an earlier
//      list's cuts and tokens only as far as its rendering and the new one agree byte for byte:
//      tests/cpp/test_sync_rerender.cpp syncs Qwen3's and Mistral Nemo's templates step by step and checks
//      the window against @huggingface/jinja's rendering of each whole list, and its units against
//      rendering every prefix. The list is converted for the template once
//      (runtime::ChatTemplate::prepare: messages, tools and extra variables), not once per prefix, and what
//      each prefix rendered to is kept (process-wide, bounded: 4096 lists and 64 MiB by default,
//      orbit/sync_memo.h, least recently used dropped first) for the lists that follow: a list that starts with an
//      earlier list's messages, under the same template and variables, reads those prefixes' boundaries instead of
//      rendering them again, so an agent's next request (its last list and a few more messages) renders only the
//      prefixes past it (also where the template renders a prefix otherwise than the head of the whole rendering, as
//      Qwen3 and Mistral Nemo do for about half of them, wherever that text parts from the earlier rendering
//      before the new rendering does). A list trimmed or summarized at its start (the same first message, its oldest
//      turns dropped or replaced) reads the prefixes that end in its kept messages from the latest list with that first
//      message, where both renderings agree byte for byte over those messages, and renders two of them to
//      check (about 2 renders instead of n). A list whose first message changed (a system prompt that carries
//      the date, a memory digest or a step counter, rewritten at every request), alone or with turns added or
//      trimmed, reads them so from the latest list with the same second message (the agent's first request),
//      else from the latest under the same template and variables (about 3 renders and one per added turn).
//      The boundaries are the same either way (sdk/src/window/sync_memo.h gives the argument), but for a
//      template whose rendering of a shorter list depends on its length, or on a message before the kept
//      ones, in a way the whole renderings do not show (a line only at exactly 30 messages): there such a
//      list's boundaries may differ, never its tokens. Every render of one sync reads one time; a template
//      that reads the clock (strftime_now: Llama 3.2 writes today's date) reads an earlier list's renders only
//      while each strftime_now call they made gives the same text at that time (a date's until midnight).
//   3. Tokens: the window's tokens are exactly tokenize(rendering) (no special tokens added; templates
//      write their own BOS). A text boundary is cut in the tokens only where it is also a token boundary:
//      each unit's tokens tokenized alone concatenate to the whole (true for templates whose turns start
//      with a special token: Llama 3, Qwen2.5, ChatML, Gemma), or else tokenize(rendering[0, boundary))
//      is a prefix of tokenize(rendering). Where BPE merges across a boundary (text that runs on from
//      one message into the next without a special token or a space the merges respect), the two
//      messages form one unit. So the concatenation of the window's instances always equals
//      tokenize(rendering): the only price of a merged boundary is coarser reuse. The second test tokenizes
//      each prefix, O(messages x text) work, except with a prefix-stable tokenizer (runtime::Tokenizer::
//      prefix_stable: llama2.c's, and SentencePiece-style tokenizer.json files without a pre-tokenizer):
//      there the text's one tokenize gives each token's bytes, and a boundary no token straddles passes with
//      no prefix tokenized (as does the rendering's end, the last text being tokenized with the generation
//      prompt after it); only boundaries a token straddles tokenize their prefix. The units are the same
//      either way. A prefix-stable tokenizer's tokens of each list are kept too (process-wide, bounded as
//      the renders), and a list that starts with a kept list's messages reuses them up to a cut both renderings share
//      that no merge can cross (runtime::Tokenizer::encode_rest), tokenizing only the rest: the same tokens
//      as tokenizing the whole (sdk/src/window/sync_encode.h gives the argument).
//   4. Content addressing: a unit's key is the content key of its tokens (chunks and turns alike). A unit
//      of at least SyncOptions::chunk_min_tokens tokens (a tool output, a document) is a chunk: stored
//      position-free, patched, reusable at any position and recallable after eviction. A shorter unit
//      appended at the tail is a live turn (prefilled, never stored). A short unit that must go anywhere
//      but the tail becomes a chunk too (turns are only ever appended), as does one whose content the
//      engine holds as a chunk already (registered by any of its windows).
//   5. Diff: each unit is matched to an instance of the window with the same key (when there are several,
//      the first after the instance matched last, else the first unless the key was matched already);
//      instances nothing matches are evicted (chunks stay recallable; when they are the window's oldest
//      chunk instances, by one slide); if the matched instances' order differs from the list's, one reorder
//      puts them in order (the instances off the longest run already in order move); each unmatched unit is
//      then placed before the next matched one: a chunk the window evicted earlier is recalled, another
//      chunk admitted, a short unit at the tail added as a turn. A live turn is never moved: a turn is kept
//      only where the kept instances before it are the same in the list as in the window. A turn the
//      reorder would move (a message identical to one trimmed from the front of the list and appended at its
//      end), or that a moved chunk would cross, is evicted and its unit added anew (a turn at the tail, else
//      a chunk): a moved turn would be prefilled again anyway, and so the reorder of kept instances moves
//      chunks only. A unit whose key is in the window twice (the same message text rendered identically
//      twice) is added once as a chunk and otherwise as a turn at the tail, followed by a reorder. sync works
//      on any window: instances it did not make are evicted unless the rendering contains them.
//
// Models without a chat template (llama2.c models such as stories260K, TinyStories-656K) use
// SyncOptions::chat.chat_template when given, else kPlainChatTemplate: "role: content" and a newline per
// message, and "assistant:" as the generation prompt (tools and tool calls rendered as Hermes templates
// render them; see kPlainChatTemplate), with the tokenizer's BOS text first when the tokenizer
// reads that text back as BOS (Hugging Face tokenizers; llama2.c's does not, so its plain rendering has no
// BOS).
//
// Chunk parts. A message's content may be a list of parts (ChatMessage::parts): text, or a chunk already
// registered with the engine (Engine::add_tokens, add_text, add_embeddings: a screenshot's vision-tower
// rows, a document encoded once). A chunk part stands in the rendering where the part sits, as its own
// unit: an instance of exactly that chunk, content-addressed by the chunk's key, never a turn (it is
// admitted, recalled or kept like any chunk, whatever its length). The template sees the message's content
// as text with a private-use marker (U+E000 ... U+E001) where each chunk part is; the rendering is split at
// the markers, each text segment between them is tokenized alone (the split is a token boundary: no merge
// crosses a chunk), and the chunk's tokens (a token chunk) or rows (an embedding chunk) stand in the
// marker's place. So the window's sequence is: tokenize(segment 0), chunk 0, tokenize(segment 1), chunk 1,
// ... ; SyncPlan::tokens spells it with kEmbeddingRow for each embedding row. The text of a message around
// its chunk parts (a role header before, a newline after) forms units of its own, cut at message
// boundaries as above. A template that drops or repeats a message's content (it must render each chunk part
// exactly once) is refused, as is, in a list with chunk parts, text containing U+E000 (named by its message
// and field; a list of text alone may hold it), a chunk not registered with this engine, and an
// embedding chunk placed twice (a window holds a chunk once; a token chunk placed twice is a turn the
// second time, as a repeated message is). Engine::render_chat and tokenize_chat refuse chunk parts: their
// rendering is not text (Window::plan_sync shows it). Errors name a part as messages[i].content[j], as a
// chat API's content list is named. Templates that want tokens around an image (a vision start token) get
// them as text parts beside the chunk part.
//
// Limits: a unit's key depends on its rendering, so a message whose rendering depends on its place (a
// template that numbers turns, or marks the first one) is a new unit when it moves. Several units inserted
// between kept instances in one sync are separate admits, each re-planning what follows it, so an instance
// after two insertions may be repaired twice.
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
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "orbit/chunk.h"
#include "orbit/common/chat_content.h"
#include "orbit/plan.h"

namespace orbit {

// One call in an assistant message; templates see {"id", "type": "function", "function": {"name",
// "arguments": the arguments parsed as JSON}}.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments = "{}";  // a JSON object, as text
};

// One part of a message's content: text, or a chunk registered with the engine that stands where the part
// sits (see "Chunk parts" above).
struct ContentPart {
  std::string text;               // a text part (when chunk is unset)
  std::optional<ChunkRef> chunk;  // a chunk part
  static ContentPart of_text(std::string text) { return ContentPart{std::move(text), std::nullopt}; }
  static ContentPart of_chunk(ChunkRef chunk) { return ContentPart{{}, std::move(chunk)}; }
};

// One message as a chat API takes it.
struct ChatMessage {
  std::string role;                         // "system", "user", "assistant", "tool", ... (required)
  std::string content;                      // text content (empty when `parts` gives it)
  std::optional<std::string> name;          // message.name when set
  std::optional<std::string> tool_call_id;  // message.tool_call_id when set (tool results)
  std::vector<ChatToolCall> tool_calls;     // message.tool_calls when non-empty
  std::vector<ContentPart> parts;           // non-empty: the content as parts, in order (content must be empty)
  // message.reasoning_content when set: an earlier assistant turn's thinking, which reasoning models' templates
  // (Qwen3, QwQ, DeepSeek-R1 distills) render before its answer; "" is passed as set (runtime::ChatMessage).
  std::optional<std::string> reasoning_content;
  // What the template's message.content is: the text (kText: `content`, or `parts`), None (kNull) or undefined
  // (kAbsent: no content key), as Hugging Face's apply_chat_template passes a dict's None or missing content
  // (orbit/common/chat_content.h); templates tell them apart (`message.content is none`). orbit serve and the
  // Python bindings read a null or missing content as "" (kText), as OpenAI-compatible servers give templates
  // (Qwen3's, among others, cannot take None); set kNull or kAbsent to render exactly what Hugging Face would.
  // Not kText: content and parts must be empty (sync refuses others, naming the message).
  ContentForm content_form = ContentForm::kText;
};

// SyncPlan::tokens at a row of an embedding chunk part (it has no token id).
inline constexpr int64_t kEmbeddingRow = -1;

// The built-in template for models without one (Jinja, as a chat_template string): "role: content" and a
// newline per message ("role (name): content" for a message with a name), "assistant:" as the generation prompt. It
// carries tools the way Hermes and Qwen templates do, so a tool loop's history is in the prompt and the model's calls
// can be read back (orbit/tool_calls.h, ToolCallFormat::kHermes): with `tools`, a first line "system: ..." that says
// how to call one and lists each tool's schema as JSON between <tools> and </tools>; an assistant message's tool_calls
// after its content, each as <tool_call>{"name": ..., "arguments": {...}}</tool_call> (arguments that are not a JSON
// object, a call cut by max_tokens, as written); a tool result as "tool: content". A list without tools or tool calls
// renders as it always has. A content of None or left out (ContentForm) renders as "".
inline constexpr const char* kPlainChatTemplate =
    "{{ bos_token }}{% if tools %}system: You may call these tools. To call one, answer with "
    "<tool_call>{\"name\": <the tool's name>, \"arguments\": <its arguments as a JSON object>}</tool_call>.\n"
    "<tools>{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n{% endif %}"
    "{% for message in messages %}{{ message.role }}{% if message.name %} ({{ message.name }}){% endif %}: "
    "{% if message.content is string %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}<tool_call>{\"name\": "
    "{{ call.function.name | tojson }}, \"arguments\": {% if call.function.arguments is string %}"
    "{{ call.function.arguments }}{% else %}{{ call.function.arguments | tojson }}{% endif %}}</tool_call>"
    "{% endfor %}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

struct ChatOptions {
  // A chat template (Jinja source) to use instead of the model's. Empty: the model's (tokenizer_config.json
  // of a Hugging Face directory), else kPlainChatTemplate.
  std::string chat_template;
  std::string tools_json;  // a JSON array of tool schemas (the template's `tools`); empty: none
  std::string extra_json;  // a JSON object of further template variables; empty: none
  // The time the template's strftime_now formats in every rendering of the call (Llama 3.2 writes the date);
  // nullopt: the clock, read once per call. Window::plan_sync sets it in SyncPlan::options to the time its
  // renderings read, so render_chat / tokenize_chat given a plan's options render as the plan did, also when
  // the date changed in between.
  std::optional<std::time_t> now;
};
// The time a rendering reads where ChatOptions::now is not given: the system clock (a test can pin it).
std::time_t chat_clock();

struct SyncOptions {
  ChatOptions chat;
  // A unit (a message's rendered span, template tokens included) of at least this many tokens becomes a
  // chunk (stored, reusable at any position, recallable); a shorter one appended at the tail stays a
  // live turn, unless the engine holds its content as a chunk already (any window registered it: it is
  // reused as that chunk). 0: every unit is a chunk.
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

// One unit of the rendering: the messages [first_message, end_message) and their tokens in the window. A
// message with chunk parts spans several units (its text before a part, the part, its text after), each
// with that message in its range.
struct SyncUnit {
  int64_t first_message = 0;
  int64_t end_message = 0;      // > first_message, except a rendering of no messages (a template's own text)
  int64_t position = 0;         // index of its first token (or row) in SyncPlan::tokens
  std::vector<int64_t> tokens;  // a chunk part's tokens; an embedding chunk's rows as kEmbeddingRow
  std::string key;              // content key of the tokens; a chunk part: the chunk's key
  ChunkRef chunk;               // a chunk part: its chunk (messages[first_message].parts[part]); else unset
  int64_t part = -1;            // a chunk part: its index in the message's parts; else -1
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
  std::vector<int64_t> tokens;             // the window's tokens after sync: tokenize(rendering), chunk parts
                                           // in place (kEmbeddingRow for an embedding chunk's rows)
  std::vector<int64_t> generation_prompt;  // tokens the template adds with add_generation_prompt
  bool generation_prompt_exact = true;     // tokens + generation_prompt == tokenize(rendering with it)
  int64_t merged_boundaries = 0;           // message boundaries no unit boundary could follow
  std::string chat_template;               // which template rendered it ("model", "options", "plain")
  uint64_t window_id = 0;                  // the window it was planned on, at this version:
  uint64_t window_version = 0;             // Window::sync(messages, planned) refuses it once either differs
  uint64_t messages_digest = 0;            // of the list it was planned from: Window::sync refuses another list
  SyncOptions options;                     // what it was planned with, chat.now the time its renderings read
  int64_t count(SyncAction action) const;
  bool changes() const;          // false: the window holds the rendering already (sync applies nothing)
  std::string describe() const;  // one line per unit and eviction
};

// What Window::sync did.
// A sync that changes nothing applies no plan, yet the window keeps the loss its approximate instances carry:
// right after a sync, Window::plan_flush().predicted_kl is the prediction for the window as its next read serves
// it (the deferred repairs included; what orbit serve reports). Planned later, a flush may re-form instances
// (once background work makes that cheap) and predicts for the window after it, which no read runs itself.
struct SyncReport {
  SyncPlan plan;                           // what it planned (units carry their instance ids)
  std::vector<Plan> plans;                 // every window operation applied, in order (one kSync plan when
                                           // units were added, or for an eager policy's edits past one; else
                                           // the evictions and a reorder)
  std::vector<ApplyReport> reports;        // their reports, one per plan
  double forward_tokens = 0;               // Σ reports: critical-path token-forwards (repairs deferred to the
                                           // next read are counted there, not here)
  std::vector<int64_t> generation_prompt;  // = plan.generation_prompt: generate()'s query for the next turn
};

}  // namespace orbit
