// Plan file I/O: the atomic writer (temporaries renamed at the end, removed on any failure or
// on SIGINT / SIGTERM: runtime/temp_files.h) and the validating reader with its read-only
// mapping of the side file.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>

#include "runtime/plan_file.h"
#include "runtime/huge_buffer.h"
#include "runtime/plan_file_internal.h"
#include "runtime/temp_files.h"
#include "runtime/thread_pool.h"

namespace zenmoe::plan {
namespace {

namespace fs = std::filesystem;
using namespace detail;

std::string errno_text() { return std::strerror(errno); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

struct Mapping {
  void* p = MAP_FAILED;
  size_t n = 0;
  ~Mapping() {
    if (p != MAP_FAILED) ::munmap(p, n);
  }
};

Status write_all(int fd, const std::string& bytes, const std::string& where) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Error{where + ": write failed: " + errno_text()};
    done += static_cast<size_t>(w);
  }
  return Status::ok();
}

// Reserves the side file's blocks up front, so a full disk is an error here rather than a
// SIGBUS while a tensor is written through the mapping.
Status reserve(int fd, uint64_t bytes, const std::string& where) {
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc == 0) return Status::ok();
  if (rc != EOPNOTSUPP && rc != EINVAL)
    return Error{where + ": cannot reserve " + std::to_string(bytes) + " bytes: " + std::strerror(rc)};
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    return Error{where + ": cannot size the side file: " + errno_text()};
  return Status::ok();
}

Status fill_side_file(int fd, const PlanHeader& h, uint64_t weights_id, const WriteTensorFn& write_tensor,
                      const ProgressFn& progress, const std::string& where) {
  ZENMOE_RETURN_IF_ERROR(reserve(fd, h.weights_bytes, where));
  Mapping m;
  m.n = static_cast<size_t>(h.weights_bytes);
  m.p = ::mmap(nullptr, m.n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m.p == MAP_FAILED) return Error{where + ": cannot map the side file: " + errno_text()};
  auto* base = static_cast<uint8_t*>(m.p);
  uint64_t total = 0, done = 0;
  for (const PlanTensor& t : h.tensors) total += t.nbytes;
  if (progress) progress(0, total);
  // A thread per core writes a tensor at a time (their ranges are disjoint); progress under a
  // lock. An exception from a callback reaches write_plan once every thread has stopped.
  std::mutex mu;
  ZENMOE_RETURN_IF_ERROR(parallel_for_each(default_thread_count(), h.tensors.size(), [&](size_t i) -> Status {
    const PlanTensor& t = h.tensors[i];
    Status s = write_tensor(i, base + t.offset);
    if (!s) return Error{where + ": tensor '" + t.name + "': " + s.message()};
    // Drops the written range from this process's page tables (the data stays in the page
    // cache on its way to the file), so memory use does not grow with the model.
    if (t.nbytes > (uint64_t{64} << 20)) ::madvise(base + t.offset, t.nbytes, MADV_DONTNEED);
    std::lock_guard<std::mutex> lock(mu);
    done += t.nbytes;
    if (progress) progress(done, total);
    return Status::ok();
  }));
  std::string head(kWeightsMagic, 4);
  put_u32(&head, kPlanVersion);
  put_u64(&head, weights_id);
  put_u64(&head, h.weights_bytes);
  std::memcpy(base, head.data(), head.size());
  if (::msync(m.p, m.n, MS_SYNC) != 0) return Error{where + ": cannot flush the side file: " + errno_text()};
  return Status::ok();
}

std::string plan_bytes(const PlanHeader& h, const std::string& doc, uint64_t weights_id) {
  std::string kernels(h.kernels.size() * sizeof(KernelDesc), '\0');
  if (!h.kernels.empty()) std::memcpy(kernels.data(), h.kernels.data(), kernels.size());
  uint64_t sum = fnv1a(doc.data(), doc.size());
  sum = fnv1a(kernels.data(), kernels.size(), sum);
  std::string out(kPlanMagic, 4);
  put_u32(&out, kPlanVersion);
  put_u64(&out, doc.size());
  put_u64(&out, kernels.size());
  put_u64(&out, weights_id);
  put_u64(&out, sum);
  return out + doc + kernels;
}

