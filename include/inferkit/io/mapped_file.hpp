#pragma once
// MappedFile: the bytes of a file, read-only, memory-mapped (POSIX mmap, PROT_READ, MAP_PRIVATE)
// or, when mapping is refused or not asked for, read into a 64-byte aligned heap buffer; or bytes
// the caller hands over (owned) or lends (a view). Opening a mapped file reads nothing: pages are
// faulted in when touched, so a reader that parses only a header touches only the header's pages.
//
//   const inferkit::MappedFile f = inferkit::MappedFile::open("model.gguf");  // mmap, read() fallback
//   std::span<const std::byte> bytes = f.bytes();
//
// Contract: bytes() stays valid and unchanged for the object's lifetime (a mapped file that another
// process truncates meanwhile can still raise SIGBUS on access: the usual mmap caveat). Errors
// (missing file, unreadable) throw std::invalid_argument naming the path and the OS error.
// Move-only.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "inferkit/core/aligned_buffer.hpp"
#include "inferkit/core/error.hpp"

namespace inferkit {

/// The read-only bytes of a file (mapped, or read when mapping fails or is not asked for) or of a
/// caller's buffer (owned or lent): see the file comment. Move-only.
class MappedFile {
 public:
  /// How open() gets the bytes.
  enum class Mode {
    kMapOrRead,  ///< mmap; a plain read when mmap fails (e.g. a pipe or a file system without mmap)
    kRead,       ///< always a plain read into a heap buffer
  };

  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  /// Takes over `o`'s bytes: they stay at the same address, so spans from `o.bytes()` stay valid;
  /// `o` is left with no bytes.
  MappedFile(MappedFile&& o) noexcept { swap(o); }
  /// Drops this object's bytes (spans into them become invalid; a mapping is unmapped at once),
  /// then takes over `o`'s as the move constructor does.
  MappedFile& operator=(MappedFile&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~MappedFile() { release(); }

  /// Opens `path` read-only. Throws std::invalid_argument naming the path and the OS error.
  static MappedFile open(const std::string& path, Mode mode = Mode::kMapOrRead) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_invalid_argument("file", path, std::string("cannot be opened: ") + std::strerror(errno));
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0)
      throw_invalid_argument("file", path, std::string("fstat failed: ") + std::strerror(errno));
    MappedFile f;
    f.name_ = path;
    if (S_ISREG(st.st_mode) && mode == Mode::kMapOrRead) {
      const auto size = static_cast<std::size_t>(st.st_size);
      if (size == 0) return f;  // mmap of 0 bytes is an error; an empty file is simply empty
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        f.map_ = p;
        f.map_size_ = size;
        f.data_ = static_cast<const std::byte*>(p);
        f.size_ = size;
        return f;
      }
    }
    f.read_all(fd, S_ISREG(st.st_mode) ? static_cast<std::size_t>(st.st_size) : 0);
    return f;
  }

  /// Takes ownership of `bytes` (copied once into an aligned buffer); `name` names it in errors.
  static MappedFile from_bytes(std::span<const std::byte> bytes, std::string name = "<memory>") {
    MappedFile f;
    f.name_ = std::move(name);
    f.buffer_.resize(bytes.size());
    if (!bytes.empty()) std::memcpy(f.buffer_.data(), bytes.data(), bytes.size());
    f.data_ = f.buffer_.data();
    f.size_ = bytes.size();
    return f;
  }

  /// A non-owning view of `bytes`: the caller keeps them alive and unchanged while this object
  /// (and anything parsed from it) is used.
  static MappedFile view(std::span<const std::byte> bytes, std::string name = "<memory>") {
    MappedFile f;
    f.name_ = std::move(name);
    f.data_ = bytes.data();
    f.size_ = bytes.size();
    return f;
  }

  std::span<const std::byte> bytes() const { return {data_, size_}; }  ///< the whole file
  std::size_t size() const { return size_; }                           ///< bytes in the file
  bool is_mapped() const { return map_ != nullptr; }                   ///< true when mmap'd
  const std::string& name() const { return name_; }                    ///< path or caller-given name

 private:
  void read_all(int fd, std::size_t size_hint) {
    // Regular files: one buffer of the stat size; others (pipes): grow as bytes arrive.
    std::size_t capacity = size_hint;
    buffer_.resize(capacity);
    std::size_t got = 0;
    for (;;) {
      if (got == capacity) {
        if (size_hint != 0) {
          // A regular file read to its stat size: one more byte tells whether it grew meanwhile.
          std::byte extra{};
          const ssize_t n = ::read(fd, &extra, 1);
          if (n == 0) break;
          if (n < 0) {
            if (errno == EINTR) continue;
            throw_invalid_argument("file", name_, std::string("read failed: ") + std::strerror(errno));
          }
          throw_invalid_argument("file", name_, "grew while being read");
        }
        const std::size_t next = capacity == 0 ? 1 << 16 : capacity * 2;
        AlignedBuffer<std::byte> bigger(next);
        if (got != 0) std::memcpy(bigger.data(), buffer_.data(), got);
        buffer_ = std::move(bigger);
        capacity = next;
      }
      const ssize_t n = ::read(fd, buffer_.data() + got, capacity - got);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_invalid_argument("file", name_, std::string("read failed: ") + std::strerror(errno));
      }
      got += static_cast<std::size_t>(n);
    }
    data_ = buffer_.data();
    size_ = got;
  }

  void release() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
    map_ = nullptr;
    map_size_ = 0;
    data_ = nullptr;
    size_ = 0;
  }

  void swap(MappedFile& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(map_size_, o.map_size_);
    std::swap(buffer_, o.buffer_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(name_, o.name_);
  }

  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  AlignedBuffer<std::byte> buffer_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
};

}  // namespace inferkit
