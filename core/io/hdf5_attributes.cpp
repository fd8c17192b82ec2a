// H5File's attributes, and the error and attribute helpers of core/io/hdf5_internal.h.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/io/hdf5_file.h"
#include "core/io/hdf5_internal.h"

namespace tessera {
namespace io {
namespace h5 {

void init() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

herr_t collect_error(unsigned, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  std::string s = e->desc ? e->desc : "";
  char minor[256];
  if (H5Eget_msg(e->min_num, nullptr, minor, sizeof minor) > 0 && s.find(minor) == std::string::npos)
    s += s.empty() ? std::string(minor) : " (" + std::string(minor) + ")";
  if (!s.empty() && std::find(out->begin(), out->end(), s) == out->end()) out->push_back(s);
  return 0;
}

std::string reason() {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect_error, &msgs);
  H5Eclear2(H5E_DEFAULT);
  if (msgs.empty()) return "unknown HDF5 error";
  std::string out;
  for (size_t i = 0; i < msgs.size() && i < 3; ++i) out += (i ? "; " : "") + msgs[i];
  return out;
}

[[noreturn]] void fail(const std::string& file, const std::string& obj, const std::string& what) {
  TS_THROW(IOError, "HDF5 file '" << file << "', " << obj << ": " << what << ": " << reason());
}

Handle open_object(hid_t file, const Where& w) {
  return make(H5Oopen(file, w.obj.c_str(), H5P_DEFAULT), H5Oclose, w, "cannot open object");
}

// Replaces attribute `name` of `loc` with `n` values of memory type `mem` stored as `ftype`.
void write_attr(hid_t loc, const std::string& name, hid_t ftype, hid_t mem, const void* value, const Where& w) {
  const std::string what = "cannot write attribute '" + name + "'";
  htri_t has = H5Aexists(loc, name.c_str());
  check(has, w, what.c_str());
  if (has > 0) check(H5Adelete(loc, name.c_str()), w, what.c_str());
  Handle space = make(H5Screate(H5S_SCALAR), H5Sclose, w, what.c_str());
  Handle attr = make(H5Acreate2(loc, name.c_str(), ftype, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose, w,
                     what.c_str());
  check(H5Awrite(attr.get(), mem, value), w, what.c_str());
}

// Every string attribute is written by this function, as one kind: fixed-length UTF-8, NUL-padded,
// sized to the value (an empty string as one NUL byte). Such an attribute of up to 64 KiB lives in
// checksummed metadata (the object header, or the dense-attribute heap of an object with many
// attributes), so damage to it fails the checksum as an IOError; a longer one (in practice only a
// huge config) HDF5 stores apart without a checksum: damage to its bytes reads as a wrong string
// (a resuming trainer's JSON parse of config catches some), not a crash.
// Not variable-length (what h5py writes for a str, and reads as str): those go to HDF5's global
// heap, which has no checksum, and HDF5 does not survive damage to it. With HDF5 1.10.8, changing
// one byte among the first 128 of a global heap collection (4 values per byte) made H5Aread
// crash with SIGSEGV in 8% of cases and hang in 2%, and return a wrong string in 37%: no tessera
// check runs before the crash. With this function writing variable-length strings,
// CheckpointFiles.CorruptBytesNeverCrash run over every byte (TESSERA_CORRUPT_EVERY_BYTE=1)
// died of SIGSEGV; with fixed-length ones it passes.
void write_string_attr(hid_t loc, const std::string& name, const std::string& value, const Where& w) {
  TS_CHECK(value.find('\0') == std::string::npos, ValueError,
           "HDF5 file '" << w.file << "', " << w.obj << ": string attribute '" << name
                         << "' contains a NUL byte (store bytes as a u8 dataset)");
  const std::string what = "cannot write attribute '" + name + "'";
  Handle type = make(H5Tcopy(H5T_C_S1), H5Tclose, w, what.c_str());
  check(H5Tset_size(type.get(), std::max<size_t>(value.size(), 1)), w, what.c_str());
  check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), w, what.c_str());
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), w, what.c_str());
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_attr(loc, name, type.get(), type.get(), padded.data(), w);
}

// An attribute of `loc` opened for reading, with its type and a check that it holds one value.
struct OpenAttr {
  Handle attr, type;
  H5T_class_t cls;
};
OpenAttr open_attr(hid_t loc, const std::string& name, const Where& w) {
  const std::string what = "cannot read attribute '" + name + "'";
  htri_t has = H5Aexists(loc, name.c_str());
  check(has, w, what.c_str());
  TS_CHECK(has > 0, IOError, "HDF5 file '" << w.file << "', " << w.obj << ": missing attribute '" << name << "'");
  OpenAttr a;
  a.attr = make(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose, w, what.c_str());
  a.type = make(H5Aget_type(a.attr.get()), H5Tclose, w, what.c_str());
  a.cls = H5Tget_class(a.type.get());
  Handle space = make(H5Aget_space(a.attr.get()), H5Sclose, w, what.c_str());
  TS_CHECK(H5Sget_simple_extent_npoints(space.get()) == 1, IOError,
           "HDF5 file '" << w.file << "', " << w.obj << ": attribute '" << name << "' is not a single value");
  return a;
}

