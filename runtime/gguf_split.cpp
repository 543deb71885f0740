// Model: one GGUF file or all parts of a split model (spec §1.10) presented as one.
#include <algorithm>
#include <cstdio>

#include "runtime/gguf.h"
#include "runtime/gguf_internal.h"

namespace zenmoe::gguf {
namespace {

constexpr const char* kSplitNo = "split.no";
constexpr const char* kSplitCount = "split.count";
constexpr const char* kSplitTensors = "split.tensors.count";

std::string part_path(const std::string& prefix, int no, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", no, count);
  return prefix + buf;
}

// split.count as a part count: absent, 0 and 1 all mean "not split".
Expected<uint64_t> split_count(const File& f) {
  if (!f.metadata().has(kSplitCount)) return uint64_t{1};
  auto c = f.metadata().get_uint(kSplitCount);
  if (!c) return Error{f.path() + ": " + c.error()};
  return std::max<uint64_t>(*c, 1);
}

Status check_part_keys(const File& f, size_t idx, uint64_t count) {
  auto c = split_count(f);
  if (!c) return c.status();
  if (*c != count)
    return Error{f.path() + ": mismatched split parts: split.count is " + std::to_string(*c) +
                 ", part 1 says " + std::to_string(count)};
  if (count == 1) return {};
  if (!f.metadata().has(kSplitNo))
    return Error{f.path() + ": split part without split.no (expected " + std::to_string(idx) +
                 ")"};
  auto no = f.metadata().get_uint(kSplitNo);
  if (!no) return Error{f.path() + ": " + no.error()};
  if (*no != idx)
    return Error{f.path() + ": mismatched split part: split.no is " + std::to_string(*no) +
                 ", expected " + std::to_string(idx)};
  return {};
}

}  // namespace

Expected<Model> Model::open(const std::string& path) {
  auto first = File::open(path);
  if (!first) return Error{first.error()};
  auto count = split_count(*first);
  if (!count) return Error{count.error()};
  std::vector<File> files;
  if (*count == 1) {
    files.push_back(std::move(*first));
    return from_files(std::move(files));
  }
  if (*count > 99999)
    return Error{path + ": split.count " + std::to_string(*count) + " is too large"};
  const int n = static_cast<int>(*count);
  const uint64_t no = first->metadata().get_uint_or(kSplitNo, 0);
  if (no != 0)
    return Error{path + ": this is split part " + std::to_string(no + 1) + " of " +
                 std::to_string(n) + "; open part 1 (" + part_path("<prefix>", 1, n) + ")"};
  const std::string suffix = part_path("", 1, n);
  if (path.size() < suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(),
                                                   suffix) != 0)
    return Error{path + ": split model (split.count " + std::to_string(n) +
                 ") but the file name does not end with '" + suffix + "'"};
  const std::string prefix = path.substr(0, path.size() - suffix.size());
  files.push_back(std::move(*first));
  for (int k = 2; k <= n; ++k) {
    const std::string p = part_path(prefix, k, n);
    auto part = File::open(p);
    if (!part)
      return Error{"missing or unreadable split part " + std::to_string(k) + " of " +
                   std::to_string(n) + ": " + part.error()};
    files.push_back(std::move(*part));
  }
  return from_files(std::move(files));
}

Expected<Model> Model::from_files(std::vector<File> files) {
  if (files.empty()) return Error{"model: no files given"};
  auto count = split_count(files[0]);
  if (!count) return Error{count.error()};
  if (*count != files.size())
    return Error{files[0].path() + ": missing split parts: split.count is " +
                 std::to_string(*count) + " but " + std::to_string(files.size()) +
                 " part(s) were given"};
  Model m;
  for (size_t k = 0; k < files.size(); ++k) {
    ZENMOE_RETURN_IF_ERROR(check_part_keys(files[k], k, *count));
    for (TensorInfo t : files[k].tensors()) {
      t.shard = static_cast<int>(k);
      m.tensors_.push_back(std::move(t));
    }
  }
  if (*count > 1) {
    auto expected = files[0].metadata().get_int(kSplitTensors);
    if (!expected) return Error{files[0].path() + ": split model: " + expected.error()};
    if (*expected != static_cast<int64_t>(m.tensors_.size()))
      return Error{files[0].path() + ": mismatched split parts: split.tensors.count is " +
                   std::to_string(*expected) + " but the parts hold " +
                   std::to_string(m.tensors_.size()) + " tensors"};
  }
  m.index_.reserve(m.tensors_.size());
  for (size_t k = 0; k < m.tensors_.size(); ++k) m.index_.emplace_back(m.tensors_[k].name, k);
  std::sort(m.index_.begin(), m.index_.end());
  for (size_t k = 1; k < m.index_.size(); ++k) {
    if (m.index_[k].first != m.index_[k - 1].first) continue;
    const TensorInfo& a = m.tensors_[m.index_[k - 1].second];
    const TensorInfo& b = m.tensors_[m.index_[k].second];
    return Error{files[b.shard].path() + ": tensor '" + printable(b.name) +
                 "' is duplicated (also in " + files[a.shard].path() + ")"};
  }
  m.files_ = std::move(files);
  return m;
}

const Metadata& Model::metadata() const { return files_.front().metadata(); }

const TensorInfo* Model::find_tensor(std::string_view name) const {
  auto it = std::lower_bound(index_.begin(), index_.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it == index_.end() || it->first != name) return nullptr;
  return &tensors_[it->second];
}

uint64_t Model::total_bytes() const {
  uint64_t sum = 0;
  for (const File& f : files_) sum += f.size();
  return sum;
}

}  // namespace zenmoe::gguf
