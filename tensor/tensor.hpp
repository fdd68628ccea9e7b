#pragma once
// Tensor: a dense fp32 array, row-major, with a shape. Either owning (64-byte aligned,
// zero-initialised storage) or a view of memory someone else owns (the engine's gradient
// buckets, a user's own buffers). Copying an owning tensor copies its data; copying a view
// copies the view. Only what the layers need: no broadcasting, no autograd.

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mpitrain {

using Shape = std::vector<std::size_t>;

// Returns "[a, b, c]".
std::string to_string(const Shape& shape);
// Returns the product of the extents (1 for a scalar shape []).
std::size_t numel(const Shape& shape) noexcept;

class Tensor {
 public:
  Tensor() = default;
  // An owning tensor of the given shape, filled with zeros.
  explicit Tensor(Shape shape);
  Tensor(std::initializer_list<std::size_t> shape) : Tensor(Shape(shape)) {}
  // Returns an owning tensor of `shape` whose values are unspecified: for outputs that are
  // about to be overwritten, saving the zero-fill pass.
  static Tensor uninitialized(Shape shape);
  // Returns a non-owning tensor over `data`, which must hold exactly numel(shape) values and
  // outlive the view.
  static Tensor view(std::span<float> data, Shape shape);

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  ~Tensor() = default;

  const Shape& shape() const noexcept { return shape_; }
  std::size_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t rank() const noexcept { return shape_.size(); }
  std::size_t numel() const noexcept { return size_; }
  bool is_view() const noexcept { return !owned_; }
  bool empty() const noexcept { return size_ == 0; }

  float* data() noexcept { return data_; }
  const float* data() const noexcept { return data_; }
  std::span<float> span() noexcept { return {data_, size_}; }
  std::span<const float> span() const noexcept { return {data_, size_}; }
  float& operator[](std::size_t i) noexcept { return data_[i]; }
  float operator[](std::size_t i) const noexcept { return data_[i]; }

  // Returns this tensor with a new shape of the same numel (shares storage if a view,
  // otherwise moves the storage); throws std::invalid_argument naming both shapes.
  Tensor reshaped(Shape shape) &&;
  void fill(float value) noexcept;
  void zero() noexcept { fill(0.0f); }
  // Makes this an owning tensor of `shape` for use as a reusable buffer, values unspecified:
  // keeps the storage when this already owns exactly numel(shape) values, otherwise
  // allocates. Layers call it every step, so steady-state training does not allocate.
  void resize(Shape shape);

 private:
  struct AlignedDelete {
    void operator()(float* p) const noexcept;
  };
  Shape shape_;
  std::size_t size_ = 0;
  std::unique_ptr<float[], AlignedDelete> owned_;
  float* data_ = nullptr;
};

}  // namespace mpitrain
