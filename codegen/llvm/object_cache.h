// On-disk cache of compiled glue objects. An llvm::ObjectCache keyed by the module
// identifier (the cache file name); each file also records the full key text and a checksum
// of the object, so a truncated, corrupt or colliding file is rejected and regenerated.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/Support/MemoryBuffer.h>

namespace zenmoe::glue_llvm {

class DiskObjectCache : public llvm::ObjectCache {
 public:
  explicit DiskObjectCache(std::string dir) : dir_(std::move(dir)) {}

  // The key text a file named `file` must carry; set before compiling or looking up.
  void expect(const std::string& file, const std::string& key_text);

  // The cached object for `file` when present and valid (nullptr otherwise; an invalid file
  // counts as rejected).
  std::unique_ptr<llvm::MemoryBuffer> lookup(const std::string& file);

  void notifyObjectCompiled(const llvm::Module* m, llvm::MemoryBufferRef obj) override;
  std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module* m) override;

  int rejected() const { return rejected_.load(); }
  const std::string& dir() const { return dir_; }

 private:
  std::unique_ptr<llvm::MemoryBuffer> load(const std::string& file, bool count_reject);
  std::string dir_;
  std::string file_, key_text_;
  std::atomic<int> rejected_{0};
};

}  // namespace zenmoe::glue_llvm
