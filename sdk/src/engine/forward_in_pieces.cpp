// forward_in_pieces (forward_in_pieces.h).
#include "engine/forward_in_pieces.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "engine/engine_core.h"
#include "orbit/forward_pieces.h"

namespace orbit::detail {

bool goes_in_pieces(int64_t count) {
  const ForwardPieces* pieces = ForwardPieces::current();
  return pieces != nullptr && pieces->tokens() > 0 && count > pieces->tokens();
}

void append_past_rows(runtime::PastKV& past, const runtime::Content& rows, const at::Tensor& positions) {
  if (past.length() == 0) {
    past.layers = rows;
    past.positions = positions;
    return;
  }
  if (past.layers.empty()) {  // a paged past (a window's pages on CUDA) with no rows after them yet: these are
    past.layers = rows;
    past.positions = at::cat({past.positions, positions}, -1);
    return;
  }
  for (std::size_t l = 0; l < past.layers.size(); ++l) {
    past.layers[l].k = at::cat({past.layers[l].k, rows[l].k}, 0);
    past.layers[l].v = at::cat({past.layers[l].v, rows[l].v}, 0);
  }
  past.positions = at::cat({past.positions, positions}, -1);
}

runtime::Content forward_in_pieces(EngineCore& core, const std::vector<int64_t>& tokens, int64_t from, int64_t start,
                                   runtime::PastKV past, const runtime::ForwardOptions& fo) {
  ForwardPieces& pieces = *ForwardPieces::current();
  const int64_t n = static_cast<int64_t>(tokens.size()), size = pieces.tokens();
  std::vector<runtime::Content> parts;
  for (int64_t at = from; at < n; at += size) {
    if (at > from) pieces.between();
    const int64_t end = std::min(n, at + size);
    const std::vector<int64_t> piece(tokens.begin() + at, tokens.begin() + end);
    const runtime::ForwardInput in = core.registry().input_for_tokens(piece, start + at);
    runtime::Content rows = core.model().forward(in, past.length() > 0 ? &past : nullptr, fo).content;
    if (end < n) append_past_rows(past, rows, in.positions);
    parts.push_back(std::move(rows));
  }
  runtime::Content all(parts.front().size());
  for (std::size_t l = 0; l < all.size(); ++l) {
    std::vector<at::Tensor> k, v;
    for (const runtime::Content& p : parts) {
      k.push_back(p[l].k);
      v.push_back(p[l].v);
    }
    all[l] = {at::cat(k, 0), at::cat(v, 0)};
  }
  return all;
}

}  // namespace orbit::detail
