// String attributes in checkpoints: every one tessera writes (root format, framework_version,
// config; layout kind and generator; each dataset's dtype; optimizer type; trainer strings) is of
// one kind, fixed-length UTF-8 (core/io/hdf5_file.h says why), a config longer than an object
// header message too; and files with the other kinds (variable-length strings as h5py writes
// them, space-padded ASCII) load with the same values. The files are inspected and rewritten
// with the HDF5 C API, not through io::H5File, so the test does not trust the code it checks.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/io/checkpoint.h"
#include "io_test_util.h"

namespace tessera {
namespace {

using testing::bit_equal;
using testing::sample_checkpoint;
using testing::TempDir;

// ---- the HDF5 C API, checked ----

// An HDF5 identifier, closed when it goes away; a failed call throws (the test fails with it).
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id < 0) throw std::runtime_error("HDF5 call failed: " + what);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { close_(id_); }
  hid_t get() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void ok(herr_t status, const std::string& what) {
  if (status < 0) throw std::runtime_error("HDF5 call failed: " + what);
}

// The members of group `g`, by name.
std::vector<std::string> members(hid_t g) {
  H5G_info_t info;
  ok(H5Gget_info(g, &info), "H5Gget_info");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(n < 0 ? 0 : static_cast<size_t>(n) + 1, '\0');
    if (n < 0 || H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, &name[0], name.size(), H5P_DEFAULT) < 0)
      throw std::runtime_error("HDF5 call failed: H5Lget_name_by_idx");
    name.resize(static_cast<size_t>(n));
    names.push_back(name);
  }
  return names;
}

herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// The names of the attributes of `obj`.
std::vector<std::string> attr_names(hid_t obj) {
  std::vector<std::string> names;
  ok(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_attr_name, &names), "H5Aiterate2");
  return names;
}

// Calls visit(path, object) for `path` and every object below it (depth first).
void walk(hid_t file, const std::string& path, const std::function<void(const std::string&, hid_t)>& visit) {
  Id obj(H5Oopen(file, path.c_str(), H5P_DEFAULT), H5Oclose, "H5Oopen " + path);
  visit(path, obj.get());
  if (H5Iget_type(obj.get()) != H5I_GROUP) return;
  for (const std::string& n : members(obj.get())) walk(file, (path == "/" ? "/" : path + "/") + n, visit);
}

// ---- string attributes as stored ----

// One string attribute of a file: where it is, its HDF5 string type, its value.
struct StoredString {
  std::string obj, name;
  bool variable = false;  // H5Tis_variable_str: a variable-length string (global heap)
  H5T_cset_t cset = H5T_CSET_ERROR;
  H5T_str_t pad = H5T_STR_ERROR;
  bool scalar = false;  // one value (a scalar dataspace)
  std::string value;
  std::string key() const { return obj + ":" + name; }
};

// The value of string attribute `a` of type `type`, read in the kind it is stored as (padding
// and a trailing NUL dropped).
std::string read_value(hid_t a, hid_t type) {
  if (H5Tis_variable_str(type) > 0) {
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
    ok(H5Tset_size(mem.get(), H5T_VARIABLE), "H5Tset_size");
    ok(H5Tset_cset(mem.get(), H5Tget_cset(type)), "H5Tset_cset");
    char* p = nullptr;
    ok(H5Aread(a, mem.get(), &p), "H5Aread");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  std::string s(H5Tget_size(type), '\0');
  ok(H5Aread(a, type, &s[0]), "H5Aread");
  s.erase(s.find_last_not_of(H5Tget_strpad(type) == H5T_STR_SPACEPAD ? ' ' : '\0') + 1);
  return s;
}

StoredString stored_string(hid_t obj, const std::string& path, const std::string& name) {
  Id a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose, "H5Aopen " + name);
  Id type(H5Aget_type(a.get()), H5Tclose, "H5Aget_type");
  Id space(H5Aget_space(a.get()), H5Sclose, "H5Aget_space");
  StoredString s;
  s.obj = path;
  s.name = name;
  s.variable = H5Tis_variable_str(type.get()) > 0;
  s.cset = H5Tget_cset(type.get());
  s.pad = H5Tget_strpad(type.get());
  s.scalar = H5Sget_simple_extent_type(space.get()) == H5S_SCALAR;
  s.value = read_value(a.get(), type.get());
  return s;
}

