// Checkpoint files: missing, non-HDF5, truncated, corrupt and foreign files give clear IOErrors;
// atomic saves keep the previous checkpoint when a save fails; keep_last retention; the files
// read with h5dump and h5py.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/io/checkpoint.h"
#include "core/io/hdf5_file.h"
#include "gradcheck.h"
#include "io_test_util.h"

namespace tessera {
namespace {

using testing::expect_error;
using testing::read_bytes;
using testing::sample_checkpoint;
using testing::TempDir;
using testing::write_bytes;

// ---- bad files ----

TEST(CheckpointFiles, MissingAndNonHdf5FilesAreClearErrors) {
  TempDir dir;
  expect_error<IOError>([&] { io::load_checkpoint(dir.file("nope.h5")); }, {"nope.h5", "No such file"});
  expect_error<IOError>([&] { io::load_checkpoint(dir.path()); }, {"not a regular file"});
  write_bytes(dir.file("notes.h5"), "this is a text file, not a checkpoint\n");
  expect_error<IOError>([&] { io::load_checkpoint(dir.file("notes.h5")); }, {"notes.h5", "not HDF5"});
  write_bytes(dir.file("empty.h5"), "");
  expect_error<IOError>([&] { io::load_checkpoint(dir.file("empty.h5")); }, {"empty.h5"});
}

TEST(CheckpointFiles, TruncatedFilesAreClearErrors) {
  TempDir dir;
  io::save_checkpoint(dir.file("ck.h5"), sample_checkpoint());
  const std::string bytes = read_bytes(dir.file("ck.h5"));
  for (size_t n : {size_t(8), size_t(512), bytes.size() / 2, bytes.size() - 1}) {
    write_bytes(dir.file("cut.h5"), bytes.substr(0, n));
    expect_error<IOError>([&] { io::load_checkpoint(dir.file("cut.h5")); }, {"cut.h5"});
    expect_error<IOError>([&] { io::inspect_checkpoint(dir.file("cut.h5")); }, {"cut.h5"});
  }
}

TEST(CheckpointFiles, CorruptDataFailsItsChecksum) {
  TempDir dir;
  io::save_checkpoint(dir.file("ck.h5"), sample_checkpoint());
  std::string bytes = read_bytes(dir.file("ck.h5"));
  // fc.weight holds 1, 2, ..., 12 (f32): find those bytes and flip one.
  const std::vector<float> one_two = {1.0f, 2.0f, 3.0f};
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(one_two.data()), 12));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] = static_cast<char>(bytes[at + 5] ^ 0x10);
  write_bytes(dir.file("bad.h5"), bytes);
  expect_error<IOError>([&] { io::load_checkpoint(dir.file("bad.h5")); }, {"/model/fc.weight", "checksum"});
}

// Flipping bytes anywhere in the file: a load either succeeds or throws a tessera error (HDF5's
// metadata and our data are checksummed), never crashes.
TEST(CheckpointFiles, CorruptBytesNeverCrash) {
  TempDir dir;
  io::save_checkpoint(dir.file("ck.h5"), sample_checkpoint());
  const std::string bytes = read_bytes(dir.file("ck.h5"));
  // ~600 positions; TESSERA_CORRUPT_EVERY_BYTE=1 tries every byte (about a minute).
  const size_t stride = std::getenv("TESSERA_CORRUPT_EVERY_BYTE") ? 1 : bytes.size() / 600 + 1;
  int failures = 0;
  for (size_t i = 0; i < bytes.size(); i += stride) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(~bad[i]);
    write_bytes(dir.file("bad.h5"), bad);
    try {
      io::load_checkpoint(dir.file("bad.h5"));
    } catch (const Error&) {
      ++failures;
    }
  }
  EXPECT_GT(failures, 0);
}

TEST(CheckpointFiles, ForeignHdf5FilesAreClearErrors) {
  TempDir dir;
  const std::string path = dir.file("other.h5");
  auto write = [&](const std::function<void(io::H5File&)>& fill) {
    io::H5File f = io::H5File::create(path);
    fill(f);
    f.close();
  };
  write([](io::H5File& f) { f.write_tensor("/weights/layer1", zeros({2, 2})); });
  expect_error<IOError>([&] { io::load_checkpoint(path); }, {"other.h5", "not a tessera checkpoint", "format"});
  write([](io::H5File& f) { f.set_attr("/", "format", "keras"); });
  expect_error<IOError>([&] { io::load_checkpoint(path); }, {"format is 'keras'", "tessera-checkpoint"});
  write([](io::H5File& f) {
    f.set_attr("/", "format", "tessera-checkpoint");
    f.set_attr("/", "format_version", int64_t(2));
  });
  expect_error<IOError>([&] { io::load_checkpoint(path); }, {"format_version 2", "reads format_version 1"});
  write([](io::H5File& f) {
    f.set_attr("/", "format", "tessera-checkpoint");
    f.set_attr("/", "format_version", int64_t(1));
  });
  expect_error<IOError>([&] { io::load_checkpoint(path); }, {"/model", "missing group"});
  // A dataset whose dtype attribute does not match its stored type.
  {
    io::H5File f = io::H5File::create(dir.file("lie.h5"));
    f.write_tensor("/x", zeros({2}, DType::f64));
    f.set_attr("/x", "dtype", "f32");
    f.close();
    expect_error<IOError>([&] { io::H5File::open(dir.file("lie.h5")).read_tensor("/x"); },
                          {"/x", "says f32", "8-byte float"});
  }
}

