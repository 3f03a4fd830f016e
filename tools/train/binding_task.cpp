#include "binding_task.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>

namespace orbit::binding {

const char* chunk_kind_name(ChunkKind kind) {
  switch (kind) {
    case ChunkKind::kIntro: return "intro";
    case ChunkKind::kRef: return "ref";
    case ChunkKind::kText: return "text";
  }
  return "?";
}

const char* question_kind_name(QuestionKind kind) {
  switch (kind) {
    case QuestionKind::kColor: return "color";
    case QuestionKind::kRoom: return "room";
    case QuestionKind::kWhere: return "where";
  }
  return "?";
}

const char* split_name(Split split) {
  switch (split) {
    case Split::kTrain: return "train";
    case Split::kTest: return "test";
    case Split::kCalibration: return "calibration";
  }
  return "?";
}

int64_t Chunk::caption() const { return tok::kObject + obj; }

std::vector<int64_t> Chunk::caption_rows() const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> out;
  if (kind == ChunkKind::kRef) {
    for (int64_t i = 1; i < n; ++i) out.push_back(i);
  } else if (kind == ChunkKind::kIntro) {
    out.push_back(n - 1);
  } else if (n == 7) {
    out.push_back(4);  // the room word of [TXT] f obj [IN] room f [DOT]
  }
  return out;
}

std::vector<int64_t> Episode::flat() const { return concat(chunks); }

int64_t Episode::length() const {
  int64_t n = 0;
  for (const Chunk& c : chunks) n += static_cast<int64_t>(c.tokens.size());
  return n;
}

std::vector<int64_t> concat(const std::vector<Chunk>& chunks) {
  std::vector<int64_t> out;
  for (const Chunk& c : chunks) out.insert(out.end(), c.tokens.begin(), c.tokens.end());
  return out;
}

namespace {

constexpr int64_t kTextTokens = 7;      // [TEXT] filler object in room filler .
constexpr int64_t kFrameExtra = 2;      // [FA]/[FB] and [FEND] around a frame's visual tokens
constexpr int64_t kQuestionTokens = 1;  // Question::tokens

// Text chunks in an episode of `intros` scenes at most: free ones and gap ones, while objects last.
int64_t most_texts(const TaskOptions& o, int64_t intros) {
  return std::min<int64_t>(o.max_texts + static_cast<int64_t>(o.max_gap_texts) * intros, tok::kNumObjects - intros);
}

}  // namespace

int64_t max_episode_length(const TaskOptions& options) {
  int64_t longest = 0;
  for (int64_t intros = options.min_intros; intros <= options.max_intros; ++intros) {
    const int64_t frames = 2 * intros * (options.frame_max + kFrameExtra);
    longest = std::max(longest, frames + kTextTokens * most_texts(options, intros));
  }
  return longest;
}

int max_frame_for_positions(const TaskOptions& options, int64_t positions) {
  int64_t best = INT_MAX;
  for (int64_t intros = options.min_intros; intros <= options.max_intros; ++intros) {
    const int64_t room = positions - kQuestionTokens - kTextTokens * most_texts(options, intros);
    // 2·intros frames of (frame_max + kFrameExtra) tokens in `room`; floor division, also below zero.
    const int64_t per_frame = room >= 0 ? room / (2 * intros) : -((-room + 2 * intros - 1) / (2 * intros));
    best = std::min(best, per_frame - kFrameExtra);
  }
  return static_cast<int>(std::max<int64_t>(best, INT_MIN));
}

namespace {
// SplitMix64 finaliser: decorrelates (seed, split) into the engine's seed.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

TaskGenerator::TaskGenerator(uint64_t seed, Split split, TaskOptions options)
    : options_(options), rng_(mix(mix(seed) ^ (0x51ed270b27ULL * (static_cast<uint64_t>(split) + 1)))) {
  if (options_.frame_min < 4 || options_.frame_max < options_.frame_min || options_.min_intros < 1 ||
      options_.max_intros < options_.min_intros || options_.max_intros > 8 || options_.max_gap_texts < 1 ||
      options_.min_texts < 0 || options_.max_texts < options_.min_texts ||
      options_.max_texts + 2 * options_.max_intros > tok::kNumObjects) {
    throw std::invalid_argument(
        "binding TaskOptions: frame_min >= 4, frame_max >= frame_min, 1 <= intros <= 8, max_gap_texts >= 1, 0 <= "
        "texts, intros·2 + texts <= 12");
  }
}

// Portable draws (std::uniform_int_distribution is implementation-defined).
int TaskGenerator::uniform(int lo, int hi) {
  const uint64_t span = static_cast<uint64_t>(hi - lo + 1);
  return lo + static_cast<int>(rng_() % span);
}

double TaskGenerator::unit() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }

