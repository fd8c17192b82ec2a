// Tensor shapes: up to kMaxDims sizes, row-major.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace tessera {

constexpr int kMaxDims = 8;

/// A shape of 0..8 non-negative sizes. Shape{} is a scalar (numel 1).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int ndim() const { return ndim_; }
  int64_t numel() const;
  /// Size of dim d; negative d counts from the end. ShapeError if out of range.
  int64_t operator[](int d) const { return dims_[normalize_dim(d)]; }
  int64_t& operator[](int d) { return dims_[normalize_dim(d)]; }
  /// d in [-ndim, ndim) -> [0, ndim); ShapeError naming the shape otherwise.
  int normalize_dim(int d) const;

  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  /// Product of sizes in [from, to).
  int64_t prod(int from, int to) const;
  /// Row-major strides in elements.
  std::vector<int64_t> strides() const;

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  ///< "[2, 3]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

/// numpy broadcasting of two shapes; ShapeError naming `op` and both shapes when they do not fit.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace tessera
