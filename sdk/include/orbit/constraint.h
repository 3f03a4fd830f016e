// Constrained decoding: the model may only write text that a grammar allows (a JSON value of a schema, any
// JSON object, tool calls), so even a model that writes stories emits valid JSON.
//
//   auto c = orbit::Constraint::json_schema(R"({"type": "object", "properties": {"name": {"type": "string"}},
//                                               "required": ["name"]})");
//   orbit::GenerateOptions o;
//   o.constraint = c;                                  // window.h: null = unconstrained
//   orbit::Generation g = window.generate(query, o);   // g.text parses and validates, unless cut (below)
//
// Three layers, each usable alone:
//   Constraint         an immutable grammar over bytes, built from JSON Schema text, json_object mode,
//                      literals, sequences and choices (tool calls are a choice of sequences)
//   ConstraintMatcher  the bytes written so far against a constraint: is it a valid prefix, is it complete
//   TokenConstraint    a matcher over a tokenizer's vocabulary: which tokens may come next (a mask over the
//                      logits), advanced by the chosen token. Window::generate runs one per constrained call.
//
// Composition. A tool call the Hermes way (`tool_choice: "required"`) is
//   choice( sequence(literal("<tool_call>{\"name\": \"get_weather\", \"arguments\": "), json_schema(params₁),
//                    literal("}</tool_call>")),
//           sequence(... one per tool ...) )
// which tool_calls() builds from an OpenAI `tools` array.
//
// What the grammar allows beyond the schema (fixed choices, so that every output is finite and generation
// cannot loop):
//   - Whitespace: at most one ' ' after each '{', '[', ':' and ',' (ConstraintLimits::whitespace), nowhere
//     else: no newlines or tabs, none before ':' ',' '}' ']' or around the whole value. `{"a": [1, 2]}` and
//     `{"a":[1,2]}` match; `{ "a" : 1 }` does not.
//   - Object properties are written in the schema's declared order, each at most once; a required one
//     cannot be skipped. Keys are written as nlohmann::json writes them (escapes included).
//   - Strings: valid UTF-8, no control characters; the escapes \" \\ \/ \b \f \n \r \t and \uXXXX other than
//     surrogates (D800-DFFF). A string has at most maxLength characters (ConstraintLimits::max_string_chars
//     when the schema gives none); a character is a code point or an escape. Under pattern or format, each
//     character has one spelling: \" and \\, \b \f \n \r \t or \u00XX for the other control characters,
//     every other character as its UTF-8 bytes.
//   - Numbers: JSON's grammar, at most max_number_chars characters, exponents of at most 2 digits (every
//     number fits a double); "integer" has no fraction or exponent and at most 18 characters (it fits int64),
//     and where the schema gives no minimum (maximum) it is at least -(2^53 - 1) (at most 2^53 - 1), so that
//     clients that read numbers as doubles (JavaScript's) read it exactly.
//   - Arrays: at most maxItems items (max_array_items when the schema gives none); free-form objects at most
//     max_object_members members; free-form values nest at most max_depth containers deep (the schema's own
//     levels above them count).
//   - enum and const values are matched as their compact JSON text (nlohmann::json::dump()).
//
// Finishing within max_tokens. A constrained generate reserves room to finish: a token is allowed only when
// the fewest bytes that still complete the text after it fit in the tokens left (max_tokens and the model's
// positions), counting one token per byte. Those fewest bytes count distinct keys: an object that still owes
// members pays for keys it does not have yet, the shortest first, and the key being written for becoming one. So a run
// ends complete whenever the vocabulary has a token for each byte of the shortest completion (true of byte-fallback
// vocabularies and of most BPE vocabularies for JSON's punctuation). When even the first step cannot fit, the budget is
// not applied and the run may be cut.
//
// Cost. A step's mask is looked up in a cache the Constraint keeps per vocabulary, keyed by the matcher's
// state (counters far from their bounds share a key, so a long string is one state); a miss walks a trie of
// the vocabulary's byte strings with the matcher, skipping every subtree whose prefix is refused (inside a
// string only the tokens that are not plain string content are walked). On a 128k-token vocabulary a hit
// costs tens of microseconds, a miss up to a few milliseconds (bench/constrain/bench_constrain.cpp). A
// tokenizer's vocabulary is read once per process (token_vocabulary), building a Constraint parses its schema
// (zod's hostname pattern: about 140 ms): keep Constraints for schemas that come back, so their masks stay
// warm (orbit/constraint_cache.h keeps them by schema text, bounded: Engine::constraint_cache()).
//
// Thread-safety: Constraint and TokenVocabulary are immutable and safe to share between threads (their mask
// caches lock inside). ConstraintMatcher and TokenConstraint are values for one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orbit {