std::vector<int64_t> TaskGenerator::frame_tokens(int64_t start, int64_t patch, int frame_len) {
  // Drawn lengths lean short (u² skew: mean ≈ min + (max − min)/3) so training stays cheap while the
  // long frames that probes use (frame_max) are still seen.
  const double u = unit();
  const int n = frame_len > 0
                    ? frame_len
                    : options_.frame_min + static_cast<int>((options_.frame_max - options_.frame_min + 1) * u * u);
  std::vector<int64_t> out{start};
  int signal = 0;
  for (int i = 0; i < n; ++i) {
    if (unit() < options_.signal) {
      out.push_back(patch);
      ++signal;
    } else {
      out.push_back(tok::kNoise + uniform(0, tok::kNumNoise - 1));
    }
  }
  // At least three copies of the patch, at drawn places.
  while (signal < 3) {
    const int at = 1 + uniform(0, n - 1);
    if (out[static_cast<size_t>(at)] != patch) {
      out[static_cast<size_t>(at)] = patch;
      ++signal;
    }
  }
  out.push_back(tok::kFrameEnd);
  return out;
}

Chunk TaskGenerator::intro(int obj, int color, int frame_len) {
  Chunk c;
  c.kind = ChunkKind::kIntro;
  c.obj = obj;
  c.color = color;
  c.tokens = frame_tokens(tok::kFrameA, tok::kObjPatch + obj * tok::kNumColors + color, frame_len);
  return c;
}

Chunk TaskGenerator::ref(const Chunk& intro_chunk, int intro_index, int loc, int frame_len) {
  Chunk c;
  c.kind = ChunkKind::kRef;
  c.obj = intro_chunk.obj;
  c.loc = loc;
  c.referent = intro_index;
  c.tokens = frame_tokens(tok::kFrameB, tok::kLocPatch + loc, frame_len);
  return c;
}

Chunk TaskGenerator::text(int obj, int room) {
  Chunk c;
  c.kind = ChunkKind::kText;
  c.obj = obj;
  c.room = room;
  c.tokens = {tok::kText,        tok::kFiller + uniform(0, tok::kNumFiller - 1), tok::kObject + obj, tok::kIn,
              tok::kRoom + room, tok::kFiller + uniform(0, tok::kNumFiller - 1), tok::kDot};
  return c;
}

Question TaskGenerator::question(QuestionKind kind, const Episode& episode, int chunk) {
  const Chunk& c = episode.chunks.at(static_cast<size_t>(chunk));
  Question q;
  q.kind = kind;
  q.chunk = chunk;
  q.tokens = {tok::kAsk + static_cast<int64_t>(kind) * tok::kNumObjects + c.obj};
  switch (kind) {
    case QuestionKind::kColor: q.answer = tok::kColor + c.color; break;
    case QuestionKind::kRoom: q.answer = tok::kRoom + c.room; break;
    case QuestionKind::kWhere: q.answer = tok::kLoc + c.loc; break;
  }
  return q;
}

