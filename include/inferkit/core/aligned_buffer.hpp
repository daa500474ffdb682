#pragma once
// A heap buffer of trivially copyable elements aligned to 64 bytes (a cache line, an AVX-512
// register), for kernel scratch space. Contents are uninitialized after construction or resize.

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace inferkit {

template <class T>
/// 64-byte aligned, uninitialized heap buffer of trivially copyable T (kernel scratch).
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  static constexpr std::size_t kAlignment = 64;  ///< alignment of data() in bytes

  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) { resize(n); }  ///< n uninitialized elements

  /// Ensures room for n elements; old contents are not kept.
  void resize(std::size_t n) {
    if (n <= capacity_) {
      size_ = n;
      return;
    }
    data_.reset(static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t{kAlignment})));
    capacity_ = n;
    size_ = n;
  }

  /// Sets every element to value.
  void fill(const T& value) {
    for (std::size_t i = 0; i < size_; ++i) data_[i] = value;
  }

  T* data() { return data_.get(); }                              ///< first element
  const T* data() const { return data_.get(); }                  ///< first element
  std::size_t size() const { return size_; }                     ///< number of elements
  T& operator[](std::size_t i) { return data_[i]; }              ///< element i (not bounds-checked)
  const T& operator[](std::size_t i) const { return data_[i]; }  ///< element i (not bounds-checked)

 private:
  struct Free {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t{kAlignment}); }
  };
  std::unique_ptr<T[], Free> data_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace inferkit