class Engine;
namespace constrain {
class KeyLog;
class MaskCache;
struct MaskEntry;
class VocabTrie;
struct ConstraintParts;
struct Access;
}  // namespace constrain

enum class Whitespace {
  kSingleSpace,  // one optional ' ' after '{', '[', ':' and ','
  kNone,         // compact JSON only
};

// Bounds that keep every constrained output finite. The schema's own maxLength / maxItems take precedence.
struct ConstraintLimits {
  int64_t max_string_chars = 1024;   // characters in a string without maxLength (keys of free-form objects too)
  int64_t max_number_chars = 32;     // characters in a number, sign and exponent included
  int64_t max_array_items = 256;     // items in an array without maxItems
  int64_t max_object_members = 256;  // members in a free-form object, a map, or an object with additionalProperties
                                     // (there at least its declared properties) without maxProperties
  int32_t max_depth = 16;            // nesting of free-form values (json_object, {} and bare "object" schemas)
  Whitespace whitespace = Whitespace::kSingleSpace;
};

// How tool_calls() writes one call: begin + {"<name_key>": "<name>", "<arguments_key>": <arguments>} + end.
// The defaults are the Hermes format orbit's built-in chat template teaches (orbit/sync.h,
// kPlainChatTemplate) and orbit/tool_calls.h reads back (ToolCallFormat::kHermes). Qwen-style templates put
// newlines inside: begin "<tool_call>\n", end "\n</tool_call>".
struct ToolCallOptions {
  std::string begin = "<tool_call>";
  std::string end = "</tool_call>";
  std::string name_key = "name";
  std::string arguments_key = "arguments";  // Llama 3's JSON tool calls write "parameters"
  // Only the tool of this name (tool_choice naming a function); "": any of them (tool_choice "required").
  std::string only;
  int32_t max_calls = 1;         // 1..max_calls calls (parallel tool calls when > 1) ...
  std::string separator = "\n";  // ... with this between two of them
  ConstraintLimits limits;       // for the arguments
};

