// Read-only weight storage: the model's safetensors files mapped into memory. The TypeScript side
// parses the JSON headers (it has a JSON parser; native code should not need one) and hands over
// a flat table of tensors; this file maps the files and checks every tensor lies inside its file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "runtime/huge-page-arena.h"
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
  // `w` (a matrix from matrix(), named `name` in errors) quantised to Q8 (runtime/quantize-q8.h)
  // into host memory this object owns; `w` then views the copy. model_invalid when K is not a
  // multiple of 32. The mapped original is left as it is (the embedding may still read it).
  Status to_q8(WeightView* w, const std::string& name);

 private:
  struct Mapping {
    void* addr = nullptr;
    size_t size = 0;
  };
  std::vector<Mapping> maps_;
  std::vector<std::string> paths_;
  std::map<std::string, TensorDesc> index_;
  HugePageArena q8_copies_;  // to_q8's copies
  Status find(const std::string& name, const TensorDesc** out) const;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace loom
