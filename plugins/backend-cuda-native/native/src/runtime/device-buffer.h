// An owned span of device memory: allocated from a Device, released with it, never copied.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/kernels.h"
#include "runtime/status.h"

namespace loom {

// `count` elements of T in memory owned by `dev` (see Device::alloc). Move-only; the device must
// outlive the buffer. Contents start undefined: `zero()` or an upload fills them.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      std::swap(dev_, o.dev_);
      std::swap(ptr_, o.ptr_);
      std::swap(count_, o.count_);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  // Allocate `count` elements (replacing what was held); `what` names the buffer in the error.
  Status allocate(Device* dev, int64_t count, const char* what) {
    reset();
    void* p = dev->alloc(count * int64_t(sizeof(T)));
    if (p == nullptr)
      return Status::Error("model_invalid", std::string("out of ") + dev->name() + " memory allocating " + what + " (" +
                                                std::to_string(count * int64_t(sizeof(T))) + " bytes)");
    dev_ = dev;
    ptr_ = static_cast<T*>(p);
    count_ = count;
    return Status::Ok();
  }
  void reset() {
    if (dev_ != nullptr) dev_->release(ptr_);
    dev_ = nullptr;
    ptr_ = nullptr;
    count_ = 0;
  }
  void zero() {
    if (dev_ != nullptr) dev_->zero(ptr_, bytes());
  }

  T* data() const { return ptr_; }
  int64_t size() const { return count_; }
  int64_t bytes() const { return count_ * int64_t(sizeof(T)); }
  bool empty() const { return count_ == 0; }

 private:
  Device* dev_ = nullptr;
  T* ptr_ = nullptr;
  int64_t count_ = 0;
};

}  // namespace loom