Status write_plan_files(const std::string& path, PlanHeader& header, const WriteTensorFn& write_tensor,
                        const ProgressFn& progress) {
  const std::string weights_path = (fs::path(path).parent_path() / header.weights_file).string();
  const std::string doc = encode_json(header);
  const uint64_t weights_id = fnv1a(doc.data(), doc.size());
  TempFiles temps;
  Fd side, plan;
  Expected<int> sfd = temps.create(0, weights_path);
  if (!sfd) return Error{sfd.error()};
  side.fd = *sfd;
  ZENMOE_RETURN_IF_ERROR(fill_side_file(side.fd, header, weights_id, write_tensor, progress, weights_path));
  Expected<int> pfd = temps.create(1, path);
  if (!pfd) return Error{pfd.error()};
  plan.fd = *pfd;
  ZENMOE_RETURN_IF_ERROR(write_all(plan.fd, plan_bytes(header, doc, weights_id), path));
  if (::fsync(side.fd) != 0 || ::fsync(plan.fd) != 0)
    return Error{path + ": cannot flush the plan to disk: " + errno_text()};
  // Side file first: a plan in place always finds its weights (an older plan beside a newer
  // side file is caught by the shared weights_id).
  ZENMOE_RETURN_IF_ERROR(temps.commit(0, weights_path));
  Status s = temps.commit(1, path);
  if (!s) ::unlink(weights_path.c_str());
  return s;
}

}  // namespace

Status write_plan(const std::string& path, PlanHeader header, const WriteTensorFn& write_tensor,
                  const ProgressFn& progress) {
  try {
    if (header.weights_file.empty()) header.weights_file = default_weights_file(path);
    if (!header.gguf_path.empty()) {
      std::error_code ec;
      const fs::path abs = fs::absolute(header.gguf_path, ec);
      if (!ec) header.gguf_path = abs.string();
    }
    ZENMOE_RETURN_IF_ERROR(validate_fields(header, path));
    ZENMOE_RETURN_IF_ERROR(place_tensors(&header, path));
    if (!write_tensor && !header.tensors.empty()) return Error{path + ": no tensor writer given"};
    return write_plan_files(path, header, write_tensor, progress);
  } catch (const std::exception& e) {
    return Error{path + ": plan not written: " + e.what()};
  } catch (...) {
    return Error{path + ": plan not written: unknown exception"};
  }
}

Status layout_tensors(PlanHeader* header) {
  // The side file name is chosen by write_plan when empty; it does not affect the layout.
  const bool unnamed = header->weights_file.empty();
  if (unnamed) header->weights_file = "plan.weights";
  Status s = validate_fields(*header, "plan");
  if (s) s = place_tensors(header, "plan");
  if (unnamed) header->weights_file.clear();
  return s;
}

// --- reading ---------------------------------------------------------------------------------

LoadedPlan::LoadedPlan(LoadedPlan&& o) noexcept
    : header(std::move(o.header)), path(std::move(o.path)), weights_path(std::move(o.weights_path)),
      base_(o.base_), size_(o.size_), owned_(std::move(o.owned_)) {
  o.base_ = nullptr;
  o.size_ = 0;
}

