// bench_gpu's recall section (f): a stored chunk recalled from pinned host memory or from a file against
// re-prefilling it, sequential and streamed layer by layer (see bench_gpu.cpp's header). CUDA only.
#include "bench_gpu_recall.h"

#include "ops/cuda_dispatch.h"
#if ORBIT_OPS_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "bench_gpu_util.h"

namespace orbit::bench_gpu {

using nlohmann::json;

namespace {

void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

// (f) Recall of a stored chunk against re-prefilling it. The chunk's content (every layer's K and V) is
// on the host in pinned memory, or in a file written layer after layer; it is copied into device
// buffers that exist beforehand (as pool pages would), then the query runs over it as the past.
json recall_section(const rt::Model& m, const std::vector<int64_t>& query, int reps, const std::string& scratch) {
  const rt::ModelConfig& c = m.config();
  const c10::Device dev = m.device();
  const int64_t B = 2048, L = c.num_layers;
  const int64_t qn = static_cast<int64_t>(query.size());
  std::vector<int64_t> chunk = tokens(B, c.vocab_size);
  std::vector<int64_t> all = chunk;
  all.insert(all.end(), query.begin(), query.end());
  rt::ForwardOptions last;
  last.logits = rt::LogitsMode::kLast;
  last.return_content = false;
  BENCH_RANGE_PUSH("recall_reprefill");
  const double reprefill_s = timed(dev, reps, [&] { (void)m.forward(input_at(all, 0), nullptr, last); });
  BENCH_RANGE_POP();

  // Host copy (pinned), device destination, and the file.
  const rt::Content content = random_content(m, B);
  std::vector<at::Tensor> host;  // per layer, K then V
  rt::PastKV past;
  past.positions = at::arange(B, at::kLong);
  for (const rt::LayerKV& kv : content) {
    host.push_back(kv.k.to(at::kCPU).pin_memory());
    host.push_back(kv.v.to(at::kCPU).pin_memory());
    past.layers.push_back({at::empty_like(kv.k), at::empty_like(kv.v)});
  }
  const int64_t layer_bytes = host[0].nbytes() + host[1].nbytes();
  const std::string file = scratch + "/orbit_bench_recall.bin";
  {
    std::ofstream out(file, std::ios::binary);
    for (const at::Tensor& t : host) out.write(static_cast<const char*>(t.data_ptr()), t.nbytes());
    if (!out) throw std::runtime_error("recall: cannot write " + file);
  }
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("recall: cannot open " + file);
  std::vector<at::Tensor> staging;  // pinned buffers the disk reads land in
  for (const at::Tensor& t : host) staging.push_back(at::empty_like(t).pin_memory());

  cudaStream_t copy = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<cudaEvent_t> ready(static_cast<size_t>(L));
  for (cudaEvent_t& e : ready) cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  const cudaStream_t compute = c10::cuda::getCurrentCUDAStream(dev.index()).stream();

  auto copy_layer = [&](int64_t l, const std::vector<at::Tensor>& src) {
    const size_t k = static_cast<size_t>(2 * l);
    cuda_ok(cudaMemcpyAsync(past.layers[static_cast<size_t>(l)].k.data_ptr(), src[k].data_ptr(), src[k].nbytes(),
                            cudaMemcpyHostToDevice, copy),
            "cudaMemcpyAsync");
    cuda_ok(cudaMemcpyAsync(past.layers[static_cast<size_t>(l)].v.data_ptr(), src[k + 1].data_ptr(),
                            src[k + 1].nbytes(), cudaMemcpyHostToDevice, copy),
            "cudaMemcpyAsync");
    cuda_ok(cudaEventRecord(ready[static_cast<size_t>(l)], copy), "cudaEventRecord");
  };
  auto read_layer = [&](int64_t l) {
    for (size_t i = static_cast<size_t>(2 * l); i < static_cast<size_t>(2 * l + 2); ++i) {
      char* dst = static_cast<char*>(staging[i].data_ptr());
      const off_t offset = static_cast<off_t>(l * layer_bytes + (i % 2 ? host[i - 1].nbytes() : 0));
      int64_t done = 0, want = static_cast<int64_t>(staging[i].nbytes());
      while (done < want) {
        const ssize_t got = ::pread(fd, dst + done, static_cast<size_t>(want - done), offset + done);
        if (got <= 0) throw std::runtime_error("recall: short read of " + file);
        done += got;
      }
    }
  };
  // Before each disk arm run, the file leaves the page cache so the read is a read of the device.
  auto drop_cache = [&] { (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); };
  const rt::ForwardInput in = input_at(query, B);
  auto wait_all = [&] {
    for (cudaEvent_t e : ready) cuda_ok(cudaStreamWaitEvent(compute, e, 0), "cudaStreamWaitEvent");
  };

  BENCH_RANGE_PUSH("recall_host");
  const double host_s = timed(dev, reps, [&] {
    for (int64_t l = 0; l < L; ++l) copy_layer(l, host);
    wait_all();
    (void)m.forward(in, &past, last);
  });
  BENCH_RANGE_POP();
  rt::ForwardOptions streamed = last;
  streamed.before_layer = [&](int64_t l) {
    cuda_ok(cudaStreamWaitEvent(compute, ready[static_cast<size_t>(l)], 0), "cudaStreamWaitEvent");
  };
  BENCH_RANGE_PUSH("recall_host_overlap");
  const double host_overlap_s = timed(dev, reps, [&] {
    for (int64_t l = 0; l < L; ++l) copy_layer(l, host);
    (void)m.forward(in, &past, streamed);
  });
  BENCH_RANGE_POP();
  // The copy alone, to say how much of it the overlap hid.
  const double host_copy_s = timed(dev, reps, [&] {
    for (int64_t l = 0; l < L; ++l) copy_layer(l, host);
    wait_all();
  });

  ::fsync(fd);
  double disk_s = 0, disk_overlap_s = 0, disk_read_s = 0;
  {
    std::vector<double> t, t_overlap, t_read;
    for (int r = 0; r <= reps; ++r) {  // run 0 is the warm-up
      drop_cache();
      sync(dev);
      auto t0 = std::chrono::steady_clock::now();
      for (int64_t l = 0; l < L; ++l) read_layer(l);
      const double read = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (int64_t l = 0; l < L; ++l) copy_layer(l, staging);
      wait_all();
      (void)m.forward(in, &past, last);
      sync(dev);
      const double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

      // Streamed: a reader thread reads layer after layer and enqueues each layer's copy; the forward's
      // before_layer(l) waits on the host until layer l's copy is enqueued, then makes the compute
      // stream wait for that copy only.
      drop_cache();
      sync(dev);
      std::mutex mu;
      std::condition_variable cv;
      int64_t enqueued = 0;
      std::string reader_error;
      t0 = std::chrono::steady_clock::now();
      std::thread reader([&] {
        try {
          for (int64_t l = 0; l < L; ++l) {
            read_layer(l);
            copy_layer(l, staging);
            std::lock_guard<std::mutex> lock(mu);
            enqueued = l + 1;
            cv.notify_all();
          }
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          reader_error = e.what();
          enqueued = L;
          cv.notify_all();
        }
      });
      rt::ForwardOptions from_disk = last;
      from_disk.before_layer = [&](int64_t l) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return enqueued > l; });
        cuda_ok(cudaStreamWaitEvent(compute, ready[static_cast<size_t>(l)], 0), "cudaStreamWaitEvent");
      };
      (void)m.forward(in, &past, from_disk);
      reader.join();
      if (!reader_error.empty()) throw std::runtime_error(reader_error);
      sync(dev);
      const double overlapped = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) {
        t.push_back(whole);
        t_overlap.push_back(overlapped);
        t_read.push_back(read);
      }
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    disk_s = median(t);
    disk_overlap_s = median(t_overlap);
    disk_read_s = median(t_read);
  }
  ::close(fd);
  std::remove(file.c_str());
  for (cudaEvent_t e : ready) cudaEventDestroy(e);
  cudaStreamDestroy(copy);

  const double bytes = static_cast<double>(layer_bytes * L);
  std::printf(
      "recall B=%lld (%.0f MB of K/V): re-prefill %.2f ms | host: copy then query %.2f ms, streamed %.2f ms (copy "
      "alone %.2f ms, %.0f GB/s) | disk: read+copy then query %.2f ms, streamed %.2f ms (read alone %.2f ms, %.2f "
      "GB/s)\n",
      (long long)B, bytes / 1e6, reprefill_s * 1e3, host_s * 1e3, host_overlap_s * 1e3, host_copy_s * 1e3,
      bytes / host_copy_s / 1e9, disk_s * 1e3, disk_overlap_s * 1e3, disk_read_s * 1e3, bytes / disk_read_s / 1e9);
  return {{"chunk_tokens", B},
          {"query_tokens", qn},
          {"kv_bytes", bytes},
          {"reprefill_s", reprefill_s},
          {"host_sequential_s", host_s},
          {"host_streamed_s", host_overlap_s},
          {"host_copy_only_s", host_copy_s},
          {"disk_sequential_s", disk_s},
          {"disk_streamed_s", disk_overlap_s},
          {"disk_read_only_s", disk_read_s},
          {"disk_note", "file dropped from the page cache (posix_fadvise DONTNEED) before every run"}};
}
}  // namespace orbit::bench_gpu
#endif
