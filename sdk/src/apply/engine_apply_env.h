// The engine's ApplyEnv (apply_env.h): the window being built by apply() (WindowBuild) and the reads,
// forwards and background jobs the serving actions ask for, over the engine's model, store and queue. KV
// crosses the seam as TensorKv, a runtime::Content behind the opaque Kv handle.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "apply/apply_env.h"
#include "orbit/runtime/model.h"
#include "orbit/runtime/reuse.h"
#include "window/window_past.h"
#include "window/window_state.h"

namespace orbit::detail {

class EngineCore;

// The KV of one instance (content channel) behind a Kv: rows made for it (a forward, a stored value), or
// a *placement*: a chunk's canonical with the patch factors of its context (none for canonical and blind),
// whose patched rows are computed only when content() is read. apply_plan puts a placement in the window
// by reference (SharedPool::place: the canonical's shared pages plus the factors) where the pool shares
// it, and writes content() into pages of its own (SharedPool::create) where it does not.
class TensorKv final : public KvRows {
 public:
  struct Placement {
    std::string key;                              // the chunk's content key
    runtime::Content canonical;                   // KV(B|∅)
    std::shared_ptr<const runtime::Patch> patch;  // null: the canonical as it is
  };
  explicit TensorKv(runtime::Content content) : content_(std::move(content)), made_(true) {}
  TensorKv(const runtime::Model& model, Placement placement)
      : model_(&model), placement_(std::move(placement)), made_(placement_.patch == nullptr) {}
  int64_t rows() const override;
  int64_t bytes() const override;  // the rows read from the store (a placement: its canonical's)
  // The rows; a placement's canonical + U·Vᵀ (runtime::apply_patch) on first call.
  const runtime::Content& content() const;
  const Placement* placement() const { return model_ != nullptr ? &placement_ : nullptr; }

 private:
  const runtime::Model* model_ = nullptr;  // set for placements
  Placement placement_;
  mutable std::mutex mu_;  // guards the patched rows' first computation
  mutable runtime::Content content_;
  mutable bool made_ = false;
};

Kv make_kv(runtime::Content content);
// The content behind a Kv made by make_kv or placed (empty for null).
const runtime::Content& content_of(const Kv& kv);
// The placement behind a Kv (null: rows of its own, or null Kv).
const TensorKv::Placement* placement_of(const Kv& kv);

// The window being built by apply(): entries made so far, in window order, and their KV as a past.
struct WindowBuild {
  EngineCore& core;
  std::vector<Entry> entries;
  std::vector<runtime::Content> contents;  // filled lazily for kept entries
  std::vector<int64_t> starts;             // each entry's first position
  int64_t next_position = 0;
  KvState chain;    // the KV-state chain over the entries built so far
  KvState content;  // their content chain
  // Plan::rope_window: the window length every forward runs at (dynamic-NTK RoPE; 0: each forward's own end).
  int64_t rope_window = 0;
  // The patch forms the step being served asked for (ApplyEnv::queue_form), queued by queue_forms() once its KV
  // is stored for exact reuse: a form's catalog record makes its patch available to every window's plans at once,
  // and one planned in between (a fork read on another thread) took that patch, truncated to its rank, where the
  // exact KV was a moment from being stored.
  std::vector<FormJob> forms;

  // The window's kept past (WindowState::past): past() starts from its rows where they match, and the build puts
  // its own back when destroyed. Null: every entry gathered afresh.
  std::shared_ptr<WindowPast> kept_past;

  explicit WindowBuild(EngineCore& c) : core(c) {}
  ~WindowBuild();  // destroys the entries under the pool lock; puts the past back
  WindowBuild(const WindowBuild&) = delete;
  WindowBuild& operator=(const WindowBuild&) = delete;

  // The KV of every entry built so far, with positions: views of buffers that grow by doubling, each entry's KV
  // copied in once (a plan that re-forms n instances in context copied the whole past at each of them: O(n²)
  // bytes, gigabytes for a long conversation), the leading entries the window's kept past holds not even once.
  // An entry's content and position do not change once added.
  runtime::PastKV past();
  std::vector<ContextItem> context() const;
  std::vector<InstanceId> context_ids() const;
  std::vector<std::string> context_keys() const;
  void queue_forms();  // queues `forms` (PatchJobs::queue_patch) and empties it

 private:
  // past()'s buffers: the first rows hold entries [0, past_entries_).
  WindowPast::Rows past_;
  std::size_t past_entries_ = 0;
  bool past_taken_ = false;                       // past() took the kept past's rows (put back by the destructor)
  WindowPast::Key past_key(std::size_t i) const;  // entry i's key in a past
  void add_past();  // appends the KV and positions of the entries past() has not joined yet
};

class EngineApplyEnv final : public ApplyEnv {
 public:
  explicit EngineApplyEnv(WindowBuild& build) : core_(build.core), build_(build) {}

  bool context_empty() const override { return build_.entries.empty(); }
  std::vector<std::string> context_keys() const override { return build_.context_keys(); }
  KvState chain() const override { return build_.chain; }
  ModelLimits model() const override;

  CanonicalRead canonical(const ChunkRecord& chunk) override;
  std::optional<Kv> patched(const ChunkRecord& chunk, const Kv& canonical, const std::string& patch_key,
                            int64_t* patch_bytes) override;
  std::optional<Kv> conditioned(const std::string& store_key) override;
  void put_conditioned(const Kv& kv, const std::string& chunk_key, PatchRecord record) override;

  Kv forward(const ApplyTarget& target) override;
  Kv leading_rows(const Kv& kv, int64_t rows) override;
  Kv forward_rest(const ApplyTarget& target, const Kv& head) override;
  Kv recompute(const ApplyTarget& target, const Kv& canonical, int64_t count, bool selective,
               double* probe_tokens) override;

  void queue_form(FormJob job) override;
  void queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>& tokens,
                              const Kv& conditioned) override;

 private:
  runtime::ForwardInput input_of(const ApplyTarget& target) const;
  // Whether the target's tokens from `from` on go in pieces (orbit/forward_pieces.h): a scope on this thread
  // with a budget under their count, and token ids at linear positions.
  bool in_pieces(const ApplyTarget& target, int64_t from) const;
  // Its tokens [from, length) forwarded in the scope's pieces behind `past`: their rows.
  runtime::Content forward_pieces(const ApplyTarget& target, runtime::PastKV past, int64_t from);

  EngineCore& core_;
  WindowBuild& build_;
};

}  // namespace orbit::detail
