#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace tessera {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  TS_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), ShapeError,
           "shape has " << dims.size() << " dims; tessera allows at most " << kMaxDims);
  ndim_ = static_cast<int>(dims.size());
  for (int i = 0; i < ndim_; ++i) {
    TS_CHECK(dims[i] >= 0, ShapeError, "shape size " << dims[i] << " at dim " << i << " is negative");
    dims_[i] = dims[i];
  }
}

int64_t Shape::numel() const { return prod(0, ndim_); }

int Shape::normalize_dim(int d) const {
  int n = d < 0 ? d + ndim_ : d;
  TS_CHECK(n >= 0 && n < ndim_, ShapeError, "dim " << d << " is out of range for shape " << str());
  return n;
}

int64_t Shape::prod(int from, int to) const {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= dims_[i];
  return p;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(ndim_);
  int64_t acc = 1;
  for (int i = ndim_ - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= dims_[i];
  }
  return s;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << dims_[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> out(n);
  for (int i = 0; i < n; ++i) {
    int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    TS_CHECK(da == db || da == 1 || db == 1, ShapeError,
             op << ": shapes " << a << " and " << b << " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return Shape(out);
}

}  // namespace tessera