// ---- atomic saves ----

TEST(CheckpointFiles, SaveReplacesAtomically) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::CheckpointData d = sample_checkpoint();
  io::save_checkpoint(path, d);
  d.trainer.step = 8;
  io::save_checkpoint(path, d);
  EXPECT_EQ(io::load_checkpoint(path).trainer.step, 8);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"ck.h5"});  // no temporary file left
}

TEST(CheckpointFiles, SaveIntoMissingFolderFails) {
  TempDir dir;
  const std::string path = dir.file("no/such/folder/ck.h5");
  expect_error<IOError>([&] { io::save_checkpoint(path, sample_checkpoint()); }, {path, "No such file or directory"});
}

TEST(CheckpointFiles, SaveOverAFolderFailsAndCleansUp) {
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("ck.h5").c_str(), 0755), 0);
  expect_error<IOError>([&] { io::save_checkpoint(dir.file("ck.h5"), sample_checkpoint()); }, {"ck.h5", "rename"});
  EXPECT_EQ(dir.files(), std::vector<std::string>{"ck.h5"});
}

TEST(CheckpointFiles, SaveIntoReadOnlyFolderKeepsPreviousCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::save_checkpoint(path, sample_checkpoint());
  const std::string before = read_bytes(path);
  ASSERT_EQ(::chmod(dir.path().c_str(), 0555), 0);
  if (::access(dir.path().c_str(), W_OK) == 0) {
    ::chmod(dir.path().c_str(), 0755);
    GTEST_SKIP() << "the folder stays writable after chmod 0555 (running as root?)";
  }
  io::CheckpointData d = sample_checkpoint();
  d.trainer.step = 99;
  expect_error<IOError>([&] { io::save_checkpoint(path, d); }, {path, "Permission denied"});
  ::chmod(dir.path().c_str(), 0755);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"ck.h5"});
}

// A write that fails half way (file size limit: what a full disk looks like to the writer).
TEST(CheckpointFiles, FailedWriteKeepsPreviousCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::save_checkpoint(path, sample_checkpoint());
  const std::string before = read_bytes(path);

  io::CheckpointData big = sample_checkpoint();
  big.model["big"] = testing::raw_tensor({512, 1024}, DType::f32, 9);  // 2 MiB
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < (1 << 20)) GTEST_SKIP() << "file size limit already set";
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of the signal
  rlimit small = saved;
  small.rlim_cur = 256 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  std::string what;
  try {
    io::save_checkpoint(path, big);
  } catch (const IOError& e) {
    threw = true;
    what = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_NE(what.find(path), std::string::npos) << what;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"ck.h5"});
}

TEST(CheckpointFiles, KeepLastRetainsNumberedCopies) {
  TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  for (const char* other : {"ckpt.best.h5", "other.10.h5", "ckpt.5.txt"}) write_bytes(dir.file(other), "x");
  io::CheckpointData d = sample_checkpoint();
  for (int64_t step : {10, 20, 30, 40}) {
    d.trainer.step = step;
    io::save_checkpoint(path, d, /*keep_last=*/2);
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"ckpt.30.h5", "ckpt.40.h5", "ckpt.5.txt", "ckpt.best.h5",
                                                   "ckpt.h5", "other.10.h5"}));
  EXPECT_EQ(io::load_checkpoint(path).trainer.step, 40);
  EXPECT_EQ(io::load_checkpoint(dir.file("ckpt.30.h5")).trainer.step, 30);
  EXPECT_EQ(read_bytes(dir.file("ckpt.40.h5")), read_bytes(path));
  // keep_last = 0: only the main file changes.
  d.trainer.step = 50;
  io::save_checkpoint(path, d);
  EXPECT_EQ(io::load_checkpoint(path).trainer.step, 50);
  EXPECT_EQ(io::load_checkpoint(dir.file("ckpt.40.h5")).trainer.step, 40);
  EXPECT_EQ(dir.files().size(), 6u);
  expect_error<ValueError>([&] { io::save_checkpoint(path, d, -1); }, {"keep_last"});
}

// ---- other readers ----

// Output and exit status of a shell command.
std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

io::CheckpointData tool_checkpoint() {
  io::CheckpointData d = sample_checkpoint();
  d.model["half"] = from_vector(std::vector<float>{1.0f, -2.5f, 0.15625f}, {3}, DType::bf16);
  return d;
}

