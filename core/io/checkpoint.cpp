#include "core/io/checkpoint.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <regex>
#include <utility>
#include <vector>

#include "core/io/atomic_file.h"

#ifndef TESSERA_VERSION_STRING
#error "TESSERA_VERSION_STRING (the project version) must be defined by the build"
#endif

namespace tessera {
namespace io {

const char* framework_version() { return TESSERA_VERSION_STRING; }

namespace {

const char* const kTrainerAttrs[] = {"step", "tokens_seen", "loss_scale"};

// Values of the attribute kind of a /layout/<module path> group (none: a block layout).
const char* const kBlockLayoutKind = "block";
const char* const kAttentionLayoutKind = "attention";

void check_name(const std::string& name, const char* what) {
  TS_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", ValueError,
           "checkpoint: " << what << " name '" << name << "' must be non-empty, without '/', and not '.' or '..'");
}

bool is_reserved_trainer_name(const std::string& name) {
  return std::find(std::begin(kTrainerAttrs), std::end(kTrainerAttrs), name) != std::end(kTrainerAttrs);
}

// ---- writing ----

void write_layout(H5File& f, const std::string& name, const BlockLayout& l) {
  const std::string g = "/layout/" + name;
  f.create_group(g);
  f.set_attr(g, "kind", kBlockLayoutKind);
  f.set_attr(g, "block_size", static_cast<int64_t>(l.block_size()));
  f.set_attr(g, "in_features", l.in_features());
  f.set_attr(g, "out_features", l.out_features());
  f.set_attr(g, "nnz", l.nnz());
  f.write_tensor(g + "/block_row", from_vector(l.block_row(), Shape{l.nnz()}));
  f.write_tensor(g + "/block_col", from_vector(l.block_col(), Shape{l.nnz()}));
}

// Head h's block mask is mask[h] of the u8 [heads, nb, nb] dataset: row i = query block, column
// j = key block, 1 = kept.
void write_attention_layout(H5File& f, const std::string& name, const AttentionLayout& l) {
  const std::string g = "/layout/" + name;
  const int64_t heads = l.heads(), nb = l.blocks();
  f.create_group(g);
  f.set_attr(g, "kind", kAttentionLayoutKind);
  f.set_attr(g, "seq_len", l.seq_len());
  f.set_attr(g, "block_size", l.block_size());
  f.set_attr(g, "heads", heads);
  f.set_attr(g, "nnz", l.nnz());
  f.set_attr(g, "generator", l.kind());
  std::vector<uint8_t> mask;
  mask.reserve(static_cast<size_t>(heads * nb * nb));
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<uint8_t> m = l.mask(h);
    mask.insert(mask.end(), m.begin(), m.end());
  }
  f.write_tensor(g + "/mask", from_vector(mask, Shape{heads, nb, nb}));
}

void write_all(H5File& f, const CheckpointData& d) {
  f.set_attr("/", "format", kCheckpointFormat);
  f.set_attr("/", "format_version", kCheckpointFormatVersion);
  f.set_attr("/", "framework_version", framework_version());
  f.set_attr("/", "config", d.config);

  f.create_group("/model");
  for (const auto& [name, t] : d.model) {
    check_name(name, "parameter");
    f.write_tensor("/model/" + name, t);
  }
  f.create_group("/layout");
  for (const auto& [name, l] : d.layouts) {
    check_name(name, "layout");
    TS_CHECK(l != nullptr, ValueError, "checkpoint: layout '" << name << "' is null");
    write_layout(f, name, *l);
  }
  for (const auto& [name, l] : d.attention_layouts) {
    check_name(name, "attention layout");
    TS_CHECK(l != nullptr, ValueError, "checkpoint: attention layout '" << name << "' is null");
    TS_CHECK(!d.layouts.count(name), ValueError,
             "checkpoint: module path '" << name << "' has both a block layout and an attention layout");
    write_attention_layout(f, name, *l);
  }

  const OptimizerState& o = d.optimizer;
  if (!o.type.empty()) {
    f.create_group("/optimizer");
    f.set_attr("/optimizer", "type", o.type);
    f.set_attr("/optimizer", "step", o.step);
    for (const auto& [name, v] : o.hyperparameters) {
      TS_CHECK(name != "type" && name != "step", ValueError,
               "checkpoint: optimizer hyperparameter name '" << name << "' is reserved");
      f.set_attr("/optimizer", name, v);
    }
    for (const auto& [param, states] : o.state) {
      check_name(param, "optimizer parameter");
      f.create_group("/optimizer/" + param);
      for (const auto& [sname, t] : states) {
        check_name(sname, "optimizer state");
        f.write_tensor("/optimizer/" + param + "/" + sname, t);
      }
    }
  }

  const TrainerState& tr = d.trainer;
  f.create_group("/trainer");
  f.set_attr("/trainer", "step", tr.step);
  f.set_attr("/trainer", "tokens_seen", tr.tokens_seen);
  f.set_attr("/trainer", "loss_scale", tr.loss_scale);
  std::vector<std::string> extras;
  for (const auto& kv : tr.ints) extras.push_back(kv.first);
  for (const auto& kv : tr.reals) extras.push_back(kv.first);
  for (const auto& kv : tr.strings) extras.push_back(kv.first);
  std::sort(extras.begin(), extras.end());
  for (size_t i = 0; i < extras.size(); ++i) {
    check_name(extras[i], "trainer attribute");
    TS_CHECK(!is_reserved_trainer_name(extras[i]) && (i == 0 || extras[i] != extras[i - 1]), ValueError,
             "checkpoint: trainer attribute '" << extras[i] << "' is reserved or given twice");
  }
  for (const auto& [name, v] : tr.ints) f.set_attr("/trainer", name, v);
  for (const auto& [name, v] : tr.reals) f.set_attr("/trainer", name, v);
  for (const auto& [name, v] : tr.strings) f.set_attr("/trainer", name, v);
  if (!tr.vocabulary.empty()) {
    std::vector<uint8_t> bytes(tr.vocabulary.begin(), tr.vocabulary.end());
    f.write_tensor("/trainer/vocabulary", from_vector(bytes, Shape{static_cast<int64_t>(bytes.size())}));
  }
  for (const auto& [name, t] : tr.tensors) {
    check_name(name, "trainer tensor");
    TS_CHECK(name != "vocabulary", ValueError, "checkpoint: trainer tensor name 'vocabulary' is reserved");
    f.write_tensor("/trainer/" + name, t);
  }

  f.create_group("/rng");
  for (const auto& [name, s] : d.rng) {
    check_name(name, "generator");
    f.create_group("/rng/" + name);
    f.set_attr("/rng/" + name, "seed", s.seed);
    f.set_attr("/rng/" + name, "offset", s.offset);
  }
}

// ---- reading ----

[[noreturn]] void malformed(const std::string& path, const std::string& obj, const std::string& what) {
  TS_THROW(IOError, "checkpoint '" << path << "': " << obj << ": " << what);
}

H5File open_checkpoint(const std::string& path) {
  H5File f = H5File::open(path);
  TS_CHECK(f.has_attr("/", "format") && f.attr_kind("/", "format") == AttrKind::string, IOError,
           "'" << path << "' is an HDF5 file but not a tessera checkpoint (no root attribute format)");
  const std::string format = f.attr_string("/", "format");
  TS_CHECK(format == kCheckpointFormat, IOError,
           "'" << path << "' is not a tessera checkpoint: root attribute format is '" << format << "', expected '"
               << kCheckpointFormat << "'");
  const int64_t version = f.attr_int("/", "format_version");
  TS_CHECK(version == kCheckpointFormatVersion, IOError,
           "checkpoint '" << path << "' has format_version " << version << "; tessera " << framework_version()
                          << " reads format_version " << kCheckpointFormatVersion);
  for (const char* g : {"/model", "/layout", "/trainer", "/rng"})
    if (!f.is_group(g)) malformed(path, g, "missing group");
  return f;
}

// The members of group `g`, each required to be a dataset (datasets = true) or a group.
std::vector<std::string> members(const H5File& f, const std::string& g, bool datasets) {
  std::vector<std::string> names = f.list(g);
  for (const std::string& n : names) {
    const std::string p = g + "/" + n;
    if (datasets ? !f.is_dataset(p) : !f.is_group(p))
      malformed(f.path(), p, datasets ? "expected a dataset" : "expected a group");
  }
  return names;
}

LayoutPtr read_layout(const H5File& f, const std::string& g) {
  const int64_t bs = f.attr_int(g, "block_size"), in = f.attr_int(g, "in_features");
  const int64_t out = f.attr_int(g, "out_features"), nnz = f.attr_int(g, "nnz");
  const Tensor rows = f.read_tensor(g + "/block_row"), cols = f.read_tensor(g + "/block_col");
  for (const Tensor* t : {&rows, &cols})
    if (t->dtype() != DType::i32 || t->shape() != Shape{nnz})
      malformed(f.path(), g, "block_row/block_col must be i32[" + std::to_string(nnz) + "], got " +
                                 detail::meta_str(t->dtype(), t->shape()));
  if (bs <= 0 || in <= 0 || out <= 0 || in % bs || out % bs || (in / bs) * (out / bs) > (int64_t(1) << 31))
    malformed(f.path(), g, "bad sizes in=" + std::to_string(in) + " out=" + std::to_string(out) +
                               " block_size=" + std::to_string(bs));
  const int64_t R = in / bs, C = out / bs;
  std::vector<uint8_t> mask(static_cast<size_t>(R * C), 0);
  const int32_t* r = rows.data<int32_t>();
  const int32_t* c = cols.data<int32_t>();
  for (int64_t k = 0; k < nnz; ++k) {
    if (r[k] < 0 || r[k] >= R || c[k] < 0 || c[k] >= C)
      malformed(f.path(), g, "block " + std::to_string(k) + " lies outside the " + std::to_string(R) + "x" +
                                 std::to_string(C) + " block grid");
    mask[static_cast<size_t>(r[k] * C + c[k])] = 1;
  }
  LayoutPtr l;
  try {
    l = BlockLayout::from_mask(in, out, bs, mask);
  } catch (const Error& e) {
    malformed(f.path(), g, e.what());
  }
  // The stored lists must be exactly the layout's (no repeats, row-major order).
  if (l->block_row() != std::vector<int32_t>(r, r + nnz) || l->block_col() != std::vector<int32_t>(c, c + nnz))
    malformed(f.path(), g, "block lists are not in row-major order or repeat a block");
  return l;
}

// The layout that `generator` (a kind() string such as "strided(stride_blocks=2)") names, when
// calling that generator gives exactly `l`; else `l` itself (kind "from_masks"). The mask in the
// file is the layout; this only restores its name.
AttentionLayoutPtr with_generator_kind(const AttentionLayoutPtr& l, const std::string& generator) {
  const int64_t T = l->seq_len(), bs = l->block_size(), heads = l->heads();
  static const std::regex local(R"(local_window\(window_blocks=(\d{1,9})\))");
  static const std::regex strided(R"(strided\(stride_blocks=(\d{1,9})\))");
  static const std::regex fixed(R"(fixed\(stride_blocks=(\d{1,9}), summary_blocks=(\d{1,9})\))");
  std::smatch m;
  auto arg = [&](size_t k) { return std::stoll(m[k].str()); };
  AttentionLayoutPtr named;
  if (generator.size() > 100) return l;  // no generator name is this long
  try {
    if (generator == "dense_causal") {
      named = AttentionLayout::dense_causal(T, bs, heads);
    } else if (std::regex_match(generator, m, local)) {
      named = AttentionLayout::local_window(T, bs, heads, arg(1));
    } else if (std::regex_match(generator, m, strided)) {
      named = AttentionLayout::strided(T, bs, heads, arg(1));
    } else if (std::regex_match(generator, m, fixed)) {
      named = AttentionLayout::fixed(T, bs, heads, arg(1), arg(2));
    }
  } catch (const Error&) {
    named = nullptr;  // arguments the generator rejects: not a name of this layout
  }
  return named && named->kind() == generator && *named == *l ? named : l;
}

// An attention layout group (kind "attention"): checked against its attributes before building.
AttentionLayoutPtr read_attention_layout(const H5File& f, const std::string& g) {
  const int64_t T = f.attr_int(g, "seq_len"), bs = f.attr_int(g, "block_size");
  const int64_t heads = f.attr_int(g, "heads"), nnz = f.attr_int(g, "nnz");
  const std::string generator = f.has_attr(g, "generator") ? f.attr_string(g, "generator") : "from_masks";
  if (!BlockLayout::valid_block_size(bs) || T <= 0 || T % bs != 0 || heads < 1)
    malformed(f.path(), g, "bad sizes seq_len=" + std::to_string(T) + " block_size=" + std::to_string(bs) +
                               " heads=" + std::to_string(heads) +
                               " (block_size 8, 16, 32 or 64 dividing seq_len, heads >= 1)");
  const int64_t nb = T / bs;
  const std::string mp = g + "/mask";
  if (!f.is_dataset(mp)) malformed(f.path(), mp, f.exists(mp) ? "expected a dataset" : "missing dataset");
  const DatasetInfo info = f.tensor_info(mp);
  const Shape& s = info.shape;
  if (info.dtype != DType::u8 || s.ndim() != 3 || s[0] != heads || s[1] != nb || s[2] != nb)
    malformed(f.path(), mp, "expected u8[" + std::to_string(heads) + ", " + std::to_string(nb) + ", " +
                                std::to_string(nb) + "] (heads, query blocks, key blocks), got " +
                                detail::meta_str(info.dtype, s));
  const Tensor mask = f.read_tensor(mp);
  const uint8_t* p = mask.data<uint8_t>();
  std::vector<std::vector<uint8_t>> masks(static_cast<size_t>(heads));
  int64_t kept = 0;
  for (int64_t h = 0; h < heads; ++h) {
    masks[h].assign(p + h * nb * nb, p + (h + 1) * nb * nb);
    for (int64_t k = 0; k < nb * nb; ++k) {
      const uint8_t v = masks[h][k];
      if (v > 1)
        malformed(f.path(), mp,
                  "entry [" + std::to_string(h) + ", " + std::to_string(k / nb) + ", " + std::to_string(k % nb) +
                      "] is " + std::to_string(v) + ", expected 0 or 1");
      kept += v;
    }
  }
  if (kept != nnz)
    malformed(f.path(), mp,
              "keeps " + std::to_string(kept) + " blocks, attribute nnz says " + std::to_string(nnz));
  AttentionLayoutPtr l;
  try {
    l = AttentionLayout::from_masks(T, bs, masks);  // causal, diagonal kept
  } catch (const Error& e) {
    malformed(f.path(), mp, e.what());
  }
  return with_generator_kind(l, generator);
}

void read_layouts(const H5File& f, CheckpointData& d) {
  for (const std::string& n : members(f, "/layout", false)) {
    const std::string g = "/layout/" + n;
    const std::string kind = f.has_attr(g, "kind") ? f.attr_string(g, "kind") : kBlockLayoutKind;
    if (kind == kBlockLayoutKind) {
      d.layouts[n] = read_layout(f, g);
    } else if (kind == kAttentionLayoutKind) {
      d.attention_layouts[n] = read_attention_layout(f, g);
    } else {
      malformed(f.path(), g, "attribute kind is '" + kind + "', expected 'block' or 'attention'");
    }
  }
}

void read_trainer(const H5File& f, TrainerState& tr, bool tensors) {
  tr.step = f.attr_int("/trainer", "step");
  tr.tokens_seen = f.attr_int("/trainer", "tokens_seen");
  tr.loss_scale = f.attr_double("/trainer", "loss_scale");
  for (const std::string& a : f.attr_names("/trainer")) {
    if (is_reserved_trainer_name(a)) continue;
    switch (f.attr_kind("/trainer", a)) {
      case AttrKind::integer: tr.ints[a] = f.attr_int("/trainer", a); break;
      case AttrKind::real: tr.reals[a] = f.attr_double("/trainer", a); break;
      case AttrKind::string: tr.strings[a] = f.attr_string("/trainer", a); break;
      default: malformed(f.path(), "/trainer", "attribute '" + a + "' is not an integer, number or string");
    }
  }
  for (const std::string& n : members(f, "/trainer", true)) {
    if (n != "vocabulary" && !tensors) continue;
    Tensor t = f.read_tensor("/trainer/" + n);
    if (n != "vocabulary") {
      tr.tensors[n] = t;
      continue;
    }
    if (t.dtype() != DType::u8 || t.dim() != 1)
      malformed(f.path(), "/trainer/vocabulary", "expected u8[n], got " + detail::meta_str(t.dtype(), t.shape()));
    const char* p = static_cast<const char*>(t.data_ptr());
    tr.vocabulary.assign(p, p + t.numel());
  }
}

void read_all(const H5File& f, CheckpointData& d, const CheckpointParts& parts) {
  d.config = f.attr_string("/", "config");
  d.framework_version = f.attr_string("/", "framework_version");
  for (const std::string& n : members(f, "/model", true)) d.model[n] = f.read_tensor("/model/" + n);
  read_layouts(f, d);
  if (parts.optimizer && f.exists("/optimizer")) {
    OptimizerState& o = d.optimizer;
    o.type = f.attr_string("/optimizer", "type");
    o.step = f.attr_int("/optimizer", "step");
    for (const std::string& a : f.attr_names("/optimizer"))
      if (a != "type" && a != "step") o.hyperparameters[a] = f.attr_double("/optimizer", a);
    for (const std::string& p : members(f, "/optimizer", false)) {
      auto& states = o.state[p];
      for (const std::string& s : members(f, "/optimizer/" + p, true))
        states[s] = f.read_tensor("/optimizer/" + p + "/" + s);
    }
  }
  read_trainer(f, d.trainer, parts.trainer_tensors);
  for (const std::string& n : members(f, "/rng", false))
    d.rng[n] = Generator::State{f.attr_uint("/rng/" + n, "seed"), f.attr_uint("/rng/" + n, "offset")};
}

void index_group(const H5File& f, const std::string& g, std::map<std::string, DatasetInfo>& out) {
  for (const std::string& n : f.list(g)) {
    const std::string p = g + "/" + n;
    if (f.is_group(p)) {
      index_group(f, p, out);
    } else if (f.is_dataset(p)) {
      out[p] = f.tensor_info(p);
    }
  }
}

// ---- keep_last ----

// "run/ckpt.h5" -> {"run", "ckpt", ".h5"}.
struct NameParts {
  std::string dir, stem, ext;
};
NameParts split_name(const std::string& path) {
  NameParts p;
  p.dir = parent_dir(path);
  const size_t slash = path.rfind('/');
  const std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = file.rfind('.');
  p.stem = dot == std::string::npos || dot == 0 ? file : file.substr(0, dot);
  p.ext = dot == std::string::npos || dot == 0 ? "" : file.substr(dot);
  return p;
}

// Deletes the numbered copies `<stem>.<digits><ext>` beyond the keep_last highest steps.
void prune_numbered(const std::string& path, int keep_last) {
  const NameParts p = split_name(path);
  std::vector<std::pair<int64_t, std::string>> found;
  DIR* dir = ::opendir(p.dir.c_str());
  TS_CHECK(dir != nullptr, IOError,
           "saved '" << path << "', but cannot list '" << p.dir
                     << "' to prune old checkpoints: " << std::strerror(errno));
  while (const dirent* e = ::readdir(dir)) {
    const std::string n = e->d_name;
    const size_t lo = p.stem.size() + 1;
    if (n.size() <= lo + p.ext.size() || n.compare(0, lo, p.stem + ".") != 0 ||
        n.compare(n.size() - p.ext.size(), p.ext.size(), p.ext) != 0)
      continue;
    const std::string digits = n.substr(lo, n.size() - lo - p.ext.size());
    if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    found.push_back({std::stoll(digits), n});
  }
  ::closedir(dir);
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep_last); i < found.size(); ++i) {
    const std::string victim = (p.dir == "/" ? "" : p.dir) + "/" + found[i].second;
    TS_CHECK(::unlink(victim.c_str()) == 0 || errno == ENOENT, IOError,
             "saved '" << path << "', but cannot delete the old checkpoint '" << victim
                       << "': " << std::strerror(errno));
  }
}