// Every string attribute in the file at `path`, on every object.
std::vector<StoredString> stored_strings(const std::string& path) {
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "H5Fopen " + path);
  std::vector<StoredString> out;
  walk(file.get(), "/", [&](const std::string& p, hid_t obj) {
    for (const std::string& n : attr_names(obj)) {
      Id a(H5Aopen(obj, n.c_str(), H5P_DEFAULT), H5Aclose, "H5Aopen " + n);
      Id type(H5Aget_type(a.get()), H5Tclose, "H5Aget_type");
      if (H5Tget_class(type.get()) == H5T_STRING) out.push_back(stored_string(obj, p, n));
    }
  });
  return out;
}

std::set<std::string> keys(const std::vector<StoredString>& strings) {
  std::set<std::string> out;
  for (const StoredString& s : strings) out.insert(s.key());
  return out;
}

// ---- writing the other kinds ----

// The string kinds other writers store: h5py writes a str as variable-length UTF-8 and bytes as
// variable-length ASCII; Fortran-style writers pad fixed-length ASCII with spaces.
enum class StringKind { variable_utf8, variable_ascii, fixed_spacepad_ascii };

void write_string(hid_t obj, const std::string& name, const std::string& value, StringKind kind) {
  ok(H5Adelete(obj, name.c_str()), "H5Adelete " + name);
  Id type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  ok(H5Tset_cset(type.get(), kind == StringKind::variable_utf8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII), "H5Tset_cset");
  const bool variable = kind != StringKind::fixed_spacepad_ascii;
  const std::string padded = value.empty() ? std::string(" ") : value;
  if (variable) {
    ok(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size");
  } else {
    ok(H5Tset_size(type.get(), padded.size()), "H5Tset_size");
    ok(H5Tset_strpad(type.get(), H5T_STR_SPACEPAD), "H5Tset_strpad");
  }
  Id space(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate");
  Id a(H5Acreate2(obj, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
       "H5Acreate2 " + name);
  const char* p = value.c_str();
  ok(variable ? H5Awrite(a.get(), type.get(), &p) : H5Awrite(a.get(), type.get(), padded.data()), "H5Awrite " + name);
}

// Rewrites the string attributes of the file at `path` (those named `only`, when given) as `kind`,
// each with its value.
void rewrite_strings(const std::string& path, StringKind kind, const std::string& only = "") {
  const std::vector<StoredString> strings = stored_strings(path);
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, "H5Fopen " + path);
  for (const StoredString& s : strings) {
    if (!only.empty() && s.name != only) continue;
    Id obj(H5Oopen(file.get(), s.obj.c_str(), H5P_DEFAULT), H5Oclose, "H5Oopen " + s.obj);
    write_string(obj.get(), s.name, s.value, kind);
  }
}

// ---- checkpoints ----

// sample_checkpoint() plus an attention layout (attributes kind and generator) and a non-ASCII
// and an empty trainer string: every string attribute a checkpoint has.
io::CheckpointData strings_checkpoint() {
  io::CheckpointData d = sample_checkpoint();
  d.attention_layouts["attn"] = AttentionLayout::strided(64, 8, 2, 3);
  d.trainer.strings["note"] = "na\xC3\xAFve \xE2\x9C\x93 run";  // "naïve ✓ run"
  d.trainer.strings["empty"] = "";
  return d;
}

// The string attributes save_checkpoint writes for `d` at `path`: root, layouts, optimizer,
// trainer, and dtype on every dataset (whichever datasets the file has).
std::set<std::string> expected_strings(const io::CheckpointData& d, const std::string& path) {
  std::set<std::string> want = {"/:format", "/:framework_version", "/:config"};
  for (const auto& kv : d.layouts) want.insert("/layout/" + kv.first + ":kind");
  for (const auto& kv : d.attention_layouts) {
    want.insert("/layout/" + kv.first + ":kind");
    want.insert("/layout/" + kv.first + ":generator");
  }
  if (!d.optimizer.type.empty()) want.insert("/optimizer:type");
  for (const auto& kv : d.trainer.strings) want.insert("/trainer:" + kv.first);
  for (const auto& kv : io::inspect_checkpoint(path)) want.insert(kv.first + ":dtype");
  return want;
}

// What a load must give back of `d`: every string, and every tensor bit for bit.
void expect_loads_as(const std::string& path, const io::CheckpointData& d) {
  SCOPED_TRACE(path);
  const io::CheckpointData back = io::load_checkpoint(path);
  EXPECT_EQ(back.config, d.config);
  EXPECT_EQ(back.framework_version, io::framework_version());
  EXPECT_EQ(back.optimizer.type, d.optimizer.type);
  EXPECT_EQ(back.trainer.strings, d.trainer.strings);
  ASSERT_EQ(back.layouts.size(), d.layouts.size());
  for (const auto& [name, l] : d.layouts) EXPECT_TRUE(*back.layouts.at(name) == *l) << name;
  ASSERT_EQ(back.attention_layouts.size(), d.attention_layouts.size());
  for (const auto& [name, l] : d.attention_layouts) {
    EXPECT_TRUE(*back.attention_layouts.at(name) == *l) << name;
    EXPECT_EQ(back.attention_layouts.at(name)->kind(), l->kind()) << name;  // the generator attribute
  }
  ASSERT_EQ(back.model.size(), d.model.size());
  for (const auto& [name, t] : d.model) EXPECT_TRUE(bit_equal(back.model.at(name), t)) << name;  // dtype attributes
  for (const auto& [p, states] : d.optimizer.state)
    for (const auto& [s, t] : states) EXPECT_TRUE(bit_equal(back.optimizer.state.at(p).at(s), t)) << p << "/" << s;
  for (const auto& [name, t] : d.trainer.tensors) EXPECT_TRUE(bit_equal(back.trainer.tensors.at(name), t)) << name;
}

TEST(CheckpointStrings, EveryStringAttributeIsFixedLengthUtf8) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  const io::CheckpointData d = strings_checkpoint();
  io::save_checkpoint(path, d);
  const std::vector<StoredString> strings = stored_strings(path);
  EXPECT_EQ(keys(strings), expected_strings(d, path));
  for (const StoredString& s : strings) {
    SCOPED_TRACE(s.key());
    EXPECT_FALSE(s.variable);
    EXPECT_EQ(s.cset, H5T_CSET_UTF8);
    EXPECT_EQ(s.pad, H5T_STR_NULLPAD);
    EXPECT_TRUE(s.scalar);
  }
  expect_loads_as(path, d);
}

// A config past 64 KiB, the most an attribute in the object header holds (HDF5 keeps it
// elsewhere): the same kind of string, and it reads back whole.
TEST(CheckpointStrings, LongConfigIsTheSameKind) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::CheckpointData d = strings_checkpoint();
  d.config = "{\"notes\": \"" + std::string(300000, 'x') + "\", \"naive\": \"na\xC3\xAFve\"}";
  io::save_checkpoint(path, d);
  for (const StoredString& s : stored_strings(path)) {
    SCOPED_TRACE(s.key());
    EXPECT_FALSE(s.variable);
    EXPECT_EQ(s.cset, H5T_CSET_UTF8);
  }
  expect_loads_as(path, d);
}

