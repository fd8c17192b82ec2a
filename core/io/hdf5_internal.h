// Internal to core/io (includes hdf5.h; not for users): the helpers hdf5_file.cpp and
// hdf5_attributes.cpp share.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace tessera {
namespace io {
namespace h5 {

// HDF5's default handler prints the error stack to stderr; we turn the stack into exceptions.
// (Called on every entry: in thread-safe HDF5 builds the setting is per thread.)
void init();
// HDF5's reason for the last failure, most specific first; clears the error stack.
std::string reason();
// IOError naming the file, the object, what failed and HDF5's reason.
[[noreturn]] void fail(const std::string& file, const std::string& obj, const std::string& what);

// An HDF5 identifier closed by `close_` when the Handle goes away.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Handle& operator=(Handle&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  ~Handle() {
    if (id_ >= 0 && close_ && close_(id_) < 0) H5Eclear2(H5E_DEFAULT);
  }
  hid_t get() const { return id_; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// The file and object an operation is about, for error messages.
struct Where {
  std::string file;
  std::string obj;
};

inline Handle make(hid_t id, herr_t (*close)(hid_t), const Where& w, const char* what) {
  if (id < 0) fail(w.file, w.obj, what);
  return Handle(id, close);
}
inline void check(herr_t status, const Where& w, const char* what) {
  if (status < 0) fail(w.file, w.obj, what);
}

Handle open_object(hid_t file, const Where& w);
// Replaces string attribute `name` of object `loc`.
void write_string_attr(hid_t loc, const std::string& name, const std::string& value, const Where& w);
std::string read_string_attr(hid_t loc, const std::string& name, const Where& w);

}  // namespace h5
}  // namespace io
}  // namespace tessera
