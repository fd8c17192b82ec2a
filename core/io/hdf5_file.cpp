#include "core/io/hdf5_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/io/atomic_file.h"
#include "core/io/hdf5_internal.h"

namespace tessera {
namespace io {

static_assert(sizeof(hid_t) == sizeof(int64_t), "H5File keeps a hid_t in an int64_t");

using namespace h5;  // NOLINT: the shared helpers of core/io

namespace {

// File type, memory type of each dtype (bf16/f16 bit patterns as uint16).
hid_t file_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::bf16:
    case DType::f16: return H5T_STD_U16LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::u8: return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}
hid_t mem_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::bf16:
    case DType::f16: return H5T_NATIVE_UINT16;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::u8: return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_UINT8;
}
// Whether a stored type of class `cls`, `size` bytes and signedness `sign` holds dtype t.
bool stores(DType t, H5T_class_t cls, size_t size, H5T_sign_t sign) {
  if (is_floating(t) && !is_half(t)) return cls == H5T_FLOAT && size == dtype_size(t);
  if (cls != H5T_INTEGER || size != dtype_size(t)) return false;
  return t == DType::i32 ? sign == H5T_SGN_2 : sign == H5T_SGN_NONE;
}
std::string describe(H5T_class_t cls, size_t size, H5T_sign_t sign) {
  std::string kind = cls == H5T_FLOAT     ? "float"
                     : cls == H5T_INTEGER ? (sign == H5T_SGN_NONE ? "unsigned integer" : "signed integer")
                     : cls == H5T_STRING  ? "string"
                                          : "compound/other";
  return std::to_string(size) + "-byte " + kind;
}

// Chunk shape of a dataset: the whole tensor, halved along leading dims until <= 64 MiB.
std::vector<hsize_t> chunk_dims(const std::vector<hsize_t>& dims, size_t elem) {
  constexpr hsize_t kMaxChunkBytes = hsize_t(64) << 20;
  std::vector<hsize_t> c = dims;
  auto bytes = [&] {
    hsize_t b = elem;
    for (hsize_t d : c) b *= d;
    return b;
  };
  for (size_t d = 0; d < c.size() && bytes() > kMaxChunkBytes;) {
    if (c[d] > 1) {
      c[d] = (c[d] + 1) / 2;
    } else {
      ++d;
    }
  }
  return c;
}

DatasetInfo info_of(hid_t ds, const Where& w) {
  Handle space = make(H5Dget_space(ds), H5Sclose, w, "cannot read the dataspace");
  const H5S_class_t sc = H5Sget_simple_extent_type(space.get());
  TS_CHECK(sc == H5S_SCALAR || sc == H5S_SIMPLE, IOError,
           "HDF5 file '" << w.file << "', " << w.obj << ": dataset has no data (null dataspace)");
  const int nd = H5Sget_simple_extent_ndims(space.get());
  if (nd < 0) fail(w.file, w.obj, "cannot read the dataspace");
  TS_CHECK(nd <= kMaxDims, IOError,
           "HDF5 file '" << w.file << "', " << w.obj << ": " << nd << " dimensions (tensors have at most " << kMaxDims
                         << ")");
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  if (nd > 0) check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), w, "cannot read the dataspace");
  std::vector<int64_t> sizes;
  double numel = 1;  // (a double cannot overflow here; the limit keeps byte counts in int64)
  for (hsize_t d : dims) {
    numel *= static_cast<double>(d);
    TS_CHECK(numel < 0x1p56, IOError, "HDF5 file '" << w.file << "', " << w.obj << ": implausible size " << dims.size()
                                                    << "-d dataset with a dimension of " << d);
    sizes.push_back(static_cast<int64_t>(d));
  }
  DatasetInfo info;
  info.shape = Shape(sizes);

  Handle type = make(H5Dget_type(ds), H5Tclose, w, "cannot read the datatype");
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  const H5T_sign_t sign = cls == H5T_INTEGER ? H5Tget_sign(type.get()) : H5T_SGN_ERROR;
  htri_t has = H5Aexists(ds, "dtype");
  check(has, w, "cannot read attribute 'dtype'");
  if (has > 0) {
    const std::string name = read_string_attr(ds, "dtype", w);
    try {
      info.dtype = dtype_from_name(name);
    } catch (const ValueError&) {
      TS_THROW(IOError, "HDF5 file '" << w.file << "', " << w.obj << ": unknown dtype attribute '" << name << "'");
    }
    TS_CHECK(stores(info.dtype, cls, size, sign), IOError,
             "HDF5 file '" << w.file << "', " << w.obj << ": dtype attribute says " << info.dtype
                           << " but the data is stored as " << describe(cls, size, sign));
  } else {
    bool found = false;
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::u8}) {
      if (!found && stores(t, cls, size, sign)) {
        info.dtype = t;
        found = true;
      }
    }
    TS_CHECK(found, IOError,
             "HDF5 file '" << w.file << "', " << w.obj << ": unsupported element type " << describe(cls, size, sign)
                           << " (no dtype attribute)");
  }
  return info;
}

}  // namespace

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