// An immutable grammar over bytes. Build one once and reuse it: the token masks it computes are cached in
// it, per vocabulary (a server that sees the same schema again should keep its Constraint: ConstraintCache,
// orbit/constraint_cache.h).
class Constraint {
 public:
  // A JSON value valid under `schema_json`, a JSON Schema in the supported subset:
  //   type            "object", "array", "string", "number", "integer", "boolean", "null", or a list of them
  //   properties      written in their declared order; with additionalProperties false or absent no other
  //                   property ("object" with neither properties nor additionalProperties is any object);
  //                   required (beside additionalProperties a schema or true, a required name that properties
  //                   lacks is a property under that schema)
  //   additionalProperties  a schema (or true): beside properties, extra members after the declared ones, each
  //                   value under it, each key none of the declared names (extra keys are written in the one
  //                   spelling a JSON serializer gives them, escaping only '"', '\' and control characters,
  //                   \u00xx in lowercase, so that no key spells a declared name another way); without
  //                   properties, a map. The grammar does not compare keys with one another (no grammar can
  //                   keep an unbounded set of keys apart: matches() accepts {"a": 1, "a": 2} under a map), but
  //                   ConstraintMatcher and TokenConstraint, and so Window::generate and orbit serve, never
  //                   repeat a key in an object: a token that would close a key the object already has (in any
  //                   spelling) is masked, as is one after which the key can only become such a key
  //   propertyNames   the keys of extra members and maps: a schema of strings (string keywords, or an enum or
  //                   const of strings); every declared name must hold under it (else refused). A map's keys
  //                   under a pattern or format are written in the one spelling extra keys have
  //   minProperties, maxProperties  members written, declared and extra; an object has at most as many members
  //                   as distinct keys (an enum of propertyNames, or a pattern or maxLength that admits few
  //                   texts); refused where no object could have them (minProperties above the properties a
  //                   closed object declares, or above the distinct keys propertyNames admits; maxProperties
  //                   below the required count)
  //   items           one schema (absent: any value); minItems, maxItems; uniqueItems where each item is one of
  //                   a few listed values (an enum or const, booleans; at most 256, as JSON compares them: 1 and
  //                   1.0 are one): each written at most once, in the order listed (Pydantic's set of an enum or
  //                   of literals); over other items refused
  //   prefixItems     a tuple: these items in order, then more under items (absent or true: any value; false:
  //                   none), minItems to maxItems in all (an open one without maxItems: max_array_items); also
  //                   draft-07's list of items with additionalItems
  //   minLength, maxLength (strings)
  //   pattern         a regular expression (ECMA-262; matched anywhere in the string unless anchored with ^ $):
  //                   classes, groups, alternation, quantifiers, \d \w \s, '$' anywhere, lookaheads (?=..) and
  //                   (?!..) anywhere, exactly (zod's z.iso.duration(), hostname, password rules such as
  //                   ^(?=.*\d)(?=.*[a-z]).{8,}$); refused: backreferences, lookbehind, \b, \p{..}, '^' other
  //                   than at a (top-level alternative's) start, and a pattern whose automaton grows past the
  //                   bounds ("too complex to constrain", naming the lookahead when it is one's)
  //   format          date, time, date-time (RFC 3339; February 29 only in leap years; a leap second :60 at
  //                   any minute), duration (RFC 3339's, whole numbers), email (ajv-formats' common regex: a
  //                   dot-atom local part of at most 64 characters, '@', a domain of two labels or more; 254
  //                   characters in all, a cap on maxLength), hostname (RFC 1123 labels of
  //                   1 to 63 characters, 253 characters in all: a cap on maxLength), ipv4, ipv6 (RFC 3986),
  //                   uuid, uri (a scheme, ':', and URI characters with valid %-escapes),
  //                   base64 and base64url (RFC 4648, canonical: zero pad bits; base64 padded, base64url not),
  //                   jwt (three base64url parts; the header one of {"alg": A, "typ": "JWT"}, {"typ": "JWT",
  //                   "alg": A}, {"alg": A} as compact JSON, A a JWA signing algorithm: tokens zod's check
  //                   accepts, not every one it accepts); any other format only beside a pattern, which serves
  //                   it (zod writes startsWith, cuid, nanoid, e164, ... as a format of its own and the pattern
  //                   that checks it); emoji is refused (Unicode's emoji properties are not tabled here);
  //                   OpenAPI's byte is base64, its binary and password (a hint to UIs) any string;
  //                   Pydantic's path any string, ipvanyaddress ipv4 or ipv6, ipv4interface, ipv6interface and
  //                   ipvanyinterface an address with an optional '/' prefix length.
  //                   Of numbers, OpenAPI's: int8, uint8, int16, uint16, int32, uint32, int64, uint64 (an
  //                   integer in that machine type's range, beside the bounds below), float (within a float's
  //                   range: written without exponent), double (every number written here is one); another
  //                   format of a number is refused. An integer format beside "string" is a string of that
  //                   integer's digits over the whole range (proto3's JSON writes 64-bit integers so)
  //   contentEncoding base64 or base64url: the format of that name (zod writes both)
  //   minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (numbers and integers): exact
  //                   decimal comparisons; such numbers are written without exponent; multipleOf's significant
  //                   digits times (its decimals + 3) at most 50000
  //   (string keywords beside a "type" without "string", or number keywords and formats beside one without
  //   "number" or "integer", are refused: they would constrain nothing; without "type", a format of numbers
  //   makes the value a number)
  //   enum, const     (with "type" beside them, values of other types are dropped)
  //   anyOf, allOf    allOf of several schemas, and keywords beside $ref, anyOf, allOf or oneOf ({"type":
  //                   "object", "properties": {...}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}), are
  //                   combined keyword by keyword into one schema per alternative: a keyword of one part as it
  //                   is; one in both with the same value once, "type" as the common types, "enum" the common
  //                   values, "required" and "properties" joined (a property in both: its schemas combined),
  //                   the stricter bound, "items" schemas combined. An alternative admitting nothing with
  //                   the keywords beside it is dropped. Refused, naming both parts: another keyword given
  //                   differently by both, additionalProperties of one part beside properties of another, and
  //                   a tuple's items beside another part's items (combined, each would admit other values)
  //   oneOf           when no value can match two of its schemas, as the text shows: different types, different
  //                   const/enum values, or a property all of them require with different const/enum values
  //                   (tagged unions: Pydantic's discriminated unions, zod's discriminatedUnion), or a property
  //                   one requires and the other forbids (additionalProperties false without it, no
  //                   patternProperties: zod's xor of strict objects); else refused naming the pair. discriminator
  //                   beside oneOf or anyOf (it names the tag: nothing to decode)
  //   $defs / definitions with "$ref": "#/$defs/<name>" (or "#/definitions/<name>", or "#" for the root);
  //                   recursive where the reference sits inside an object or array its target opens (trees)
  //                   and some value of it finishes
  //   nullable        OpenAPI 3.0's: true admits null beside the schema's values (beside an enum or const, null
  //                   only where listed); false nothing more
  //   annotations, ignored: title, description, default, examples, $schema, $id, $anchor, $comment,
  //                   deprecated, readOnly, writeOnly, and OpenAPI's example, externalDocs, xml and its extensions
  //                   (any keyword that begins with "x-")
  // A schema may be `true` (any value). Anything else throws orbit::Error naming the keyword and where it
  // is, under `path`: "<path>.properties.x: 'not' is not supported". Bad JSON, a `required` name
  // that is not a property, an empty enum, min above max and a recursive $ref throw likewise.
  static std::shared_ptr<const Constraint> json_schema(std::string_view schema_json,
                                                       const ConstraintLimits& limits = {},
                                                       std::string_view path = "schema");
  // Any JSON object (OpenAI's response_format {"type": "json_object"}).
  static std::shared_ptr<const Constraint> json_object(const ConstraintLimits& limits = {});
  // Any JSON value.
  static std::shared_ptr<const Constraint> json_value(const ConstraintLimits& limits = {});
  // Exactly `text` (may be empty).
  static std::shared_ptr<const Constraint> literal(std::string_view text);
  // Each part in turn. Throws orbit::Error for an empty list or a null part.
  static std::shared_ptr<const Constraint> sequence(const std::vector<std::shared_ptr<const Constraint>>& parts);
  // Any one of the alternatives (they may share prefixes: the match follows all of them until they differ).
  // Throws orbit::Error for an empty list or a null alternative.
  static std::shared_ptr<const Constraint> choice(const std::vector<std::shared_ptr<const Constraint>>& alternatives);
  // Calls to the tools of an OpenAI `tools` array ([{"type": "function", "function": {"name", "parameters"}}],
  // or bare {"name", "parameters"} items), written as `options` says; each call's arguments valid under
  // its tool's parameters schema (absent or null: {}, as OpenAI reads an omitted schema, an empty parameter
  // list; {}, true or annotations alone: any object). Errors name "tools[i].function.parameters...", an
  // unknown `only` name, a missing or repeated name.
  static std::shared_ptr<const Constraint> tool_calls(std::string_view tools_json, const ToolCallOptions& options = {});

