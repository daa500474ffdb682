#pragma once
// Test helpers for the GGUF tests: a hand-written byte builder that assembles GGUF files straight
// from the format's published layout (little-endian; string = uint64 length + bytes; value = uint32
// type + payload), independent of inferkit's writer, so the reader and the writer are each checked
// against bytes neither produced.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gguf_test {

/// Appends little-endian fields to a byte vector.
struct Bytes {
  std::vector<std::byte> b;

  Bytes& raw(const void* p, std::size_t n) {
    const auto* c = static_cast<const std::byte*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  Bytes& u8(std::uint8_t v) { return raw(&v, 1); }
  Bytes& u16(std::uint16_t v) { return raw(&v, 2); }
  Bytes& u32(std::uint32_t v) { return raw(&v, 4); }
  Bytes& u64(std::uint64_t v) { return raw(&v, 8); }
  Bytes& i32(std::int32_t v) { return raw(&v, 4); }
  Bytes& f32(float v) { return raw(&v, 4); }
  Bytes& f64(double v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  /// GGUF header: magic, version, tensor count, metadata count.
  Bytes& header(std::uint32_t version, std::uint64_t n_tensors, std::uint64_t n_kv) {
    raw("GGUF", 4);
    u32(version);
    u64(n_tensors);
    return u64(n_kv);
  }
  /// A key and its value type (the payload follows).
  Bytes& key(const std::string& k, std::uint32_t type) {
    str(k);
    return u32(type);
  }
  /// A tensor info.
  Bytes& tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset) {
    str(name);
    u32(static_cast<std::uint32_t>(dims.size()));
    for (auto d : dims) u64(d);
    u32(type);
    return u64(offset);
  }
  /// Zero bytes up to the next multiple of `align`.
  Bytes& pad(std::size_t align) {
    while (b.size() % align != 0) b.push_back(std::byte{0});
    return *this;
  }
  std::size_t size() const { return b.size(); }
};

/// An environment variable's value, or nullopt when unset or empty.
inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace gguf_test