TEST(CheckpointFiles, ReadableByH5dump) {
  int status = 0;
  run("h5dump --version", &status);
  if (status != 0) GTEST_SKIP() << "h5dump is not installed (Debian: hdf5-tools)";
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::save_checkpoint(path, tool_checkpoint());
  const std::string header = run("h5dump -H " + path, &status);
  ASSERT_EQ(status, 0) << header;
  for (const char* s : {"GROUP \"model\"", "DATASET \"fc.weight\"", "DATASET \"half\"", "GROUP \"layout\"",
                        "GROUP \"sparse\"", "DATASET \"block_row\"", "GROUP \"optimizer\"", "GROUP \"fc.weight\"",
                        "DATASET \"exp_avg\"", "GROUP \"trainer\"", "DATASET \"vocabulary\"", "GROUP \"rng\"",
                        "GROUP \"data\"", "ATTRIBUTE \"format\"", "ATTRIBUTE \"format_version\"",
                        "ATTRIBUTE \"framework_version\"", "ATTRIBUTE \"config\"", "ATTRIBUTE \"dtype\"",
                        "H5T_IEEE_F32LE", "H5T_STD_U16LE", "DATASPACE  SIMPLE { ( 3, 4 ) / ( 3, 4 ) }"})
    EXPECT_NE(header.find(s), std::string::npos) << s << "\n" << header;
  const std::string data = run("h5dump -d /model/fc.weight " + path, &status);
  ASSERT_EQ(status, 0) << data;
  EXPECT_NE(data.find("(0,0): 1, 2, 3, 4,"), std::string::npos) << data;
  EXPECT_NE(data.find("(2,0): 9, 10, 11, 12"), std::string::npos) << data;
  const std::string attr = run("h5dump -a /format " + path, &status);
  EXPECT_NE(attr.find("\"tessera-checkpoint\""), std::string::npos) << attr;
}

TEST(CheckpointFiles, ReadableByH5py) {
  int status = 0;
  run("/usr/bin/python3 -c 'import h5py'", &status);
  if (status != 0) GTEST_SKIP() << "python3 with h5py is not installed (Debian: python3-h5py)";
  TempDir dir;
  const std::string path = dir.file("ck.h5");
  io::save_checkpoint(path, tool_checkpoint());
  write_bytes(dir.file("check.py"), R"(import json, sys
import h5py, numpy as np
def s(v):  # fixed-length string attributes read as bytes
    return v.decode() if isinstance(v, bytes) else v
f = h5py.File(sys.argv[1], "r")
a = f.attrs
assert s(a["format"]) == "tessera-checkpoint", a["format"]
assert int(a["format_version"]) == 1
assert s(a["framework_version"]) == sys.argv[2], a["framework_version"]
assert json.loads(s(a["config"]))["model"]["hidden"] == 32
w = f["model/fc.weight"]
assert w.dtype == np.float32 and w.shape == (3, 4) and s(w.attrs["dtype"]) == "f32"
assert (w[...] == np.arange(1, 13, dtype=np.float32).reshape(3, 4)).all(), w[...]
h = f["model/half"]
assert h.dtype == np.uint16 and s(h.attrs["dtype"]) == "bf16", (h.dtype, h.attrs["dtype"])
assert list((h[...].astype(np.uint32) << 16).view(np.float32)) == [1.0, -2.5, 0.15625], h[...]
l = f["layout/sparse"]
assert [int(l.attrs[k]) for k in ("block_size", "in_features", "out_features", "nnz")] == [8, 16, 24, 4]
assert list(l["block_row"][...]) == [0, 0, 1, 1] and list(l["block_col"][...]) == [0, 2, 0, 2]
assert l["block_row"].dtype == np.int32
o = f["optimizer"]
assert s(o.attrs["type"]) == "adamw" and o.attrs["step"] == 7 and o.attrs["beta2"] == 0.999
assert o["fc.weight/exp_avg"].shape == (3, 4) and o["fc.bias/exp_avg"].shape == (4,)
t = f["trainer"]
assert t.attrs["step"] == 7 and t.attrs["tokens_seen"] == 123456789012 and t.attrs["loss_scale"] == 32768.0
assert t.attrs["data.epoch"] == 2 and s(t.attrs["run"]) == "tiny run"
assert bytes(t["vocabulary"][...]) == b"ab\x00c\xff\n"
assert list(t["data.order"][...]) == [3, 1, 2, 0]
assert f["rng/data"].attrs["seed"] == 42 and f["rng/data"].attrs["offset"] == 1000
assert f["rng/dropout"].attrs["seed"] == 2**64 - 1
print("h5py ok")
)");
  const std::string out =
      run("/usr/bin/python3 " + dir.file("check.py") + " " + path + " " + io::framework_version(), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("h5py ok"), std::string::npos) << out;

  // Edited with h5py (variable-length string attributes there): tessera still reads it.
  const std::string edit = run("/usr/bin/python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1], \"r+\"); "
                               "f.attrs[\"config\"] = \"{\\\"edited\\\": 1}\"; "
                               "f[\"trainer\"].attrs[\"note\"] = \"from h5py\"' " + path,
                               &status);
  ASSERT_EQ(status, 0) << edit;
  const io::CheckpointData back = io::load_checkpoint(path);
  EXPECT_EQ(back.config, "{\"edited\": 1}");
  EXPECT_EQ(back.trainer.strings.at("note"), "from h5py");
  EXPECT_EQ(back.trainer.strings.at("run"), "tiny run");
}

}  // namespace
}  // namespace tessera