  // Whether `text` is a whole match / can be continued into one (the grammar's: keys may repeat).
  bool matches(std::string_view text) const;
  bool is_prefix(std::string_view text) const;
  // The fewest bytes of a whole match in which no object repeats a key: what a ConstraintMatcher or
  // TokenConstraint can write (matches() also accepts shorter texts that repeat one). Exact, but for an open
  // object whose (declared properties + 1) * (minProperties + 1) passes 4096: while declared properties may
  // still come, each member it owes past its declared count is costed at its shortest extra key (a lower bound).
  int64_t min_bytes() const;
  // A line for logs: what it was built from and its size ("json_schema (14 nodes)").
  std::string describe() const;
  // The bytes it holds now: its grammar and the token masks cached in it (at most 64 MiB per vocabulary, every
  // mask's bits or ids, key and list of tokens that change the bytes left counted; when full, a quarter of it is
  // freed), estimated from its containers' capacities. It grows as masks are computed. Thread-safe.
  std::size_t memory_bytes() const;

  ~Constraint();
  Constraint(const Constraint&) = delete;
  Constraint& operator=(const Constraint&) = delete;

 private:
  explicit Constraint(std::unique_ptr<constrain::ConstraintParts> parts);
  std::unique_ptr<constrain::ConstraintParts> parts_;  // the grammar and the mask caches
  friend struct constrain::Access;
};