// Files whose strings are of another kind (every one, or only config as after an h5py edit of
// it) load with the same values.
TEST(CheckpointStrings, OtherKindsOfStringsLoad) {
  TempDir dir;
  const io::CheckpointData d = strings_checkpoint();
  const struct {
    const char* file;
    StringKind kind;
    const char* only;
  } cases[] = {{"variable_utf8.h5", StringKind::variable_utf8, ""},
               {"variable_ascii.h5", StringKind::variable_ascii, ""},
               {"config_variable.h5", StringKind::variable_utf8, "config"},
               {"spacepad_ascii.h5", StringKind::fixed_spacepad_ascii, ""}};
  for (const auto& c : cases) {
    const std::string path = dir.file(c.file);
    io::save_checkpoint(path, d);
    rewrite_strings(path, c.kind, c.only);
    const std::vector<StoredString> strings = stored_strings(path);
    EXPECT_EQ(keys(strings), expected_strings(d, path)) << c.file;
    for (const StoredString& s : strings) {  // the rewrite happened
      const bool rewritten = !*c.only || s.name == c.only;
      const bool variable = rewritten && c.kind != StringKind::fixed_spacepad_ascii;
      EXPECT_EQ(s.variable, variable) << c.file << " " << s.key();
      if (rewritten && c.kind == StringKind::fixed_spacepad_ascii) {
        EXPECT_EQ(s.pad, H5T_STR_SPACEPAD) << s.key();
      }
    }
    expect_loads_as(path, d);
  }
}

}  // namespace
}  // namespace tessera
