// Read-only weight storage: the model's safetensors files mapped into memory. The TypeScript side
// parses the JSON headers (it has a JSON parser; native code should not need one) and hands over
// a flat table of tensors; this file maps the files and checks every tensor lies inside its file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/status.h"

namespace loom {

// One tensor as described by a safetensors header.
struct TensorDesc {
  std::string name;
  int32_t file = 0;          // index into the file list
  int64_t offset = 0;        // absolute byte offset in the file (8 + header length + data_offsets[0])
  int64_t nbytes = 0;        // data_offsets[1] - data_offsets[0]
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

class MappedWeights {
 public:
  MappedWeights() = default;
  ~MappedWeights();
  MappedWeights(const MappedWeights&) = delete;
  MappedWeights& operator=(const MappedWeights&) = delete;

  // mmap every file and index the tensors; fails (model_invalid) on I/O errors or a tensor that
  // runs past the end of its file.
  Status open(const std::vector<std::string>& files, std::vector<TensorDesc> tensors);
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // A 2-D tensor [rows, cols] with exactly that shape, else model_invalid naming the tensor.
  Status matrix(const std::string& name, int64_t rows, int64_t cols, WeightView* out) const;
  // A 1-D tensor [n] widened to f32 into `out`.
  Status vector_f32(const std::string& name, int64_t n, std::vector<float>* out) const;

 private:
  struct Mapping {
    void* addr = nullptr;
    size_t size = 0;
  };
  std::vector<Mapping> maps_;
  std::vector<std::string> paths_;
  std::map<std::string, TensorDesc> index_;
  Status find(const std::string& name, const TensorDesc** out) const;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace loom