LoadedPlan& LoadedPlan::operator=(LoadedPlan&& o) noexcept {
  if (this != &o) {
    release();
    header = std::move(o.header);
    path = std::move(o.path);
    weights_path = std::move(o.weights_path);
    base_ = o.base_;
    size_ = o.size_;
    owned_ = std::move(o.owned_);
    o.base_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

LoadedPlan::~LoadedPlan() { release(); }

void LoadedPlan::release() {
  if (base_ != nullptr && owned_ == nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
  owned_.reset();
  base_ = nullptr;
  size_ = 0;
}

int LoadedPlan::find_tensor(std::string_view name) const {
  for (size_t i = 0; i < header.tensors.size(); ++i)
    if (header.tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

constexpr uint64_t kMaxPlanBytes = uint64_t{1} << 30;  // the document is text, never this big

Expected<std::string> read_small_file(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return Error{path + ": cannot open plan: " + errno_text()};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Error{path + ": cannot stat plan: " + errno_text()};
  if (!S_ISREG(st.st_mode)) return Error{path + ": plan is not a regular file"};
  if (static_cast<uint64_t>(st.st_size) > kMaxPlanBytes)
    return Error{path + ": plan is " + std::to_string(st.st_size) + " bytes, more than a plan can be"};
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t r = ::read(f.fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Error{path + ": read failed: " + errno_text()};
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  bytes.resize(done);
  return bytes;
}

// Maps the side file read-only and checks its header against the plan.
Status map_side_file(const std::string& path, const PlanHeader& h, uint64_t weights_id,
                     const uint8_t** base, uint64_t* size) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return Error{path + ": cannot open the plan's weights: " + errno_text()};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    return Error{path + ": the plan's weights are not a regular file"};
  const auto real = static_cast<uint64_t>(st.st_size);
  if (real != h.weights_bytes)
    return Error{path + ": weights file is " + std::to_string(real) + " bytes, the plan expects " +
                 std::to_string(h.weights_bytes) + (real < h.weights_bytes ? " (truncated)" : "")};
  void* p = ::mmap(nullptr, static_cast<size_t>(real), PROT_READ, MAP_SHARED, f.fd, 0);
  if (p == MAP_FAILED) return Error{path + ": cannot map the plan's weights: " + errno_text()};
  Status s = check_weights_header(static_cast<const uint8_t*>(p), real, h, weights_id, path);
  if (!s) {
    ::munmap(p, static_cast<size_t>(real));
    return s;
  }
  *base = static_cast<const uint8_t*>(p);
  *size = real;
  return Status::ok();
}

// Whether `bytes` is under half of MemAvailable (false when /proc/meminfo cannot be read).
bool fits_in_memory(uint64_t bytes) {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return false;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return bytes < static_cast<uint64_t>(kib) * 1024 / 2;
}

// Reads the whole side file (already validated through its mapping) into huge-page memory, on
// a thread per core this process may use (32 MiB chunks: whole huge pages).
Expected<std::shared_ptr<uint8_t>> copy_side_file(const std::string& path, uint64_t size) {
  auto buf = alloc_huge_buffer(size, path.c_str());
  if (!buf) return Error{buf.error()};
  ZENMOE_RETURN_IF_ERROR(detail::read_file_parallel(path, buf->get(), size, default_thread_count(), uint64_t{32} << 20));
  return buf;
}

}  // namespace

namespace detail {

Status read_file_parallel(const std::string& path, uint8_t* dst, uint64_t size, int threads, uint64_t chunk) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return Error{path + ": cannot open the plan's weights: " + errno_text()};
  chunk = std::max<uint64_t>(chunk, 1);
  const auto chunks = static_cast<size_t>((size + chunk - 1) / chunk);
  return parallel_for_each(threads, chunks, [&](size_t c) -> Status {
    const uint64_t end = std::min(size, (c + 1) * chunk);
    for (uint64_t done = c * chunk; done < end;) {
      const ssize_t r = ::pread(f.fd, dst + done, static_cast<size_t>(end - done), static_cast<off_t>(done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return Error{path + ": reading the plan's weights failed: " + (r < 0 ? errno_text() : "file shrank")};
      done += static_cast<uint64_t>(r);
    }
    return Status::ok();
  });
}

namespace {

// Field values quoted in errors come from the file and may hold control characters (a JSON
// string can encode a newline): escaped, the error stays one line.
std::string one_line(const std::string& message) {
  std::string out;
  for (const char c : message) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) {
      out += c;
      continue;
    }
    char esc[8];
    std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    out += esc;
  }
  return out;
}

Expected<PlanHeader> parse_plan_fields(const uint8_t* data, size_t n, const std::string& where,
                                       uint64_t* weights_id) {
  if (n < 4 || std::memcmp(data, kPlanMagic, 4) != 0)
    return Error{where + ": not a zenmoe plan (no ZPLN magic)"};
  if (n < 8) return Error{where + ": plan is truncated (" + std::to_string(n) + " bytes)"};
  const uint32_t version = get_u32(data + 4);
  if (version != kPlanVersion)
    return Error{where + ": plan was made by plan format version " + std::to_string(version) +
                 ", this zenmoe reads version " + std::to_string(kPlanVersion) + " — recompile"};
  if (n < kPlanHeaderBytes)
    return Error{where + ": plan is truncated (" + std::to_string(n) + " bytes)"};
  const uint64_t doc_n = get_u64(data + 8), kern_n = get_u64(data + 16);
  const uint64_t body = n - kPlanHeaderBytes;
  if (doc_n > body || kern_n != body - doc_n)
    return Error{where + ": plan is truncated or has trailing bytes (sections of " + std::to_string(doc_n) +
                 " + " + std::to_string(kern_n) + " bytes, " + std::to_string(body) + " present)"};
  const uint8_t* doc = data + kPlanHeaderBytes;
  uint64_t sum = fnv1a(doc, static_cast<size_t>(doc_n));
  sum = fnv1a(doc + doc_n, static_cast<size_t>(kern_n), sum);
  if (sum != get_u64(data + 32)) return Error{where + ": plan is corrupt (checksum mismatch)"};
  *weights_id = get_u64(data + 24);
  if (*weights_id != fnv1a(doc, static_cast<size_t>(doc_n)))
    return Error{where + ": plan is corrupt (weights id does not match its document)"};
  PlanHeader h;
  const std::string_view text(reinterpret_cast<const char*>(doc), static_cast<size_t>(doc_n));
  ZENMOE_RETURN_IF_ERROR(decode_json(text, where, &h));
  if (kern_n != h.kernels.size() * sizeof(KernelDesc))
    return Error{where + ": kernel table holds " + std::to_string(kern_n) + " bytes, not " +
                 std::to_string(h.kernels.size()) + " descriptors of " + std::to_string(sizeof(KernelDesc))};
  if (kern_n != 0) std::memcpy(static_cast<void*>(h.kernels.data()), doc + doc_n, static_cast<size_t>(kern_n));
  ZENMOE_RETURN_IF_ERROR(validate_fields(h, where));
  ZENMOE_RETURN_IF_ERROR(validate_placement(h, where));
  return h;
}

}  // namespace

Expected<PlanHeader> parse_plan(const uint8_t* data, size_t n, const std::string& where,
                                uint64_t* weights_id) {
  auto h = parse_plan_fields(data, n, where, weights_id);
  if (!h) return Error{one_line(h.error())};
  return h;
}

Status check_weights_header(const uint8_t* data, uint64_t n, const PlanHeader& h, uint64_t weights_id,
                            const std::string& where) {
  if (n < kWeightsHeaderBytes || std::memcmp(data, kWeightsMagic, 4) != 0)
    return Error{where + ": not a zenmoe plan weights file (no ZPLW magic)"};
  if (get_u32(data + 4) != kPlanVersion)
    return Error{where + ": weights file has plan format version " + std::to_string(get_u32(data + 4)) +
                 ", this zenmoe reads version " + std::to_string(kPlanVersion) + " — recompile"};
  if (get_u64(data + 8) != weights_id)
    return Error{where + ": weights file belongs to another compile of the plan — recompile"};
  if (get_u64(data + 16) != n || n != h.weights_bytes)
    return Error{where + ": weights file header says " + std::to_string(get_u64(data + 16)) +
                 " bytes, the file has " + std::to_string(n)};
  return Status::ok();
}

}  // namespace detail

Expected<LoadedPlan> read_plan(const std::string& path, WeightsLoad load) {
  Expected<std::string> bytes = read_small_file(path);
  if (!bytes) return Error{bytes.error()};
  uint64_t weights_id = 0;
  Expected<PlanHeader> h =
      parse_plan(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), path, &weights_id);
  if (!h) return Error{h.error()};
  LoadedPlan plan;
  plan.path = path;
  plan.weights_path = (fs::path(path).parent_path() / h->weights_file).string();
  plan.header = std::move(*h);
  ZENMOE_RETURN_IF_ERROR(map_side_file(plan.weights_path, plan.header, weights_id, &plan.base_, &plan.size_));
  if (load == WeightsLoad::kMap || (load == WeightsLoad::kAuto && !fits_in_memory(plan.size_))) return plan;
  auto copy = copy_side_file(plan.weights_path, plan.size_);
  if (!copy) return Error{copy.error()};
  ::munmap(const_cast<uint8_t*>(plan.base_), plan.size_);
  plan.owned_ = std::move(*copy);
  plan.base_ = plan.owned_.get();
  return plan;
}

}  // namespace zenmoe::plan
