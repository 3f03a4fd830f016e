// Safetensors file access: a read-only memory mapping validated by parse_safetensors
// (safetensors_header.cpp), tensor loads that copy out of the mapping, and an atomic writer.
//
// Byte order: the format is little-endian and tensors are copied byte-for-byte, so this file assumes a
// little-endian host (checked at compile time below).
#include "orbit/runtime/safetensors.h"

#include "orbit/common/error.h"
#include "orbit/common/file_kind.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <system_error>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O copies little-endian bytes as-is");

namespace orbit::runtime {
namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

at::ScalarType to_scalar_type(StDtype dtype) {
  switch (dtype) {
    case StDtype::kF64: return at::kDouble;
    case StDtype::kF32: return at::kFloat;
    case StDtype::kF16: return at::kHalf;
    case StDtype::kBF16: return at::kBFloat16;
    case StDtype::kI64: return at::kLong;
    case StDtype::kI32: return at::kInt;
    case StDtype::kI16: return at::kShort;
    case StDtype::kI8: return at::kChar;
    case StDtype::kU8: return at::kByte;
    case StDtype::kBool: return at::kBool;
  }
  ORBIT_FAIL("unknown StDtype " << static_cast<int>(dtype));
}

// The stored dtype of an integer/bool tensor; false for anything safetensors v1 (as we support it)
// cannot hold, e.g. complex or quantized tensors.
bool integer_st_dtype(at::ScalarType type, StDtype* out) {
  switch (type) {
    case at::kLong: *out = StDtype::kI64; return true;
    case at::kInt: *out = StDtype::kI32; return true;
    case at::kShort: *out = StDtype::kI16; return true;
    case at::kChar: *out = StDtype::kI8; return true;
    case at::kByte: *out = StDtype::kU8; return true;
    case at::kBool: *out = StDtype::kBool; return true;
    default: return false;
  }
}

bool is_floating(StDtype dtype) {
  return dtype == StDtype::kF64 || dtype == StDtype::kF32 || dtype == StDtype::kF16 || dtype == StDtype::kBF16;
}

// Closes a descriptor on scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close()'s errno (0 on success): a deferred write error can surface here.
  int close_now() {
    int err = 0;
    if (fd_ >= 0 && ::close(fd_) != 0) err = errno;
    fd_ = -1;
    return err;
  }

 private:
  int fd_;
};

// The writer's temporary file: removed on scope exit unless committed by a successful rename.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void commit() { committed_ = true; }

 private:
  std::string path_;
  bool committed_ = false;
};

void write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    // Linux transfers at most ~2 GiB per write(); loop over partial writes and EINTR.
    const std::size_t chunk = std::min<std::size_t>(size, std::size_t{1} << 30);
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    ORBIT_CHECK(n > 0, path << ": write failed: " << errno_text(n < 0 ? errno : EIO));
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// A temp file name beside `path`, unique within this process and (by pid) across processes.
std::string temp_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

// What is written for one input tensor: its stored dtype and its byte range in the data section.
struct PlannedTensor {
  StDtype dtype;
  uint64_t begin;
  uint64_t end;
};

}  // namespace

// ---- SafetensorsFile -----------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type check below then refuses it.
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  ORBIT_CHECK(fd.get() >= 0, path << ": cannot open safetensors file: " << errno_text(errno));
  struct stat st {};
  ORBIT_CHECK(::fstat(fd.get(), &st) == 0, path << ": cannot stat safetensors file: " << errno_text(errno));
  ORBIT_CHECK(!S_ISDIR(st.st_mode), path << ": is a directory, not a safetensors file");
  ORBIT_CHECK(S_ISREG(st.st_mode), path << ": is not a regular file");
  ORBIT_CHECK(st.st_size > 0, path << ": file is empty (0 bytes), not a safetensors file");
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  // MAP_PRIVATE + PROT_READ: pages are read lazily, so only the header is touched here however large
  // the file. (A file truncated by someone else while mapped would fault on access; not defended.)
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  ORBIT_CHECK(map != MAP_FAILED, path << ": cannot map safetensors file (" << size << " bytes): " << errno_text(errno));
  data_ = static_cast<const uint8_t*>(map);
  size_ = size;
  try {
    header_ = parse_safetensors(data_, size_, path_);
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(data_), size_);  // the destructor does not run for a throwing constructor
    throw;
  }
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

SafetensorsFile::~SafetensorsFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      header_(std::move(other.header_)),
      index_(std::move(other.index_)),
      data_(other.data_),
      size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.header_ = StHeader{};
  other.index_.clear();
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    header_ = std::move(other.header_);
    index_ = std::move(other.index_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.header_ = StHeader{};
    other.index_.clear();
  }
  return *this;
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

