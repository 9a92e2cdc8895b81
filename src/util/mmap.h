// Read-only memory map of a whole file (model weights are mapped, never copied).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hs {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Read a whole (small) file into a string; throws hs::Error naming the path on failure.
std::string read_file(const std::string& path);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);

}  // namespace hs