// A tokenizer's vocabulary as the bytes each token writes, with a trie over them for masking. Build once per
// tokenizer (token_vocabulary(engine) caches the engine's).
struct TokenBytes {
  // Per id: the bytes the token adds in the middle of a text; nullopt (or ""): it adds none (BOS, EOS,
  // special tokens) and is never allowed by a mask (end tokens are allowed apart, see TokenConstraint).
  std::vector<std::optional<std::string>> text;
  // Ids whose bytes differ at the very start of a text (a decoder that drops the first token's leading space,
  // as llama2.c's after BOS and Hugging Face's Strip do), with their bytes there.
  std::vector<std::pair<int64_t, std::optional<std::string>>> at_start;
};

class TokenVocabulary : public std::enable_shared_from_this<TokenVocabulary> {
 public:
  static std::shared_ptr<const TokenVocabulary> from_bytes(TokenBytes bytes);
  int64_t size() const;
  const std::optional<std::string>& bytes(int64_t id) const;  // throws orbit::Error for an id outside [0, size)
  const std::vector<std::pair<int64_t, std::optional<std::string>>>& at_start() const;
  int64_t max_token_bytes() const;
  ~TokenVocabulary();

 private:
  explicit TokenVocabulary(TokenBytes bytes);
  TokenBytes bytes_;
  std::unique_ptr<constrain::VocabTrie> trie_;
  friend struct constrain::Access;
};

// The vocabulary of the engine's tokenizer (its model's vocabulary size; ids past the tokenizer's add no
// text): each token's text read through the tokenizer's decoding after an ordinary token, byte pieces
// ("<0xNN>", byte-level BPE characters) as their byte. Cached per tokenizer content: the first call for a
// tokenizer decodes every id once. Throws orbit::Error when the engine has no tokenizer.
std::shared_ptr<const TokenVocabulary> token_vocabulary(const Engine& engine);

// The tokens allowed at one step: bit (id % 64) of bits[id / 64].
struct TokenMask {
  std::vector<uint64_t> bits;
  bool complete = false;  // the text is a whole match: end tokens are allowed (they are not in `bits`)
  bool allows(int64_t id) const {
    return id >= 0 && static_cast<std::size_t>(id / 64) < bits.size() && ((bits[id / 64] >> (id % 64)) & 1) != 0;
  }
  int64_t count() const;  // set bits
};

