// H5File: the one place in tessera that calls the HDF5 C library (explicitly versioned names:
// H5Gcreate2, H5Dopen2, H5Acreate2, H5Eset_auto2, ...). Every call is checked; a failure throws
// tessera::IOError naming the file, the object path and HDF5's own reason. HDF5's error
// printing is switched off.
//
//   io::H5File f = io::H5File::create("w.h5");
//   f.write_tensor("/model/fc.weight", w);               // f32 [in, out] dataset, attribute dtype="f32"
//   f.set_attr("/", "format", "tessera-checkpoint");     // attributes on "/" (root), groups, datasets
//   f.close();                                           // checked (the destructor only cleans up)
//   Tensor w2 = io::H5File::open("w.h5").read_tensor("/model/fc.weight");
//
// Tensors are stored with their shape (0-d tensors as scalar datasets) and an attribute
// dtype = dtype_name(t.dtype()): f32 as IEEE f32, f64 as IEEE f64, i32 as int32, u8 as uint8,
// bf16/f16 bit patterns as uint16 (HDF5 has no such float types). Non-empty datasets are
// chunked with the Fletcher-32 checksum filter, so corrupted data fails to read instead of
// loading silently; metadata uses the HDF5 1.8 object format (checksummed, readable by HDF5 >= 1.8).
// String attributes: every string tessera writes is of one kind, fixed-length UTF-8 (NUL-padded,
// sized to the value), which h5py 3.x reads as bytes (numpy.bytes_: f.attrs["format"].decode());
// h5py reads variable-length strings as str. Variable-length strings are not written because
// they live in HDF5's global heap, which has no checksum: a damaged byte there can crash or hang
// HDF5 itself (measured: core/io/hdf5_attributes.cpp), where a fixed-length attribute of up to
// 64 KiB is in checksummed metadata and the same damage is an IOError. Both kinds are read, either
// padding, ASCII or UTF-8: files other writers made or edited (h5py writes a str as
// variable-length UTF-8, bytes as variable-length ASCII).
// Paths are absolute ("/model/fc.weight"); creating a dataset or group creates missing parents.
//
// HDF5 builds without thread safety (the usual distribution build) must not be entered from two
// threads at once: hold hdf5_mutex() while using H5File objects (the checkpoint functions do).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera {
namespace io {

/// The lock that serializes tessera's HDF5 use across threads (recursive).
std::recursive_mutex& hdf5_mutex();

/// Shape and dtype of a stored tensor.
struct DatasetInfo {
  Shape shape;
  DType dtype = DType::f32;
};

/// The kind of value an attribute holds.
enum class AttrKind { integer, real, string, other };

class H5File {
 public:
  /// Creates `path`, replacing an existing file. IOError with the OS/HDF5 reason. (A write that
  /// fails on disk, e.g. a full disk, can leave HDF5 1.10 unable to close the file; see
  /// create_in_memory for files that must survive that.)
  static H5File create(const std::string& path);
  /// Opens an existing file read-only. IOError for a missing file, a non-HDF5 or truncated file.
  static H5File open(const std::string& path);
  /// A new file that lives in memory (HDF5's core driver) until close_to_image(); `name` is for
  /// messages, `size_hint` the expected size in bytes. HDF5 1.10 cannot recover from a write
  /// error on disk (a failed H5Fclose leaves a file behind that crashes the library at exit), so
  /// files that must survive a full disk are built in memory and written out by the caller.
  static H5File create_in_memory(const std::string& name, size_t size_hint = 0);

  H5File(H5File&& o) noexcept;
  H5File& operator=(H5File&& o) noexcept;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
  ~H5File();  ///< closes without checking; call close() to see errors

  const std::string& path() const { return path_; }
  /// Writes HDF5's buffers to the OS (not to disk: fsync is the caller's).
  void flush();
  /// Closes the file; IOError when the final writes fail.
  void close();
  /// For a create_in_memory() file: closes it, then writes the complete file to `path` with
  /// plain POSIX writes and fsyncs it (core/io/atomic_file.h write_file). IOError with the reason.
  void close_into(const std::string& path);

  // ---- structure ----
  /// Creates a group and its missing parents ("/a/b/c").
  void create_group(const std::string& path);
  /// True when every component of `path` exists (as a link; "/" always exists).
  bool exists(const std::string& path) const;
  bool is_group(const std::string& path) const;
  bool is_dataset(const std::string& path) const;
  /// Names of the members of a group, sorted by name.
  std::vector<std::string> list(const std::string& group) const;

  // ---- tensors ----
  /// Writes a CPU tensor as a new dataset (see the header comment for the types).
  void write_tensor(const std::string& path, const Tensor& t);
  /// Shape and dtype of a dataset without reading it: the dtype attribute when present
  /// (checked against the stored type), else inferred from the HDF5 type (f32, f64, i32, u8).
  DatasetInfo tensor_info(const std::string& path) const;
  /// Reads a dataset into a new CPU tensor (dtype as tensor_info says).
  Tensor read_tensor(const std::string& path) const;

  // ---- attributes (on "/", a group or a dataset) ----
  void set_attr(const std::string& obj, const std::string& name, const std::string& value);
  void set_attr(const std::string& obj, const std::string& name, const char* value) {
    set_attr(obj, name, std::string(value));
  }
  void set_attr(const std::string& obj, const std::string& name, int64_t value);
  void set_attr(const std::string& obj, const std::string& name, uint64_t value);
  void set_attr(const std::string& obj, const std::string& name, double value);

  bool has_attr(const std::string& obj, const std::string& name) const;
  /// Names of the attributes of `obj`, sorted.
  std::vector<std::string> attr_names(const std::string& obj) const;
  AttrKind attr_kind(const std::string& obj, const std::string& name) const;
  /// Typed reads; IOError naming the object and attribute when it is missing or of another kind.
  /// attr_int/attr_uint read any integer attribute (HDF5 converts), attr_double any number.
  std::string attr_string(const std::string& obj, const std::string& name) const;
  int64_t attr_int(const std::string& obj, const std::string& name) const;
  uint64_t attr_uint(const std::string& obj, const std::string& name) const;
  double attr_double(const std::string& obj, const std::string& name) const;

 private:
  struct MemoryImage;  // the core driver's buffer of a create_in_memory() file
  H5File(int64_t id, std::string path, std::shared_ptr<MemoryImage> image = nullptr)
      : id_(id), path_(std::move(path)), image_(std::move(image)) {}
  int64_t id_ = -1;  // hid_t
  std::string path_;
  std::shared_ptr<MemoryImage> image_;
};

}  // namespace io
}  // namespace tessera
