// A launch's small per-block array (LoRA items, attention rows, sampling parameters, tree rows) as
// its kernel reads it. Up to N elements travel inside the launch's own parameters, which reach the
// GPU with the launch. More are staged to device memory first (CudaDevice::stage): a host-to-device
// copy, a stream operation of its own between the kernel before it and this one, which
// programmatic launch cannot overlap with either. Kernels take the list as a
// `const __grid_constant__` parameter and read it with list_item (param-list.cuh), so the inline
// form is read in place, without a local copy. Plain C++, so the device's header and the test
// program's emulated build can include it.
#pragma once

#include <algorithm>
#include <cstddef>

namespace loom {

template <typename T, int N>
struct ParamList {
  static constexpr int kInline = N;
  const T* staged;    // the elements in device memory, or null: in inline_items
  T inline_items[N];  // [0, n) when staged is null
};

template <class List>
bool fits_inline(size_t n) {
  return n <= size_t(List::kInline);
}
// items[0, n) inline (n <= List::kInline: fits_inline).
template <class List, typename T>
List inline_params(const T* items, size_t n) {
  List list{};
  std::copy(items, items + std::min(n, size_t(List::kInline)), list.inline_items);
  return list;
}
// Elements already staged to device memory.
template <class List, typename T>
List staged_params(const T* staged) {
  List list{};
  list.staged = staged;
  return list;
}

}  // namespace loom