// ---- files ----

H5File H5File::create(const std::string& path) {
  init();
  const Where w{path, "/"};
  Handle fapl = make(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, w, "cannot create file");
  // Objects in the 1.8 format: checksummed metadata that every HDF5 >= 1.8 reads.
#if H5_VERSION_GE(1, 10, 2)
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), w, "cannot create file");
#else
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), w, "cannot create file");
#endif
  check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), w, "cannot create file");
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (id < 0) fail(path, "/", "cannot create file");
  return H5File(id, path);
}

// The memory of an in-memory file. HDF5's core driver allocates and frees its buffer through
// these callbacks; the buffer it frees when the file closes is kept: it holds the finished file.
struct H5File::MemoryImage {
  void* closed = nullptr;  // the buffer after H5Fclose
  size_t capacity = 0;     // its size in bytes (a multiple of the growth increment)
  ~MemoryImage() { std::free(closed); }

  static void* alloc(size_t n, H5FD_file_image_op_t, void* self) {
    static_cast<MemoryImage*>(self)->capacity = n;
    return std::malloc(n);
  }
  static void* copy(void* dst, const void* src, size_t n, H5FD_file_image_op_t, void*) {
    return std::memcpy(dst, src, n);
  }
  static void* grow(void* p, size_t n, H5FD_file_image_op_t, void* self) {
    static_cast<MemoryImage*>(self)->capacity = n;
    return std::realloc(p, n);
  }
  static herr_t release(void* p, H5FD_file_image_op_t op, void* self) {
    auto* m = static_cast<MemoryImage*>(self);
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) {
      std::free(m->closed);
      m->closed = p;
    } else {
      std::free(p);
    }
    return 0;
  }
  static void* share(void* self) { return self; }
  static herr_t unshare(void*) { return 0; }
};

H5File H5File::create_in_memory(const std::string& name, size_t size_hint) {
  init();
  const Where w{name, "/"};
  auto image = std::make_shared<MemoryImage>();
  Handle fapl = make(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, w, "cannot create file in memory");
  // The buffer grows in steps of `increment` bytes (zero-filled as it grows).
  const size_t increment = std::max<size_t>(size_hint + (size_hint >> 4) + (size_t(1) << 16), size_t(1) << 20);
  check(H5Pset_fapl_core(fapl.get(), increment, /*backing_store=*/0), w, "cannot create file in memory");
  H5FD_file_image_callbacks_t callbacks = {MemoryImage::alloc,   MemoryImage::copy,  MemoryImage::grow,
                                           MemoryImage::release, MemoryImage::share, MemoryImage::unshare,
                                           image.get()};
  check(H5Pset_file_image_callbacks(fapl.get(), &callbacks), w, "cannot create file in memory");
#if H5_VERSION_GE(1, 10, 2)
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), w, "cannot create file in memory");
#else
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), w, "cannot create file in memory");
#endif
  check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), w, "cannot create file in memory");
  hid_t id = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (id < 0) fail(name, "/", "cannot create file in memory");
  return H5File(id, name, std::move(image));
}

H5File H5File::open(const std::string& path) {
  init();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    TS_THROW(IOError, "cannot open '" << path << "': " << std::strerror(errno));
  }
  TS_CHECK(S_ISREG(st.st_mode), IOError, "cannot open '" << path << "': not a regular file");
  const Where w{path, "/"};
  Handle fapl = make(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, w, "cannot open file");
  check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), w, "cannot open file");
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (id < 0) {
    TS_THROW(IOError, "cannot open '" << path << "' as an HDF5 file (not HDF5, truncated or corrupt): " << reason());
  }
  return H5File(id, path);
}

H5File::H5File(H5File&& o) noexcept
    : id_(std::exchange(o.id_, -1)), path_(std::move(o.path_)), image_(std::move(o.image_)) {}

H5File& H5File::operator=(H5File&& o) noexcept {
  std::swap(id_, o.id_);
  std::swap(path_, o.path_);
  std::swap(image_, o.image_);
  return *this;
}

H5File::~H5File() {
  if (id_ >= 0 && H5Fclose(id_) < 0) H5Eclear2(H5E_DEFAULT);
}

void H5File::flush() {
  TS_CHECK(id_ >= 0, IOError, "HDF5 file '" << path_ << "' is closed");
  check(H5Fflush(id_, H5F_SCOPE_GLOBAL), Where{path_, "/"}, "cannot flush");
}

void H5File::close() {
  if (id_ < 0) return;
  const herr_t s = H5Fclose(std::exchange(id_, -1));
  check(s, Where{path_, "/"}, "cannot close (final writes failed)");
}

