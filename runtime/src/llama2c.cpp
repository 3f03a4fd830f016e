// llama2.c checkpoints, legacy version-0 layout:
//
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len     (28 bytes, LE)
//   float32 token_embedding[vocab][dim]
//           rms_att[L][dim]  wq[L][dim][dim]  wk[L][kv_dim][dim]  wv[L][kv_dim][dim]  wo[L][dim][dim]
//           rms_ffn[L][dim]  w1[L][hidden][dim]  w2[L][dim][hidden]  w3[L][hidden][dim]
//           rms_final[dim]
//           freq_cis_real[seq_len][head_size/2]  freq_cis_imag[seq_len][head_size/2]   (unused)
//           wcls[vocab][dim]   only when the header's vocab_size is negative (unshared classifier)
//
// RoPE is interleaved (pairs 2i, 2i+1), theta 10000; RMSNorm eps 1e-5; weights are [out][in] like
// torch's linear. The file size must match the header exactly.
#include <ATen/ATen.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "orbit/common/error.h"
#include "orbit/runtime/loader.h"
#include "orbit/runtime/weights.h"

namespace orbit::runtime {

namespace {

struct Header {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

class Reader {
 public:
  Reader(const std::string& path, uint64_t file_size) : path_(path), in_(path, std::ios::binary), size_(file_size) {
    ORBIT_CHECK(in_.good(), path << ": cannot open for reading");
  }
  // Reads `count` rows × `row` floats into a new float32 tensor of `shape`; `what` names the field.
  at::Tensor read(at::IntArrayRef shape, const char* what) {
    at::Tensor t = at::empty(shape, at::kFloat);
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * sizeof(float);
    ORBIT_CHECK(offset_ + bytes <= size_, path_ << ": truncated while reading '" << what << "' (needs bytes ["
                                                << offset_ << ", " << offset_ + bytes << "), file has " << size_
                                                << ")");
    in_.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(bytes));
    ORBIT_CHECK(in_.good(), path_ << ": read error in '" << what << "' at byte " << offset_);
    offset_ += bytes;
    return t;
  }
  void skip(uint64_t bytes, const char* what) {
    ORBIT_CHECK(offset_ + bytes <= size_, path_ << ": truncated in '" << what << "'");
    in_.seekg(static_cast<std::streamoff>(offset_ + bytes));
    offset_ += bytes;
  }
  void read_raw(void* out, uint64_t bytes, const char* what) {
    ORBIT_CHECK(offset_ + bytes <= size_, path_ << ": truncated in '" << what << "' (file is " << size_ << " bytes)");
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
    ORBIT_CHECK(in_.good(), path_ << ": read error in '" << what << "'");
    offset_ += bytes;
  }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_;
  uint64_t offset_ = 0;
};

uint64_t file_size_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  ORBIT_CHECK(in.good(), path << ": cannot open for reading");
  const std::streamoff size = in.tellg();
  ORBIT_CHECK(size >= 0, path << ": cannot determine file size");
  return static_cast<uint64_t>(size);
}

// The header's sizes as the model uses them. A negative vocab_size in the header means the classifier is
// stored after the other weights (not shared with the embedding).
struct Dims {
  bool shared_classifier = true;
  int64_t vocab = 0, dim = 0, hidden = 0, layers = 0, head = 0, kv_dim = 0;
};

// Reads the header and checks its fields: positive sizes, heads that divide, an even head size.
Header read_header(Reader& reader, const std::string& path) {
  Header h{};
  reader.read_raw(&h, sizeof h,
                  "header (7 int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len)");
  // A file that is no llama2.c checkpoint (a text file, a Hugging Face directory's weights) fails here on
  // numbers that mean nothing: each message says how the file was read.
  const char* const as_read =
      " (the file read as a llama2.c checkpoint: 7 int32 sizes, then float32 weights; a "
      "Hugging Face model is given as its directory)";
  auto positive = [&](int32_t value, const char* field) {
    ORBIT_CHECK(value > 0, path << ": header field '" << field << "' must be positive, got " << value << as_read);
  };
  positive(h.dim, "dim");
  positive(h.hidden_dim, "hidden_dim");
  positive(h.n_layers, "n_layers");
  positive(h.n_heads, "n_heads");
  positive(h.n_kv_heads, "n_kv_heads");
  positive(h.seq_len, "seq_len");
  ORBIT_CHECK(h.vocab_size != 0 && h.vocab_size != std::numeric_limits<int32_t>::min(),
              path << ": header field 'vocab_size' must be non-zero, got " << h.vocab_size << as_read);
  ORBIT_CHECK(h.dim % h.n_heads == 0, path << ": header field 'dim' (" << h.dim << ") is not divisible by n_heads ("
                                           << h.n_heads << ")" << as_read);
  ORBIT_CHECK(h.n_heads % h.n_kv_heads == 0, path << ": header field 'n_kv_heads' (" << h.n_kv_heads
                                                  << ") must divide n_heads (" << h.n_heads << ")" << as_read);
  const int64_t head = h.dim / h.n_heads;
  ORBIT_CHECK(head % 2 == 0, path << ": head size dim/n_heads = " << head << " must be even for RoPE" << as_read);
  return h;
}

Dims dims_of(const Header& h) {
  Dims d;
  d.shared_classifier = h.vocab_size > 0;
  d.vocab = d.shared_classifier ? h.vocab_size : -static_cast<int64_t>(h.vocab_size);
  d.dim = h.dim;
  d.hidden = h.hidden_dim;
  d.layers = h.n_layers;
  d.head = h.dim / h.n_heads;
  d.kv_dim = d.head * h.n_kv_heads;
  return d;
}

// Exact size check up front: a truncated or padded file is an error, not a partial model.
// 128-bit arithmetic: a corrupt header must not overflow its way into a plausible size.
void check_file_size(const std::string& path, uint64_t size, const Header& h, const Dims& d) {
  using Wide = __int128;
  const int64_t vocab = d.vocab, dim = d.dim, hidden = d.hidden, L = d.layers, head = d.head, kv_dim = d.kv_dim;
  const Wide floats = Wide(vocab) * dim + Wide(L) * dim + Wide(L) * dim * dim + Wide(2) * L * kv_dim * dim +
                      Wide(L) * dim * dim + Wide(L) * dim + Wide(3) * L * hidden * dim + dim + Wide(h.seq_len) * head +
                      (d.shared_classifier ? Wide(0) : Wide(vocab) * dim);
  const Wide expected_wide = Wide(sizeof(Header)) + floats * Wide(sizeof(float));
  const uint64_t expected = expected_wide > Wide(std::numeric_limits<uint64_t>::max())
                                ? std::numeric_limits<uint64_t>::max()
                                : static_cast<uint64_t>(expected_wide);
  ORBIT_CHECK(size == expected,
              path << ": file is " << size << " bytes but its header (dim=" << h.dim << ", hidden_dim=" << h.hidden_dim
                   << ", n_layers=" << h.n_layers << ", n_heads=" << h.n_heads << ", n_kv_heads=" << h.n_kv_heads
                   << ", vocab_size=" << h.vocab_size << ", seq_len=" << h.seq_len << ") implies " << expected
                   << " bytes" << (size < expected ? " (truncated)" : " (trailing bytes)"));
}

// The Llama config a llama2.c header describes (see the layout above), validated.
ModelConfig config_of(const Header& h, const Dims& d, const std::string& path) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.source_format = "llama2c";
  c.weight_dtype = "float32";
  c.vocab_size = d.vocab;
  c.hidden_size = d.dim;
  c.intermediate_size = d.hidden;
  c.num_layers = d.layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = d.head;
  c.rms_norm_eps = 1e-5;
  c.attention_bias = false;
  c.tie_word_embeddings = d.shared_classifier;
  c.max_position_embeddings = h.seq_len;
  c.rope.layout = RopeLayout::kInterleaved;
  c.rope.head_dim = d.head;
  c.rope.rotary_dim = d.head;
  c.rope.theta = 10000.0;
  c.rope.max_position_embeddings = h.seq_len;
  c.validate(path);
  return c;
}