// Bytes of tensor data in a checkpoint (the file is a little larger).
size_t payload_bytes(const CheckpointData& d) {
  size_t n = d.config.size() + d.trainer.vocabulary.size();
  for (const auto& kv : d.model) n += kv.second.defined() ? kv.second.nbytes() : 0;
  for (const auto& p : d.optimizer.state)
    for (const auto& kv : p.second) n += kv.second.defined() ? kv.second.nbytes() : 0;
  for (const auto& kv : d.trainer.tensors) n += kv.second.defined() ? kv.second.nbytes() : 0;
  for (const auto& kv : d.attention_layouts)
    if (kv.second) n += static_cast<size_t>(kv.second->heads() * kv.second->blocks() * kv.second->blocks());
  return n;
}

}  // namespace

std::string detail::meta_str(DType dtype, const Shape& shape) { return std::string(dtype_name(dtype)) + shape.str(); }

void save_checkpoint(const std::string& path, const CheckpointData& data, int keep_last) {
  TS_CHECK(keep_last >= 0, ValueError, "save_checkpoint: keep_last must be >= 0, got " << keep_last);
  TS_CHECK(keep_last == 0 || data.trainer.step >= 0, ValueError,
           "save_checkpoint: keep_last numbers copies by trainer.step, which is " << data.trainer.step);
  std::string numbered;
  if (keep_last > 0) {
    const NameParts p = split_name(path);
    numbered = (p.dir == "." && path.find('/') == std::string::npos ? "" : p.dir + "/") + p.stem + "." +
               std::to_string(data.trainer.step) + p.ext;
  }
  atomic_write(
      path,
      [&](const std::string& tmp) {
        std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
        // Built in memory, written by us: a failed write (full disk) cannot wedge HDF5.
        H5File f = H5File::create_in_memory(tmp, payload_bytes(data));
        write_all(f, data);
        f.close_into(tmp);
      },
      numbered);
  if (keep_last > 0) prune_numbered(path, keep_last);
}

CheckpointData load_checkpoint(const std::string& path, const CheckpointParts& parts) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5File f = open_checkpoint(path);
  CheckpointData d;
  read_all(f, d, parts);
  return d;
}

std::map<std::string, DatasetInfo> inspect_checkpoint(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5File f = open_checkpoint(path);
  std::map<std::string, DatasetInfo> index;
  for (const char* g : {"/model", "/layout", "/optimizer", "/trainer"})
    if (f.exists(g)) index_group(f, g, index);
  return index;
}

}  // namespace io
}  // namespace tessera
