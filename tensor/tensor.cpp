#include "mpitrain/tensor/tensor.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "mpitrain/tensor/aligned_storage.hpp"

namespace mpitrain {
namespace {

// Returns storage for n floats (huge pages for large tensors: a loaded checkpoint, an
// optimizer's moments), zero-filled unless `zero` is false.
float* allocate(std::size_t n, bool zero = true) {
  if (n == 0) return nullptr;
  auto* p = static_cast<float*>(allocate_aligned(n * sizeof(float)));
  if (zero) std::fill_n(p, n, 0.0f);
  return p;
}

}  // namespace

std::string to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::size_t numel(const Shape& shape) noexcept {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

void Tensor::AlignedDelete::operator()(float* p) const noexcept { std::free(p); }

Tensor::Tensor(Shape shape) : shape_(std::move(shape)), size_(mpitrain::numel(shape_)) {
  owned_.reset(allocate(size_));
  data_ = owned_.get();
}

Tensor Tensor::uninitialized(Shape shape) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.size_ = mpitrain::numel(t.shape_);
  t.owned_.reset(allocate(t.size_, false));
  t.data_ = t.owned_.get();
  return t;
}

Tensor Tensor::view(std::span<float> data, Shape shape) {
  if (data.size() != mpitrain::numel(shape)) {
    throw std::invalid_argument("Tensor::view: " + std::to_string(data.size()) +
                                " values cannot have shape " + to_string(shape));
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.size_ = data.size();
  t.data_ = data.data();
  return t;
}

Tensor::Tensor(const Tensor& other) : shape_(other.shape_), size_(other.size_) {
  if (other.owned_) {
    owned_.reset(allocate(size_, false));
    std::copy_n(other.data_, size_, owned_.get());
    data_ = owned_.get();
  } else {
    data_ = other.data_;
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

Tensor Tensor::reshaped(Shape shape) && {
  if (mpitrain::numel(shape) != size_) {
    throw std::invalid_argument("Tensor::reshaped: cannot reshape " + to_string(shape_) +
                                " to " + to_string(shape));
  }
  Tensor t(std::move(*this));
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::fill(float value) noexcept { std::fill_n(data_, size_, value); }

void Tensor::resize(Shape shape) {
  const std::size_t n = mpitrain::numel(shape);
  if (!owned_ || n != size_) *this = uninitialized(shape);
  shape_ = std::move(shape);
}

}  // namespace mpitrain