// The bytes written so far against a constraint, where no object repeats a key (Constraint: additionalProperties;
// it keeps the keys of the objects open in its text). A value: copy it to explore.
class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<const Constraint> constraint);
  ConstraintMatcher(const ConstraintMatcher& other);
  ConstraintMatcher& operator=(const ConstraintMatcher& other);
  ConstraintMatcher(ConstraintMatcher&&) noexcept;
  ConstraintMatcher& operator=(ConstraintMatcher&&) noexcept;
  ~ConstraintMatcher();

  // Appends `bytes` when the text stays a valid prefix without a repeated key and returns true; otherwise
  // returns false and the matcher is unchanged.
  bool advance(std::string_view bytes);
  bool can_advance(std::string_view bytes) const;
  bool complete() const;      // the text is a whole match
  bool can_continue() const;  // some byte extends the text
  bool finished() const { return complete() && !can_continue(); }
  // The fewest bytes that make the text a whole match without a repeated key (0 when complete): as exact as
  // Constraint::min_bytes, and where a key being written has no free completion within 6 bytes of its
  // shortest, that key is costed at 6 more (a lower bound).
  int64_t min_bytes_to_complete() const;
  // min_bytes_to_complete() after `bytes` were appended, or -1 where they cannot be; the matcher is unchanged
  // (no copy of the text: a search over next bytes costs the same at any length).
  int64_t min_bytes_after(std::string_view bytes) const;
  const std::string& text() const;  // the bytes accepted so far
  // The grammar's state as compact bytes: equal for states that accept the same continuations from here (the
  // text that led to them, and the keys its objects hold, may differ). Hashable, comparable.
  std::string state_key() const;
  // The tokens of `vocabulary` whose bytes keep the text a valid prefix, and whether it is complete.
  // Cached in the constraint per vocabulary and state.
  TokenMask mask(const TokenVocabulary& vocabulary) const;

 private:
  struct State;
  std::shared_ptr<const Constraint> constraint_;
  std::unique_ptr<State> state_;
  friend class TokenConstraint;
};

// Why a model whose tokens write `vocabulary` cannot write an answer `constraint` accepts, or "" when it can:
// the shortest answer (no key repeated: Constraint::min_bytes) is longer than `max_answer_bytes` (said before
// that answer is built, so a schema with a huge minLength or minItems costs nothing), or some byte of the
// shortest answer (the fewest-bytes walk of a ConstraintMatcher, ties to the lowest byte) starts no token
// there, taking the longest token that fits at each step. A check
// of one answer, not of every one: a vocabulary that passes may still lack a byte a longer answer needs.
std::string unwritable(const std::shared_ptr<const Constraint>& constraint, const TokenVocabulary& vocabulary,
                       int64_t max_answer_bytes);

struct TokenConstraintOptions {
  // Tokens that end a run (EOS, stop tokens): allowed exactly when the text is complete; they add no text.
  std::vector<int64_t> end_tokens;
  // The first token starts the text (the token before it is BOS or special): TokenBytes::at_start applies.
  bool at_text_start = false;
};

// A constraint bound to a vocabulary: masks logits, then advances by the chosen token. What
// Window::generate runs per step; usable with any sampler. Beyond the grammar it keeps the keys of every
// object open in its text and refuses a repeat (allowed() masks, accept() throws): a token that closes a key
// its object already has, compared as text ("\u0061" is "a"), or after which the key can only become one
// (a propertyNames enum or short pattern with its keys spent). Its budget counts the longer keys this takes
// (ConstraintMatcher::min_bytes_to_complete after each token).
//
//   TokenConstraint tc(constraint, vocabulary, {.end_tokens = {eos}});
//   while (!tc.finished()) {
//     float* logits = ...;                                     // the model's next-token logits
//     if (tc.mask_logits(logits, vocab, tokens_left - 1) == 0) break;   // nothing fits: stop
//     tc.accept(sample(logits));
//   }
class TokenConstraint {
 public:
  TokenConstraint(std::shared_ptr<const Constraint> constraint, std::shared_ptr<const TokenVocabulary> vocabulary,
                  TokenConstraintOptions options = {});
  ~TokenConstraint();
  TokenConstraint(const TokenConstraint&);  // a copy goes on on its own (its text, keys and budget counts)
  TokenConstraint& operator=(const TokenConstraint&);
  TokenConstraint(TokenConstraint&&) noexcept;
  TokenConstraint& operator=(TokenConstraint&&) noexcept;

