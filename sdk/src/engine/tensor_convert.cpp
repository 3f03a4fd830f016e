#include "engine/tensor_convert.h"

#include <ATen/ATen.h>

#include "orbit/common/error.h"
#include "orbit/common/shape.h"

namespace orbit {

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt64: return "int64";
  }
  return "?";
}

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt64: return 8;
  }
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    ORBIT_CHECK(shape[i] >= 0, "TensorView: shape[" << i << "] = " << shape[i] << " is negative");
    ORBIT_CHECK(!__builtin_mul_overflow(n, shape[i], &n),
                "TensorView: shape " << shape_string(shape) << " holds more elements than an int64 counts");
  }
  return n;
}

namespace {

template <typename T>
TensorView view_of_vector(const std::vector<T>& values, std::vector<int64_t> shape, DType dtype) {
  TensorView v;
  v.data = values.data();
  v.dtype = dtype;
  v.shape = std::move(shape);
  for (std::size_t i = 0; i < v.shape.size(); ++i) {
    ORBIT_CHECK(v.shape[i] >= 0, "view_of: shape[" << i << "] = " << v.shape[i] << " is negative");
  }
  ORBIT_CHECK(v.numel() == static_cast<int64_t>(values.size()),
              "view_of: shape holds " << v.numel() << " elements, the vector " << values.size());
  return v;
}

}  // namespace

TensorView view_of(const std::vector<float>& values, std::vector<int64_t> shape) {
  return view_of_vector(values, std::move(shape), DType::kFloat32);
}

TensorView view_of(const std::vector<int64_t>& values, std::vector<int64_t> shape) {
  return view_of_vector(values, std::move(shape), DType::kInt64);
}

namespace detail {
namespace {

at::ScalarType scalar_type(DType d) {
  switch (d) {
    case DType::kFloat32: return at::kFloat;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat16: return at::kHalf;
    case DType::kInt64: return at::kLong;
  }
  return at::kFloat;
}

}  // namespace

at::Tensor embeddings_from_view(const TensorView& view, int64_t hidden, const char* what) {
  ORBIT_CHECK(view.data != nullptr, what << ": no data");
  ORBIT_CHECK(view.dtype != DType::kInt64, what << ": dtype int64; embeddings must be float32, bfloat16 or float16");
  ORBIT_CHECK(view.shape.size() == 2,
              what << ": shape " << shape_string(view.shape) << " must be [n, hidden = " << hidden << "]");
  ORBIT_CHECK(view.shape[0] >= 1, what << ": no rows (a chunk needs at least one token)");
  ORBIT_CHECK(view.shape[1] == hidden, what << ": width " << view.shape[1] << " != the model's hidden size " << hidden);
  at::Tensor t =
      at::from_blob(const_cast<void*>(view.data), view.shape, at::TensorOptions().dtype(scalar_type(view.dtype)))
          .to(at::kFloat)
          .clone();
  ORBIT_CHECK(at::isfinite(t).all().item<bool>(), what << ": holds NaN or Inf");
  return t;
}

at::Tensor grid_from_view(const TensorView& view, int64_t n, int64_t rows, const char* what) {
  if (view.empty()) return at::Tensor();
  ORBIT_CHECK(view.dtype == DType::kInt64,
              what << ": dtype " << dtype_name(view.dtype) << "; a position grid must be int64");
  at::Tensor g = at::from_blob(const_cast<void*>(view.data), view.shape, at::kLong).clone();
  if (g.dim() == 1) {
    ORBIT_CHECK(g.size(0) == n, what << ": " << g.size(0) << " positions for " << n << " tokens");
    g = g.unsqueeze(0).expand({rows, n}).contiguous();
  }
  ORBIT_CHECK(g.dim() == 2 && g.size(1) == n && g.size(0) == rows,
              what << ": shape " << shape_string(view.shape) << " must be [" << rows << ", " << n << "] or [" << n
                   << "]" << (rows == 1 ? " (this model has 1-D positions)" : ""));
  ORBIT_CHECK(g.min().item<int64_t>() >= 0, what << ": negative coordinates");
  const int64_t largest = g.max().item<int64_t>();
  ORBIT_CHECK(largest < (int64_t{1} << 31), what << ": coordinate " << largest << " is too large (at most 2^31 - 1)");
  const at::Tensor mins = std::get<0>(g.min(1, /*keepdim=*/true));
  return (g - mins).contiguous();
}

std::vector<int64_t> grid_token_major(const at::Tensor& grid) {
  const at::Tensor t = grid.t().contiguous();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

}  // namespace detail
}  // namespace orbit