std::string read_string_attr(hid_t loc, const std::string& name, const Where& w) {
  OpenAttr a = open_attr(loc, name, w);
  const std::string what = "cannot read string attribute '" + name + "'";
  TS_CHECK(a.cls == H5T_STRING, IOError,
           "HDF5 file '" << w.file << "', " << w.obj << ": attribute '" << name << "' is not a string");
  Handle mem = make(H5Tcopy(H5T_C_S1), H5Tclose, w, what.c_str());
  check(H5Tset_cset(mem.get(), H5Tget_cset(a.type.get())), w, what.c_str());
  if (H5Tis_variable_str(a.type.get()) > 0) {
    check(H5Tset_size(mem.get(), H5T_VARIABLE), w, what.c_str());
    char* p = nullptr;
    check(H5Aread(a.attr.get(), mem.get(), &p), w, what.c_str());
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  // Fixed-length: read the bytes, then drop the padding.
  const size_t n = H5Tget_size(a.type.get());
  check(H5Tset_size(mem.get(), n), w, what.c_str());
  check(H5Tset_strpad(mem.get(), H5Tget_strpad(a.type.get())), w, what.c_str());
  std::string s(n, '\0');
  check(H5Aread(a.attr.get(), mem.get(), &s[0]), w, what.c_str());
  if (H5Tget_strpad(a.type.get()) == H5T_STR_SPACEPAD) {
    s.erase(s.find_last_not_of(' ') + 1);
  } else {
    s.resize(std::strlen(s.c_str()));
  }
  return s;
}

template <class T>
T read_number_attr(hid_t loc, const std::string& name, hid_t mem, bool allow_real, const Where& w) {
  OpenAttr a = open_attr(loc, name, w);
  TS_CHECK(a.cls == H5T_INTEGER || (allow_real && a.cls == H5T_FLOAT), IOError,
           "HDF5 file '" << w.file << "', " << w.obj << ": attribute '" << name << "' is not "
                         << (allow_real ? "a number" : "an integer"));
  T v{};
  check(H5Aread(a.attr.get(), mem, &v), w, ("cannot read attribute '" + name + "'").c_str());
  return v;
}

herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

}  // namespace h5

using namespace h5;  // NOLINT: this file's own helpers

// ---- attributes ----

void H5File::set_attr(const std::string& obj, const std::string& name, const std::string& value) {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  write_string_attr(o.get(), name, value, w);
}

void H5File::set_attr(const std::string& obj, const std::string& name, int64_t value) {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  write_attr(o.get(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, w);
}

void H5File::set_attr(const std::string& obj, const std::string& name, uint64_t value) {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  write_attr(o.get(), name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value, w);
}

void H5File::set_attr(const std::string& obj, const std::string& name, double value) {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  write_attr(o.get(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, w);
}

bool H5File::has_attr(const std::string& obj, const std::string& name) const {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  const htri_t r = H5Aexists(o.get(), name.c_str());
  check(r, w, "cannot read attributes");
  return r > 0;
}

std::vector<std::string> H5File::attr_names(const std::string& obj) const {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  std::vector<std::string> names;
  check(H5Aiterate2(o.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attr_name, &names), w,
        "cannot list attributes");
  std::sort(names.begin(), names.end());
  return names;
}

AttrKind H5File::attr_kind(const std::string& obj, const std::string& name) const {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  OpenAttr a = open_attr(o.get(), name, w);
  switch (a.cls) {
    case H5T_INTEGER: return AttrKind::integer;
    case H5T_FLOAT: return AttrKind::real;
    case H5T_STRING: return AttrKind::string;
    default: return AttrKind::other;
  }
}

std::string H5File::attr_string(const std::string& obj, const std::string& name) const {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  return read_string_attr(o.get(), name, w);
}

int64_t H5File::attr_int(const std::string& obj, const std::string& name) const {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  return read_number_attr<int64_t>(o.get(), name, H5T_NATIVE_INT64, false, w);
}

uint64_t H5File::attr_uint(const std::string& obj, const std::string& name) const {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  return read_number_attr<uint64_t>(o.get(), name, H5T_NATIVE_UINT64, false, w);
}

double H5File::attr_double(const std::string& obj, const std::string& name) const {
  const Where w{path_, obj};
  Handle o = open_object(id_, w);
  return read_number_attr<double>(o.get(), name, H5T_NATIVE_DOUBLE, true, w);
}

}  // namespace io
}  // namespace tessera