// The per-layer weights, in file order. Stacked per-layer tensors are read whole, then split into
// per-layer views of one buffer each.
void read_layers(Reader& reader, const Dims& d, ModelWeights& w) {
  const int64_t dim = d.dim, hidden = d.hidden, kv_dim = d.kv_dim, L = d.layers;
  auto per_layer = [&](at::IntArrayRef shape, const char* what) {
    std::vector<int64_t> full{L};
    full.insert(full.end(), shape.begin(), shape.end());
    return reader.read(full, what).unbind(0);
  };
  auto rms_att = per_layer({dim}, "rms_att_weight");
  auto wq = per_layer({dim, dim}, "wq");
  auto wk = per_layer({kv_dim, dim}, "wk");
  auto wv = per_layer({kv_dim, dim}, "wv");
  auto wo = per_layer({dim, dim}, "wo");
  auto rms_ffn = per_layer({dim}, "rms_ffn_weight");
  auto w1 = per_layer({hidden, dim}, "w1");
  auto w2 = per_layer({dim, hidden}, "w2");
  auto w3 = per_layer({hidden, dim}, "w3");
  for (int64_t l = 0; l < L; ++l) {
    LayerWeights& lw = w.layers[static_cast<std::size_t>(l)];
    lw.attn_norm = rms_att[l];
    lw.wq = wq[l];
    lw.wk = wk[l];
    lw.wv = wv[l];
    lw.wo = wo[l];
    lw.ffn_norm = rms_ffn[l];
    lw.w_gate = w1[l];
    lw.w_down = w2[l];
    lw.w_up = w3[l];
  }
}

