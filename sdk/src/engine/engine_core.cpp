#include "engine/engine_core.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

#include "orbit/common/error.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/runtime/device.h"
#include "orbit/runtime/loader.h"
#include "orbit/store/codec.h"

namespace orbit::detail {

namespace {

// Bytes of one KV page: layers × page_size × (sum of widths) × element size, refused with a message
// naming page_size when the product overflows int64.
int64_t checked_page_bytes(const runtime::KVPoolOptions& po, int64_t page_size) {
  const auto overflow = [&] {
    ORBIT_FAIL("EngineOptions::page_size = " << page_size << ": one KV page of this model (" << po.num_layers
                                             << " layers) would hold more than 2^63 bytes");
  };
  int64_t width_sum = 0;
  for (int64_t w : po.widths) {
    if (__builtin_add_overflow(width_sum, w, &width_sum)) overflow();
  }
  int64_t bytes = static_cast<int64_t>(c10::elementSize(po.dtype));
  for (int64_t factor : {width_sum, page_size, po.num_layers}) {
    if (__builtin_mul_overflow(bytes, factor, &bytes)) overflow();
  }
  return bytes;
}

// EngineOptions::tokenizer, when given: a file (or a directory holding tokenizer.json) that can be read,
// refused before the model loads with a message naming the option and the path.
void check_tokenizer_option(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  const fs::path file = dir ? fs::path(path) / "tokenizer.json" : fs::path(path);
  ORBIT_CHECK(fs::exists(file, ec), "EngineOptions::tokenizer = '"
                                        << path
                                        << "': " << (dir ? "a directory with no tokenizer.json" : "no such file")
                                        << " (expected a llama2.c tokenizer .bin, a tokenizer.json or a directory "
                                           "holding one)");
  ORBIT_CHECK(!fs::is_directory(file, ec) && std::ifstream(file, std::ios::binary).good(),
              "EngineOptions::tokenizer = '" << path << "': cannot read " << file.string());
}

}  // namespace

EngineCore::EngineCore(const EngineOptions& options) : options_(options) {
  ORBIT_CHECK(!options.model.empty(), "EngineOptions::model: no model path given");
  ORBIT_CHECK(options.page_size >= 1, "EngineOptions::page_size must be >= 1 (got " << options.page_size << ")");
  ORBIT_CHECK(options.page_size <= EngineOptions::kMaxPageSize,
              "EngineOptions::page_size must be <= " << EngineOptions::kMaxPageSize << " tokens (got "
                                                     << options.page_size << ")");
  ORBIT_CHECK(options.pool_bytes > 0, "EngineOptions::pool_bytes must be > 0 (got " << options.pool_bytes << ")");
  ORBIT_CHECK(options.host_budget_bytes >= 0, "EngineOptions::host_budget_bytes must be >= 0");
  ORBIT_CHECK(options.disk_budget_bytes >= 0, "EngineOptions::disk_budget_bytes must be >= 0 (0 = unlimited)");
  ORBIT_CHECK(options.threads >= 0, "EngineOptions::threads must be >= 0 (0 = keep the process setting)");
  ORBIT_CHECK(std::string(background_mode_name(options.background)) != "?",
              "EngineOptions::background = " << static_cast<int>(options.background)
                                             << " is not a BackgroundMode (kThread, kDeferred or kInline)");
  ORBIT_CHECK(options.max_background_bytes >= 0,
              "EngineOptions::max_background_bytes must be >= 0 (0 = no bound), got " << options.max_background_bytes);
  const unsigned cores = std::thread::hardware_concurrency();
  const int64_t max_threads = cores > 0 ? static_cast<int64_t>(cores) : 256;
  ORBIT_CHECK(options.threads <= max_threads,
              "EngineOptions::threads = " << options.threads << " exceeds this machine's " << max_threads << " cores");
  if (options.threads > 0) at::set_num_threads(options.threads);
  if (!options.tokenizer.empty()) check_tokenizer_option(options.tokenizer);
  model_ = runtime::load_model(options.model, runtime::parse_compute_target(options.device, options.dtype));
  const runtime::ModelConfig& c = model_->config();
  const std::string tokenizer_path =
      options.tokenizer.empty() ? runtime::find_tokenizer(options.model, c.vocab_size) : options.tokenizer;
  if (!tokenizer_path.empty()) tokenizer_ = runtime::load_tokenizer(tokenizer_path, c.vocab_size);

  registry_ = std::make_unique<ChunkRegistry>(*this, options.max_idle_chunks);
  kv_ = std::make_unique<KvStore>(*this, engine_store_options(*this));

  runtime::KVPoolOptions po;
  po.num_layers = c.num_layers;
  po.page_size = options.page_size;
  po.widths = c.content_widths();
  po.dtype = model_->dtype();
  po.device = runtime::device_name(model_->device());
  const int64_t page_bytes = checked_page_bytes(po, options.page_size);
  po.num_pages = options.pool_bytes / page_bytes;
  ORBIT_CHECK(po.num_pages >= 1, "EngineOptions::pool_bytes = " << options.pool_bytes
                                                                << " holds no page (one page of this model is "
                                                                << page_bytes << " bytes)");
  ORBIT_CHECK(po.num_pages <= std::numeric_limits<runtime::PageId>::max(),
              "EngineOptions::pool_bytes = "
                  << options.pool_bytes << " holds " << po.num_pages << " pages, more than the pool's "
                  << std::numeric_limits<runtime::PageId>::max() << " page ids (raise page_size or lower pool_bytes)");
  try {
    pool_ = std::make_unique<SharedPool>(po, options.shared_canonicals);
  } catch (const Error& e) {
    ORBIT_FAIL("EngineOptions::pool_bytes = " << options.pool_bytes << ": " << e.what());
  }
  // The radix yardstick holds as many tokens as orbit keeps KV for: the pool's and the host tier's, which keeps
  // the chunks' KV the pool let go (as SGLang's hierarchical cache keeps its radix tree's in host memory). With the
  // pool's alone it recomputed, under a small pool, what orbit read back from host memory.
  const int64_t token_bytes = std::max<int64_t>(1, page_bytes / options.page_size);
  usage_ = std::make_unique<UsageMeter>(po.num_pages * options.page_size + options.host_budget_bytes / token_bytes);
  jobs_ = std::make_unique<PatchJobs>(*this, options.background, options.max_background_bytes);
}

EngineCore::~EngineCore() {
  if (jobs_) jobs_->stop();
}

CloseReport EngineCore::close(const CloseOptions& options) {
  CloseReport report;
  // Without a directory or a remote the store dies with the engine: what the jobs would form is dropped unread.
  const bool kept = !options_.store_dir.empty() || !options_.remote.empty();
  life_.close(
      // Canonicals and patches queued by first sights are what the store exists to keep (another process
      // sharing the directory, or the next run, would otherwise encode them again): finish them first,
      // while operations are still accepted. Work queued after this point is dropped below.
      [&] {
        if (kept) {
          const PatchJobs::Finished f = jobs_->finish(options.finish_seconds, options.stop);
          report.finished = f.ran;
          report.stopped = f.stopped;
        }
        // A run_background on another thread would otherwise go on through the queue while close waits for it.
        jobs_->queue().stop_taking();
      },
      // Background jobs use the model and the store: once no operation is in flight, cancel the queued
      // ones and join the worker before the store goes.
      [&] {
        report.dropped = jobs_->queue().queued();
        jobs_->stop();
        kv_->close();
      });
  return report;
}

const runtime::Model& EngineCore::model() const {
  life_.check_open();
  return *model_;
}

const runtime::Tokenizer& EngineCore::tokenizer() const {
  ORBIT_CHECK(tokenizer_ != nullptr,
              "text needs a tokenizer and the model "
                  << options_.model
                  << " has none: orbit reads llama2.c tokenizer files (tok<vocab>.bin or tokenizer.bin beside a "
                     "llama2.c .bin), a Hugging Face directory's tokenizer.json, or EngineOptions::tokenizer; "
                     "without one, give token ids");
  return *tokenizer_;
}

const runtime::ChatTemplate* EngineCore::chat_template() const {
  std::call_once(chat_template_once_, [&] {
    // tokenizer_config.json of the model's directory, else beside the tokenizer file in use.
    std::vector<std::filesystem::path> dirs;
    std::error_code ec;
    if (std::filesystem::is_directory(options_.model, ec)) dirs.emplace_back(options_.model);
    if (tokenizer_ != nullptr) {
      const std::filesystem::path source(tokenizer_->source());
      dirs.push_back(std::filesystem::is_directory(source, ec) ? source : source.parent_path());
    }
    for (const std::filesystem::path& dir : dirs) {
      const std::filesystem::path config = dir / "tokenizer_config.json";
      if (!std::filesystem::is_regular_file(config, ec)) continue;
      try {
        std::optional<runtime::ChatTemplate> t = runtime::load_chat_template(config.string());
        if (t) chat_template_ = std::make_unique<runtime::ChatTemplate>(std::move(*t));
      } catch (const Error& e) {
        chat_template_error_ = e.what();
      }
      return;
    }
  });
  ORBIT_CHECK(chat_template_error_.empty(), chat_template_error_);
  return chat_template_.get();
}

int64_t window_position_limit(const runtime::ModelConfig& config) {
  const runtime::RopeConfig& r = config.rope;
  if (r.scaling != runtime::RopeScaling::kDynamicNtk) return config.max_position_embeddings;
  const int64_t anchor =
      r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings : r.max_position_embeddings;
  // The anchor as rope.cpp reads it (positive: validated for 'dynamic'); factor >= 1 and finite (rope.cpp validates
  // it); capped at 2^31 positions so the product stays exact.
  const double scaled = std::min(static_cast<double>(anchor) * r.factor, static_cast<double>(int64_t{1} << 31));
  return std::max(config.max_position_embeddings, static_cast<int64_t>(std::floor(scaled)));
}

const char* window_position_limit_source(const runtime::ModelConfig& config) {
  return config.rope.scaling == runtime::RopeScaling::kDynamicNtk ? "max_position_embeddings * rope_scaling.factor"
                                                                  : "max_position_embeddings";
}

ModelInfo EngineCore::model_info() const {
  const runtime::Model& m = model();
  const runtime::ModelConfig& c = m.config();
  ModelInfo info;
  info.origin = m.origin();
  info.architecture = runtime::arch_name(c.arch);
  info.fingerprint = m.fingerprint();
  info.num_layers = c.num_layers;
  info.vocab_size = c.vocab_size;
  info.max_positions = max_positions();
  info.position_rows = c.position_rows();
  info.hidden_size = c.hidden_size;
  int64_t w = 0;
  for (int64_t x : c.content_widths()) w += x;
  info.kv_bytes_per_token = w * c.num_layers * 4;
  info.device = runtime::device_name(m.device());
  info.dtype = runtime::dtype_name(m.dtype());
  if (tokenizer_) {
    info.tokenizer = tokenizer_->source();
    info.bos_token = tokenizer_->bos_id();
    info.eos_token = tokenizer_->eos_id();
  }
  return info;
}

}  // namespace orbit::detail
