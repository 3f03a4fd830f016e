// The synthetic cross-chunk binding task (paper 000 §2 and Appendix C.1 at toy scale).
//
// A window is a sequence of chunks, each a token list:
//
//   intro frame   [FA] v v v ... v [FEND]     v: "visual" tokens, a redundant stream. Most are the one
//                                             patch token P(obj, color) (an object of a colour, as a VQ
//                                             code would carry it), the rest background noise tokens.
//   ref frame     [FB] w w w ... w [FEND]     w: mostly the location patch L(loc), the rest noise. Meaning:
//                                             "the object of the most recent intro frame is now at loc".
//                                             The frame never names the object: a ref frame only knows it
//                                             after absorbing its antecedent (cross-chunk binding).
//   text chunk    [TXT] f obj [IN] room f [DOT]   a fact in words: obj is in room.
//
// An episode is a run of scenes: an intro frame, then (usually) its ref frame, sometimes with a text chunk
// (or up to max_gap_texts) in between, plus text chunks between scenes. Several ref frames per episode (3–5 intro
// frames, each with a ref frame at probability 0.85), so a where-question has several candidate locations in its
// context and cannot be answered by elimination: only the binding tells which one is the object's.
//
// Questions are one token Q(kind, obj); the answer is the next-token prediction at that token:
//   single-hop   Q(color, obj) -> colour word     read out of one intro frame
//                Q(room, obj)  -> room word       read out of one text chunk
//   multi-hop    Q(where, obj) -> location word   needs the ref frame to have bound its antecedent's
//                                                 object: the location is only in the ref frame, the
//                                                 object only in the intro frame before it
// (One token, so a question's readout needs no induction step inside the query itself.)
//
// Training also supervises a "caption" (the object word) at every visual token and the [FEND] of each ref
// frame (its referent's object: this forces the binding to be computed inside the ref frame's own
// tokens), at the [FEND] of each intro frame and at the room word of each text chunk; and (deep
// supervision, binding_train.h) the same captions read from the residual stream after layer 2 of 4, so
// that the binding is in place early enough for the question to read it in the layers after.
//
// Episodes are drawn by a seeded std::mt19937_64 (portable: the same on every platform for one seed).
// Splits: the train and test streams are seeded from (seed, split) and never share an episode.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace orbit::binding {

// Token ids. vocab = 256.
namespace tok {
constexpr int64_t kPad = 0, kFrameA = 1, kFrameB = 2, kFrameEnd = 3, kText = 4, kIn = 5, kDot = 6;
constexpr int64_t kNoise = 16, kNumNoise = 24;     // visual background
constexpr int64_t kFiller = 40, kNumFiller = 16;   // text filler words
constexpr int64_t kObject = 56, kNumObjects = 12;  // object words
constexpr int64_t kColor = 72, kNumColors = 8;     // colour words (answers)
constexpr int64_t kRoom = 80, kNumRooms = 8;       // room words (answers)
constexpr int64_t kLoc = 88, kNumLocs = 8;         // location words (answers)
constexpr int64_t kLocPatch = 96;                  // location patches L(loc), 8
constexpr int64_t kAsk = 104;                      // questions Q(kind, obj) = 104 + kind·12 + obj, 36
constexpr int64_t kObjPatch = 160;                 // object-colour patches P(obj, color) = 160 + obj·8 + color, 96
constexpr int64_t kVocab = 256;
}  // namespace tok

enum class ChunkKind { kIntro, kRef, kText };
enum class QuestionKind { kColor, kRoom, kWhere };
const char* chunk_kind_name(ChunkKind kind);
const char* question_kind_name(QuestionKind kind);
inline bool is_multi_hop(QuestionKind kind) { return kind == QuestionKind::kWhere; }

struct Chunk {
  ChunkKind kind = ChunkKind::kText;
  std::vector<int64_t> tokens;
  int obj = -1;       // intro: its object; ref: the referent's object; text: the fact's object
  int color = -1;     // intro
  int loc = -1;       // ref
  int room = -1;      // text
  int referent = -1;  // ref: index of the intro chunk it refers to (in its episode)
  // Caption target: the object word (a ref frame's: its referent's; a text chunk's: its fact's).
  int64_t caption() const;
  // Token indices (within the chunk) supervised with caption(): every visual token and [FEND] of a ref
  // frame, the [FEND] of an intro frame, the room word of a text chunk.
  std::vector<int64_t> caption_rows() const;
};

struct Question {
  QuestionKind kind = QuestionKind::kColor;
  std::vector<int64_t> tokens;  // {Q(kind, obj)}
  int64_t answer = 0;           // the answer token
  int chunk = -1;               // index of the chunk holding the answer (ref frame for kWhere)
};