at::Tensor SafetensorsFile::load(const std::string& name, at::ScalarType dtype) const {
  const StTensorInfo* info = find(name);
  ORBIT_CHECK(info != nullptr,
              path_ << ": tensor '" << name << "' is not in the file (" << header_.tensors.size() << " tensors)");
  // Copy into a fresh tensor of the stored dtype (the mapping's bytes may be unaligned), then convert;
  // .to() returns the same tensor when the dtype already matches.
  at::Tensor out = at::empty(info->shape, at::TensorOptions().dtype(to_scalar_type(info->dtype)));
  const std::size_t nbytes = static_cast<std::size_t>(info->end - info->begin);
  if (nbytes > 0) std::memcpy(out.data_ptr(), data_ + header_.data_offset + info->begin, nbytes);
  return out.to(dtype);
}

// ---- write_safetensors ---------------------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const StWriteOptions& options) {
  check_output_target(path, "a safetensors file");
  ORBIT_CHECK(is_floating(options.dtype), path << ": StWriteOptions::dtype must be a floating dtype (F64, F32, "
                                               << "F16 or BF16), got " << st_dtype_name(options.dtype));

  // Plan: stored dtype and byte range of every tensor, in the given order, packed back to back.
  std::vector<PlannedTensor> plan;
  plan.reserve(tensors.size());
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    ORBIT_CHECK(name != "__metadata__", path << ": tensor name '__metadata__' is reserved by the format");
    ORBIT_CHECK(names.insert(name).second, path << ": tensor '" << name << "' is given twice");
    ORBIT_CHECK(tensor.defined(), path << ": tensor '" << name << "' is undefined");
    StDtype dtype = options.dtype;
    if (!at::isFloatingType(tensor.scalar_type())) {
      ORBIT_CHECK(integer_st_dtype(tensor.scalar_type(), &dtype), path << ": tensor '" << name << "' has dtype "
                                                                       << tensor.scalar_type()
                                                                       << ", which safetensors cannot store");
    }
    const uint64_t nbytes = static_cast<uint64_t>(tensor.numel()) * st_dtype_size(dtype);
    plan.push_back({dtype, offset, offset + nbytes});
    offset += nbytes;
  }

  // Header. ordered_json keeps the tensors in the given order, which makes files easy to read by eye.
  std::string header_text;
  try {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!options.metadata.empty()) {
      nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
      for (const auto& [key, value] : options.metadata) metadata[key] = value;
      header["__metadata__"] = std::move(metadata);
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& tensor = tensors[i].second;
      header[tensors[i].first] = {{"dtype", st_dtype_name(plan[i].dtype)},
                                  {"shape", std::vector<int64_t>(tensor.sizes().begin(), tensor.sizes().end())},
                                  {"data_offsets", {plan[i].begin, plan[i].end}}};
    }
    header_text = header.dump();  // throws on names or metadata that are not valid UTF-8
  } catch (const nlohmann::json::exception& e) {
    ORBIT_FAIL(path << ": cannot encode the safetensors header: " << e.what());
  }
  // Pad with spaces (JSON whitespace) so the data section, at 8 + N, starts 8-byte aligned.
  while ((8 + header_text.size()) % 8 != 0) header_text.push_back(' ');
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(static_cast<uint64_t>(header_text.size()) >> (8 * i));

  // Write a temp file beside the target (same filesystem, so rename is atomic), fsync, rename.
  // Mode 0666 filtered by the umask, like any newly created file.
  TempFile temp(temp_name_for(path));
  FdGuard fd(::open(temp.path().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  ORBIT_CHECK(fd.get() >= 0, path << ": cannot create temporary file '" << temp.path() << "': " << errno_text(errno));
  write_all(fd.get(), prefix, sizeof prefix, path);
  write_all(fd.get(), header_text.data(), header_text.size(), path);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    // One tensor converted at a time, so peak memory is the largest tensor, not the whole file. A CPU
    // tensor already contiguous and of the stored dtype is written in place without a copy.
    const at::Tensor bytes = tensors[i].second.detach().to(at::kCPU, to_scalar_type(plan[i].dtype)).contiguous();
    const uint64_t nbytes = plan[i].end - plan[i].begin;
    if (nbytes > 0) write_all(fd.get(), bytes.data_ptr(), static_cast<std::size_t>(nbytes), path);
  }
  ORBIT_CHECK(::fsync(fd.get()) == 0, path << ": fsync failed: " << errno_text(errno));
  const int close_err = fd.close_now();
  ORBIT_CHECK(close_err == 0, path << ": close failed: " << errno_text(close_err));
  ORBIT_CHECK(::rename(temp.path().c_str(), path.c_str()) == 0,
              path << ": cannot rename the temporary file into place: " << errno_text(errno));
  temp.commit();

  // Make the rename itself durable. Best effort: the data is already complete and in place.
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  FdGuard dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() >= 0) ::fsync(dir_fd.get());
}

}  // namespace orbit::runtime
