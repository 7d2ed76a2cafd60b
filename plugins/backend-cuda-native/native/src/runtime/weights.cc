// MappedWeights: mmap + bounds-checked tensor lookup.
#include "runtime/weights.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "runtime/quantize-q8.h"

namespace loom {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

MappedWeights::~MappedWeights() {
  for (auto& m : maps_)
    if (m.addr) munmap(m.addr, m.size);
}

Status MappedWeights::open(const std::vector<std::string>& files, std::vector<TensorDesc> tensors) {
  paths_ = files;
  for (const auto& path : files) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return Status::Error("model_invalid", "cannot open " + path + ": " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      return Status::Error("model_invalid", "cannot stat " + path);
    }
    void* addr = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);  // the mapping keeps the file alive
    if (addr == MAP_FAILED) return Status::Error("model_invalid", "cannot mmap " + path + ": " + std::strerror(errno));
    maps_.push_back({addr, size_t(st.st_size)});
  }
  for (auto& t : tensors) {
    if (t.file < 0 || t.file >= int32_t(maps_.size()))
      return Status::Error("model_invalid", "tensor " + t.name + " names file #" + std::to_string(t.file));
    int64_t count = 1;
    for (int64_t d : t.shape) count *= d;
    if (count * dtype_size(t.dtype) != t.nbytes || t.offset < 0 ||
        uint64_t(t.offset + t.nbytes) > maps_[size_t(t.file)].size)
      return Status::Error("model_invalid", "tensor " + t.name + " " + shape_string(t.shape) + " " +
                                                dtype_name(t.dtype) + " does not fit its byte range in " +
                                                paths_[size_t(t.file)]);
    index_[t.name] = t;
  }
  return Status::Ok();
}

Status MappedWeights::find(const std::string& name, const TensorDesc** out) const {
  auto it = index_.find(name);
  if (it == index_.end()) return Status::Error("model_invalid", "tensor " + name + " is missing");
  *out = &it->second;
  return Status::Ok();
}

Status MappedWeights::matrix(const std::string& name, int64_t rows, int64_t cols, WeightView* out) const {
  const TensorDesc* t;
  LOOM_RETURN_IF_ERROR(find(name, &t));
  if (t->shape.size() != 2 || t->shape[0] != rows || t->shape[1] != cols)
    return Status::Error("model_invalid", "tensor " + name + " has shape " + shape_string(t->shape) + " (" +
                                              dtype_name(t->dtype) + "), expected " +
                                              shape_string({rows, cols}));
  out->data = static_cast<const char*>(maps_[size_t(t->file)].addr) + t->offset;
  out->dtype = t->dtype;
  out->rows = rows;
  out->cols = cols;
  return Status::Ok();
}

Status MappedWeights::vector_f32(const std::string& name, int64_t n, std::vector<float>* out) const {
  const TensorDesc* t;
  LOOM_RETURN_IF_ERROR(find(name, &t));
  if (t->shape.size() != 1 || t->shape[0] != n)
    return Status::Error("model_invalid", "tensor " + name + " has shape " + shape_string(t->shape) +
                                              ", expected " + shape_string({n}));
  const void* base = static_cast<const char*>(maps_[size_t(t->file)].addr) + t->offset;
  out->resize(size_t(n));
  for (int64_t i = 0; i < n; i++) (*out)[size_t(i)] = load_weight(base, t->dtype, i);
  return Status::Ok();
}

Status MappedWeights::to_q8(WeightView* w, const std::string& name) {
  LOOM_RETURN_IF_ERROR(check_q8_quantizable(*w, name));
  const int64_t bytes = weight_bytes(DType::Q8, w->rows, w->cols);
  uint8_t* p = q8_copies_.allocate(bytes);  // in 2 MB pages: the decode step streams it
  if (p == nullptr)
    return Status::Error("model_invalid", "out of host memory for the int8 copy of " + name + " (" +
                                              std::to_string(bytes) + " bytes)");
  quantize_q8_rows(w->data, w->dtype, w->rows, w->cols, p);
  w->data = p;
  w->dtype = DType::Q8;
  return Status::Ok();
}

}  // namespace loom