struct Episode {
  std::vector<Chunk> chunks;
  std::vector<Question> questions;    // every question the episode answers
  std::vector<int64_t> flat() const;  // concatenated chunk tokens
  int64_t length() const;
};

struct TaskOptions {
  int min_intros = 3;  // intro frames (scenes) per episode
  int max_intros = 5;
  double ref_probability = 0.85;  // an intro frame is followed by its ref frame
  double gap_probability = 0.25;  // text chunks (1..max_gap_texts) sit between an intro frame and its ref
  int max_gap_texts = 1;          //   frame (while unused objects last)
  int min_texts = 1;              // further text chunks, between scenes
  int max_texts = 2;
  int frame_min = 8;    // visual tokens per frame (between [FA]/[FB] and [FEND]), drawn with a
  int frame_max = 32;   //   u² skew towards frame_min
  double signal = 0.6;  // probability that a visual token is the frame's patch (else noise)
};

// Tokens of the longest episode `options` can make: every frame frame_max long, every scene with its ref frame
// and as many text chunks as the objects allow.
int64_t max_episode_length(const TaskOptions& options);
// The largest frame_max for which the longest episode and a question after it (one token) fit in
// `positions` positions, the other options as given; below options.frame_min when none does.
int max_frame_for_positions(const TaskOptions& options, int64_t positions);

enum class Split { kTrain, kTest, kCalibration };
const char* split_name(Split split);

class TaskGenerator {
 public:
  TaskGenerator(uint64_t seed, Split split, TaskOptions options = {});

  const TaskOptions& options() const { return options_; }
  std::mt19937_64& rng() { return rng_; }

  Episode episode();

  // Chunk builders (frame_len = visual tokens, -1 = drawn from [frame_min, frame_max]).
  Chunk intro(int obj, int color, int frame_len = -1);
  Chunk ref(const Chunk& intro_chunk, int intro_index, int loc, int frame_len = -1);
  Chunk text(int obj, int room);
  static Question question(QuestionKind kind, const Episode& episode, int chunk);

  int uniform(int lo, int hi);  // inclusive
  double unit();

 private:
  std::vector<int64_t> frame_tokens(int64_t start, int64_t patch, int frame_len);

  TaskOptions options_;
  std::mt19937_64 rng_;
};

// One reuse probe (repair.h Scenario shape): context chunks, the reused chunk B (last), one question
// about B whose answer token is `answer`.
struct Probe {
  std::vector<Chunk> context;
  Chunk chunk;
  Question question;
};

struct ProbeOptions {
  int frame_len = 32;   // B's visual tokens (fixed; the longest frames training sees)
  int min_context = 2;  // chunks before B
  int max_context = 24;
  int min_other_refs = 3;  // multi-hop: other ref frames before B (so >= 4 candidate locations)
};

// Single-hop: B is an intro frame, the question asks its object's colour.
// Multi-hop: B is a ref frame whose referent is in the context (with at least min_other_refs other ref
// frames there as distractors), the question asks where the referent's object is.
Probe make_probe(TaskGenerator& gen, bool multi_hop, const ProbeOptions& options = {});

// The orbit set for reorder experiments: one intro frame A plus K-1 text chunks (any order keeps A the
// most recent intro frame before B), B a ref frame to A, the question where A's object is.
struct ReorderSet {
  std::vector<Chunk> antecedents;  // K chunks, in the canonical order
  Chunk chunk;
  Question question;
};
ReorderSet make_reorder_set(TaskGenerator& gen, int k, int frame_len = 32);

// Recall: B (a ref frame) was formed behind `old_context`: k units, first `distractors` whole scenes
// (an intro frame and its ref frame: other objects at other locations, so a where-question has
// distractors + 1 candidate locations), then the referent intro frame A and k − distractors − 1 text
// chunks in a drawn order. On recall B sits behind `new_context`, the same units with round(turnover·k)
// of them replaced by fresh units of the same kind (a replaced A is a new object, so the referent
// changes). `question` asks where the *current* referent's object is.
struct RecallCase {
  std::vector<Chunk> old_context;
  std::vector<Chunk> new_context;
  Chunk chunk;
  Question question;
  bool referent_replaced = false;
};
RecallCase make_recall_case(TaskGenerator& gen, int k, double turnover, int frame_len = 32, int distractors = 2);

// Tokens of chunks concatenated.
std::vector<int64_t> concat(const std::vector<Chunk>& chunks);

}  // namespace orbit::binding