Episode TaskGenerator::episode() {
  Episode e;
  const int intros = uniform(options_.min_intros, options_.max_intros);
  const int texts = uniform(options_.min_texts, options_.max_texts);
  std::vector<int> objects(tok::kNumObjects), locs(tok::kNumLocs);
  for (int i = 0; i < tok::kNumObjects; ++i) objects[static_cast<size_t>(i)] = i;
  for (int i = 0; i < tok::kNumLocs; ++i) locs[static_cast<size_t>(i)] = i;
  std::shuffle(objects.begin(), objects.end(), rng_);
  std::shuffle(locs.begin(), locs.end(), rng_);
  // Intro frames show distinct objects; text facts are about further distinct objects (never one that a
  // frame shows, so an object word names one fact or one shown object, not both).
  size_t next_text = static_cast<size_t>(intros);
  auto add_text = [&] { e.chunks.push_back(text(objects[next_text++], uniform(0, tok::kNumRooms - 1))); };
  // Free text chunks go to drawn scene boundaries 0..intros; gap texts (inside a scene) come on top, while
  // objects last (the free texts' objects are held back for them).
  std::vector<int> at_boundary(static_cast<size_t>(intros + 1), 0);
  for (int t = 0; t < texts; ++t) ++at_boundary[static_cast<size_t>(uniform(0, intros))];
  int free_left = texts;
  for (int s = 0; s <= intros; ++s) {
    for (int t = 0; t < at_boundary[static_cast<size_t>(s)]; ++t, --free_left) add_text();
    if (s == intros) break;
    e.chunks.push_back(intro(objects[static_cast<size_t>(s)], uniform(0, tok::kNumColors - 1)));
    const int intro_index = static_cast<int>(e.chunks.size()) - 1;
    if (unit() < options_.ref_probability) {
      if (unit() < options_.gap_probability) {
        const int gap = options_.max_gap_texts > 1 ? uniform(1, options_.max_gap_texts) : 1;
        for (int t = 0; t < gap && next_text + static_cast<size_t>(free_left) < objects.size(); ++t) add_text();
      }
      e.chunks.push_back(ref(e.chunks[static_cast<size_t>(intro_index)], intro_index, locs[static_cast<size_t>(s)]));
    }
  }
  for (int i = 0; i < static_cast<int>(e.chunks.size()); ++i) {
    switch (e.chunks[static_cast<size_t>(i)].kind) {
      case ChunkKind::kIntro: e.questions.push_back(question(QuestionKind::kColor, e, i)); break;
      case ChunkKind::kText: e.questions.push_back(question(QuestionKind::kRoom, e, i)); break;
      case ChunkKind::kRef: e.questions.push_back(question(QuestionKind::kWhere, e, i)); break;
    }
  }
  return e;
}

Probe make_probe(TaskGenerator& gen, bool multi_hop, const ProbeOptions& options) {
  for (int attempt = 0; attempt < 100000; ++attempt) {
    Episode e = gen.episode();
    std::vector<int> candidates;
    for (int b = options.min_context; b < static_cast<int>(e.chunks.size()) && b <= options.max_context; ++b) {
      const Chunk& c = e.chunks[static_cast<size_t>(b)];
      if (!multi_hop && c.kind == ChunkKind::kIntro) candidates.push_back(b);
      if (multi_hop && c.kind == ChunkKind::kRef) {
        int other_refs = 0;
        for (int j = 0; j < b; ++j) other_refs += e.chunks[static_cast<size_t>(j)].kind == ChunkKind::kRef;
        if (other_refs >= options.min_other_refs) candidates.push_back(b);
      }
    }
    if (candidates.empty()) continue;
    const int b = candidates[static_cast<size_t>(gen.uniform(0, static_cast<int>(candidates.size()) - 1))];
    Probe p;
    p.context.assign(e.chunks.begin(), e.chunks.begin() + b);
    const Chunk& old = e.chunks[static_cast<size_t>(b)];
    // B at the probe's fixed length, same meaning.
    p.chunk = multi_hop ? gen.ref(e.chunks[static_cast<size_t>(old.referent)], old.referent, old.loc, options.frame_len)
                        : gen.intro(old.obj, old.color, options.frame_len);
    e.chunks[static_cast<size_t>(b)] = p.chunk;
    p.question = TaskGenerator::question(multi_hop ? QuestionKind::kWhere : QuestionKind::kColor, e, b);
    return p;
  }
  throw std::runtime_error("make_probe: no episode matched (check TaskOptions)");
}

namespace {
// k-1 text chunks about distinct objects other than `skip`.
std::vector<Chunk> texts(TaskGenerator& gen, int count, int skip) {
  std::vector<int> objects;
  for (int o = 0; o < tok::kNumObjects; ++o) {
    if (o != skip) objects.push_back(o);
  }
  std::shuffle(objects.begin(), objects.end(), gen.rng());
  std::vector<Chunk> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(gen.text(objects[static_cast<size_t>(i) % objects.size()], gen.uniform(0, tok::kNumRooms - 1)));
  }
  return out;
}
}  // namespace

ReorderSet make_reorder_set(TaskGenerator& gen, int k, int frame_len) {
  ReorderSet s;
  const int obj = gen.uniform(0, tok::kNumObjects - 1);
  Chunk a = gen.intro(obj, gen.uniform(0, tok::kNumColors - 1));
  s.antecedents = texts(gen, k - 1, obj);
  const int slot = gen.uniform(0, k - 1);
  s.antecedents.insert(s.antecedents.begin() + slot, a);
  s.chunk = gen.ref(a, slot, gen.uniform(0, tok::kNumLocs - 1), frame_len);
  Episode e;
  e.chunks = s.antecedents;
  e.chunks.push_back(s.chunk);
  s.question = TaskGenerator::question(QuestionKind::kWhere, e, k);
  return s;
}