// The file is float32: other targets convert tensor by tensor (llama2.c models are small).
void convert_weights(ModelWeights& w, const ModelConfig& c, const ComputeTarget& target, bool shared_classifier) {
  if (target.dtype == at::kFloat && target.device.is_cpu()) return;
  for (const WeightSpec& spec : weight_specs(c)) {
    at::Tensor& slot = weight_slot(w, c, spec.name);
    slot = slot.to(target.device, target.dtype);
  }
  if (shared_classifier) w.lm_head = w.embed;
}

}  // namespace

int64_t llama2c_vocab_size(const std::string& path) {
  const uint64_t size = file_size_of(path);
  Reader reader(path, size);
  const Header h = read_header(reader, path);
  const Dims d = dims_of(h);
  check_file_size(path, size, h, d);
  return d.vocab;
}

std::unique_ptr<Model> load_llama2c(const std::string& path, const ComputeTarget& target) {
  const uint64_t size = file_size_of(path);
  Reader reader(path, size);
  const Header h = read_header(reader, path);
  const Dims d = dims_of(h);
  check_file_size(path, size, h, d);
  ModelConfig c = config_of(h, d, path);

  ModelWeights w;
  prepare_weights(w, c);
  w.embed = reader.read({d.vocab, d.dim}, "token_embedding_table");
  read_layers(reader, d, w);
  w.final_norm = reader.read({d.dim}, "rms_final_weight");
  reader.skip(static_cast<uint64_t>(h.seq_len * d.head) * sizeof(float), "freq_cis_real/freq_cis_imag");
  w.lm_head = d.shared_classifier ? w.embed : reader.read({d.vocab, d.dim}, "wcls");
  convert_weights(w, c, target, d.shared_classifier);
  return std::make_unique<Model>(std::move(c), std::move(w), path);
}

}  // namespace orbit::runtime