  // The tokens allowed now. `remaining`: how many tokens the run may emit after this one (-1: no limit);
  // a token is then allowed only if the shortest completion after it, with no key repeated, has at most
  // `remaining` bytes. Where no token's has, the limit is dropped (the unbudgeted mask) and the run is cut at
  // max_tokens with the answer so far, as OpenAI's. That happens where the budget is short from its first step
  // (once it binds, a vocabulary with a token for each byte of the completion keeps one that fits at every
  // step). Keeping the tokens whose completion is shortest instead would finish the run only where tokens of
  // several bytes cover it in fewer tokens than bytes; elsewhere it is cut all the same, with the shortest
  // values (0, "") written in place of the model's: the answer so far would no longer be a prefix of the
  // model's own (tests/python/test_tool_calls.py, a tool call cut at max_tokens).
  TokenMask allowed(int64_t remaining = -1) const;
  // Sets logits[id] to -infinity for every id in [0, n) not allowed; returns how many remain (0: none,
  // the logits are then left as they were).
  int64_t mask_logits(float* logits, int64_t n, int64_t remaining = -1) const;
  int64_t mask_logits(double* logits, int64_t n, int64_t remaining = -1) const;
  // Advances by `token`. Throws orbit::Error when the mask would not allow it (remaining ignored).
  void accept(int64_t token);
  // Advances by text that was written before the constraint applied (GenerateOptions::constraint_trigger:
  // the trigger and what its token wrote after it). Throws orbit::Error when it does not continue the
  // constrained text. The next token is then not the text's first.
  void accept_text(std::string_view bytes);
  bool complete() const { return matcher_.complete(); }
  bool finished() const { return matcher_.finished(); }  // complete and nothing can follow
  bool is_end_token(int64_t token) const;
  const ConstraintMatcher& matcher() const { return matcher_; }
  int64_t tokens_accepted() const { return accepted_; }
  // What the budgeted steps so far (allowed(remaining) where the budget binds) did with the allowed tokens
  // that hold a '"' or ',' or may go on with a key the object has: settled by a bound on the fewest bytes
  // after them, or walked by the key log. For benchmarks and tests.
  struct BudgetCounts {
    int64_t settled = 0;
    int64_t walked = 0;
  };
  BudgetCounts budget_counts() const { return counts_; }

 private:
  // The bytes `token` writes at this step (the start-of-text bytes for the first token when they apply).
  const std::optional<std::string>& bytes_now(int64_t token) const;
  bool at_start_now() const { return options_.at_text_start && accepted_ == 0 && !text_accepted_; }
  // The keys of the objects open in the text (the matcher's).
  const constrain::KeyLog& keys() const;
  // The tokens `mask` allows whose bytes keys() refuses (they repeat a key), sorted. `drops`, when given, is
  // set where the key log's walk of some other allowed token drops a stack (an alternative that repeats a
  // key) and keeps another.
  std::vector<int64_t> repeats(const TokenMask& mask, bool* drops = nullptr) const;
  // Clears in `bits` (a copy of `allowed`, the step's mask without a budget) the tokens after which the
  // fewest bytes that complete the text, no key repeated, exceed `remaining`; `entry` is the state's cached
  // mask, `apart` the needs of the tokens judged at the text's start. Allocates nothing the vocabulary's size.
  void fit_budget(const constrain::MaskEntry& entry, const std::vector<std::pair<int64_t, int32_t>>& apart,
                  int64_t remaining, const std::vector<uint64_t>& allowed, std::vector<uint64_t>& bits) const;

  std::shared_ptr<const TokenVocabulary> vocabulary_;
  TokenConstraintOptions options_;
  ConstraintMatcher matcher_;
  std::shared_ptr<constrain::MaskCache> cache_;
  int64_t accepted_ = 0;
  bool text_accepted_ = false;  // accept_text() was called: the text has started
  mutable BudgetCounts counts_;
};

}  // namespace orbit