RecallCase make_recall_case(TaskGenerator& gen, int k, double turnover, int frame_len, int distractors) {
  if (distractors < 0 || k < distractors + 1) throw std::invalid_argument("make_recall_case: k >= distractors + 1");
  // Distinct objects and locations for everything that may appear (old and fresh units).
  std::vector<int> objects(tok::kNumObjects), locs(tok::kNumLocs);
  for (int i = 0; i < tok::kNumObjects; ++i) objects[static_cast<size_t>(i)] = i;
  for (int i = 0; i < tok::kNumLocs; ++i) locs[static_cast<size_t>(i)] = i;
  std::shuffle(objects.begin(), objects.end(), gen.rng());
  std::shuffle(locs.begin(), locs.end(), gen.rng());
  size_t next_obj = 0, next_loc = 0;
  auto scene = [&] {
    Chunk intro = gen.intro(objects[next_obj++], gen.uniform(0, tok::kNumColors - 1));
    Chunk ref = gen.ref(intro, -1, locs[next_loc++]);
    return std::vector<Chunk>{intro, ref};
  };
  auto text = [&] {  // about an object no frame of the case shows
    return std::vector<Chunk>{gen.text(objects[next_obj++], gen.uniform(0, tok::kNumRooms - 1))};
  };
  RecallCase r;
  const int obj = objects[next_obj++];
  const int loc = locs[next_loc++];
  // Units: `distractors` whole scenes (intro + its ref frame) first, then A and k − distractors − 1 texts
  // in a drawn order (A stays the most recent intro frame before B either way).
  std::vector<std::vector<Chunk>> units;
  for (int d = 0; d < distractors; ++d) units.push_back(scene());
  std::vector<std::vector<Chunk>> tail;
  tail.push_back({gen.intro(obj, gen.uniform(0, tok::kNumColors - 1))});
  for (int t = 0; t < k - distractors - 1; ++t) tail.push_back(text());
  std::shuffle(tail.begin(), tail.end(), gen.rng());
  int a_unit = -1;
  for (auto& u : tail) {
    if (u.front().kind == ChunkKind::kIntro) a_unit = static_cast<int>(units.size());
    units.push_back(std::move(u));
  }
  auto flatten = [](const std::vector<std::vector<Chunk>>& us, int a, int* a_index) {
    std::vector<Chunk> out;
    for (int u = 0; u < static_cast<int>(us.size()); ++u) {
      if (u == a) *a_index = static_cast<int>(out.size());
      out.insert(out.end(), us[static_cast<size_t>(u)].begin(), us[static_cast<size_t>(u)].end());
    }
    // Each ref frame's referent: the intro frame just before it.
    for (int i = 0; i < static_cast<int>(out.size()); ++i) {
      if (out[static_cast<size_t>(i)].kind == ChunkKind::kRef) out[static_cast<size_t>(i)].referent = i - 1;
    }
    return out;
  };
  int a_index = -1;
  r.old_context = flatten(units, a_unit, &a_index);
  r.chunk = gen.ref(r.old_context[static_cast<size_t>(a_index)], a_index, loc, frame_len);

  // Replace round(turnover·k) distinct units by fresh ones of the same kind (a fresh intro frame A shows
  // a new object, so the referent changes; a fresh scene shows a new object at a new location).
  const int replace = static_cast<int>(std::lround(turnover * k));
  std::vector<int> slots(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) slots[static_cast<size_t>(i)] = i;
  std::shuffle(slots.begin(), slots.end(), gen.rng());
  int new_obj = obj;
  for (int i = 0; i < replace; ++i) {
    const int u = slots[static_cast<size_t>(i)];
    std::vector<Chunk>& unit = units[static_cast<size_t>(u)];
    if (u == a_unit) {
      new_obj = objects[next_obj++];
      unit = {gen.intro(new_obj, gen.uniform(0, tok::kNumColors - 1))};
      r.referent_replaced = true;
    } else if (unit.front().kind == ChunkKind::kIntro) {
      unit = scene();
    } else {
      unit = text();
    }
  }
  r.new_context = flatten(units, a_unit, &a_index);
  Episode e;
  e.chunks = r.new_context;
  Chunk current = r.chunk;
  current.obj = new_obj;
  current.referent = a_index;
  e.chunks.push_back(current);
  r.question = TaskGenerator::question(QuestionKind::kWhere, e, static_cast<int>(e.chunks.size()) - 1);
  return r;
}

}  // namespace orbit::binding