void H5File::close_into(const std::string& path) {
  TS_CHECK(image_ != nullptr, IOError, "HDF5 file '" << path_ << "' is not an in-memory file");
  close();
  // The buffer is the file rounded up to the growth increment; its length is the end-of-file
  // address in the superblock (version 2/3: 8-byte signature, version, sizes of offsets and
  // lengths, flags, then base, extension and end-of-file addresses, little-endian).
  const auto* b = static_cast<const unsigned char*>(image_->closed);
  TS_CHECK(b != nullptr && image_->capacity >= 48 && std::memcmp(b, "\x89HDF\r\n\x1a\n", 8) == 0 &&
               (b[8] == 2 || b[8] == 3) && b[9] == 8,
           IOError, "HDF5 file '" << path_ << "': unexpected in-memory image (superblock)");
  uint64_t eof = 0;
  for (int i = 7; i >= 0; --i) eof = (eof << 8) | b[28 + i];
  TS_CHECK(eof >= 48 && eof <= image_->capacity, IOError,
           "HDF5 file '" << path_ << "': in-memory image ends at " << eof << " of " << image_->capacity << " bytes");
  write_file(path, b, static_cast<size_t>(eof));
}

// ---- structure ----

void H5File::create_group(const std::string& path) {
  const Where w{path_, path};
  Handle lcpl = make(H5Pcreate(H5P_LINK_CREATE), H5Pclose, w, "cannot create group");
  check(H5Pset_create_intermediate_group(lcpl.get(), 1), w, "cannot create group");
  make(H5Gcreate2(id_, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose, w, "cannot create group");
}

bool H5File::exists(const std::string& path) const {
  if (path == "/") return true;
  // H5Lexists needs every parent to exist: test the prefixes in turn.
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    if (!prefix.empty() && prefix != "/") {
      const htri_t r = H5Lexists(id_, prefix.c_str(), H5P_DEFAULT);
      if (r <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    if (pos == std::string::npos) break;
  }
  const htri_t r = H5Oexists_by_name(id_, path.c_str(), H5P_DEFAULT);  // false for dangling links
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

bool H5File::is_group(const std::string& path) const {
  if (!exists(path)) return false;
  Handle o = open_object(id_, Where{path_, path});
  return H5Iget_type(o.get()) == H5I_GROUP;
}

bool H5File::is_dataset(const std::string& path) const {
  if (!exists(path)) return false;
  Handle o = open_object(id_, Where{path_, path});
  return H5Iget_type(o.get()) == H5I_DATASET;
}

std::vector<std::string> H5File::list(const std::string& group) const {
  const Where w{path_, group};
  Handle g = make(H5Gopen2(id_, group.c_str(), H5P_DEFAULT), H5Gclose, w, "cannot open group");
  H5G_info_t info;
  check(H5Gget_info(g.get(), &info), w, "cannot list group");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(path_, group, "cannot list group");
    std::string name(static_cast<size_t>(n) + 1, '\0');
    if (H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, &name[0], name.size(), H5P_DEFAULT) < 0)
      fail(path_, group, "cannot list group");
    name.resize(static_cast<size_t>(n));
    names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ---- tensors ----

void H5File::write_tensor(const std::string& path, const Tensor& t) {
  TS_CHECK(t.defined() && !t.is_symbolic(), ValueError,
           "HDF5 file '" << path_ << "', " << path << ": cannot write an undefined or symbolic tensor");
  if (!t.device().is_cpu()) return write_tensor(path, t.to(Device::cpu()));  // written from a host copy
  const Where w{path_, path};
  std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
  Handle space = make(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(t.dim(), dims.data(), nullptr),
                      H5Sclose, w, "cannot create dataset");
  Handle dcpl = make(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, w, "cannot create dataset");
  if (!dims.empty() && t.numel() > 0) {
    const std::vector<hsize_t> chunk = chunk_dims(dims, dtype_size(t.dtype()));
    check(H5Pset_chunk(dcpl.get(), t.dim(), chunk.data()), w, "cannot create dataset");
    check(H5Pset_fletcher32(dcpl.get()), w, "cannot create dataset");
  }
  Handle lcpl = make(H5Pcreate(H5P_LINK_CREATE), H5Pclose, w, "cannot create dataset");
  check(H5Pset_create_intermediate_group(lcpl.get(), 1), w, "cannot create dataset");
  Handle ds = make(H5Dcreate2(id_, path.c_str(), file_type(t.dtype()), space.get(), lcpl.get(), dcpl.get(),
                              H5P_DEFAULT),
                   H5Dclose, w, "cannot create dataset");
  if (t.numel() > 0)
    check(H5Dwrite(ds.get(), mem_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()), w,
          "cannot write dataset");
  write_string_attr(ds.get(), "dtype", dtype_name(t.dtype()), w);
}

DatasetInfo H5File::tensor_info(const std::string& path) const {
  const Where w{path_, path};
  Handle ds = make(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), H5Dclose, w, "cannot open dataset");
  return info_of(ds.get(), w);
}

Tensor H5File::read_tensor(const std::string& path) const {
  const Where w{path_, path};
  Handle ds = make(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), H5Dclose, w, "cannot open dataset");
  const DatasetInfo info = info_of(ds.get(), w);
  Tensor t = empty(info.shape, info.dtype);
  if (t.numel() > 0)
    check(H5Dread(ds.get(), mem_type(info.dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()), w,
          "cannot read dataset");
  return t;
}

}  // namespace io
}  // namespace tessera
