// Checkpoints: everything needed to resume training, in one HDF5 file (readable by h5dump, h5py).
//
//   io::CheckpointData ck = io::capture(model, &opt);   // parameters, layouts, optimizer
//   ck.config = config_json;                           // (models/model_checkpoint.h)
//   ck.trainer.step = step;
//   ck.rng["data"] = data_gen.state();
//   io::save_checkpoint("run/ckpt.h5", ck, /*keep_last=*/3);
//   ...
//   io::CheckpointData back = io::restore("run/ckpt.h5", model, &opt);   // validates, then copies
//   data_gen.set_state(back.rng.at("data"));
//
// File layout (format_version 1). Tensors are datasets with a string attribute dtype ("f32",
// "bf16", ...; bf16/f16 stored as uint16 bit patterns, see core/io/hdf5_file.h). Every string
// attribute (format, framework_version, config, kind, generator, dtype, the optimizer type, the
// trainer strings) is written as one kind, a fixed-length UTF-8 string (h5py reads it as bytes;
// core/io/hdf5_file.h says why not variable-length); variable-length ones (a file edited with
// h5py) are read too. There are no string datasets (the vocabulary is u8 bytes).
//   /                       attrs format="tessera-checkpoint", format_version=1 (int64),
//                                 framework_version (e.g. "0.1.0"), config (JSON string)
//   /model/<param path>     one dataset per parameter, named by its dotted path ("blocks.0.fc.weight")
//   /layout/<module path>   group per layout, of one of two kinds (attribute kind, a string):
//     kind "block" (or no kind: files before attention layouts)  a BlockSparseLinear's BlockLayout:
//                           attrs block_size, in_features, out_features, nnz (int64); datasets
//                           block_row, block_col: i32 [nnz], the stored blocks in BlockLayout order
//                           (row-major by block row, then column)
//     kind "attention"      a MultiHeadAttention's AttentionLayout (nb = seq_len / block_size):
//                           attrs seq_len, block_size, heads, nnz (int64), generator (its kind(),
//                           e.g. "strided(stride_blocks=2)"; optional when reading); dataset
//                           mask: u8 [heads, nb, nb], mask[h, i, j] = 1 when head h's query block
//                           i attends to key block j (0 or 1; causal: zero above the diagonal, the
//                           diagonal kept; nnz the count of ones). The mask is the layout;
//                           generator only names it (a loaded layout gets that kind() back when
//                           the generator reproduces the mask, else "from_masks"). In h5py,
//                           f["layout/blocks.0.attn/mask"][h] is head h's nb x nb grid.
//   /optimizer              (only when an optimizer was saved) attrs type ("adamw", "sgd"), step
//                           (int64), and each hyperparameter (lr, beta1, ...) as a double
//   /optimizer/<param path>/<state>   state tensors, e.g. /optimizer/fc.weight/exp_avg
//   /trainer                attrs step, tokens_seen (int64), loss_scale (double), and the
//                           TrainerState extras (int64 / double / string attributes);
//                           datasets vocabulary (u8 [n], when not empty) and the extra tensors
//   /rng/<name>             group per generator; attrs seed, offset (uint64)
// Names (parameter and module paths, state names, extras) must be non-empty, without '/', and
// not "." or "..". Readers ignore other root groups and attributes (room for additions within
// format_version 1); a layout change that old readers would misread bumps format_version.
// (Attention layouts came within version 1: older readers reject a file that has one with an
// IOError, as a block layout without in_features; they cannot misread it.)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/graph/named_param.h"
#include "core/io/hdf5_file.h"
#include "core/random.h"
#include "core/sparse/attention_layout.h"
#include "core/sparse/block_layout.h"
#include "core/tensor.h"

namespace tessera {
namespace io {

/// Value of the root attribute format, and the layout version this tessera writes and reads.
constexpr const char* kCheckpointFormat = "tessera-checkpoint";
constexpr int64_t kCheckpointFormatVersion = 1;

/// The tessera version written as framework_version ("0.1.0").
const char* framework_version();

/// An optimizer's state. Empty type: none (no /optimizer group).
struct OptimizerState {
  std::string type;                                             ///< "adamw", "sgd", ...
  int64_t step = 0;                                             ///< steps taken
  std::map<std::string, double> hyperparameters;                ///< lr, betas, ... (attributes)
  std::map<std::string, std::map<std::string, Tensor>> state;   ///< param path -> state name -> tensor
};

/// Where training stands. step, tokens_seen and loss_scale always exist; the rest is free-form
/// (e.g. the data sampler's cursor as ints {"data.epoch", "data.position"}).
struct TrainerState {
  int64_t step = 0;
  int64_t tokens_seen = 0;
  double loss_scale = 1.0;
  std::string vocabulary;                       ///< raw bytes (u8 dataset /trainer/vocabulary)
  std::map<std::string, int64_t> ints;          ///< /trainer attributes
  std::map<std::string, double> reals;          ///< /trainer attributes
  std::map<std::string, std::string> strings;   ///< /trainer attributes (no NUL bytes)
  std::map<std::string, Tensor> tensors;        ///< /trainer/<name> datasets
};

/// The contents of a checkpoint.
struct CheckpointData {
  std::string config = "{}";                    ///< JSON of the model and training configuration
  std::map<std::string, Tensor> model;          ///< parameter path -> tensor
  std::map<std::string, LayoutPtr> layouts;     ///< module path -> block layout
  /// module path -> attention layout (the same /layout group, kind "attention"; a path names a
  /// block layout or an attention layout, not both)
  std::map<std::string, AttentionLayoutPtr> attention_layouts;
  OptimizerState optimizer;
  TrainerState trainer;
  std::map<std::string, Generator::State> rng;  ///< generator name -> state
  std::string framework_version;                ///< set by load_checkpoint: who wrote the file
};

/// Writes `data` to `path` atomically (core/io/atomic_file.h): on failure an IOError names the
/// path and the reason, and an existing file at `path` is untouched. With keep_last > 0 the
/// checkpoint is also kept as `<stem>.<trainer.step><ext>` next to `path` ("run/ckpt.h5" at step
/// 1200: "run/ckpt.1200.h5"; a hard link, so it costs no space) and, of the files named
/// `<stem>.<digits><ext>`, all but the keep_last highest steps are deleted. keep_last = 0 keeps
/// only `path` and leaves numbered files alone. ValueError for bad names, a null layout, a module
/// path with both a block and an attention layout. CUDA tensors are written from host copies.
void save_checkpoint(const std::string& path, const CheckpointData& data, int keep_last = 0);

/// Which parts of a checkpoint load_checkpoint reads besides the root attributes, the layouts,
/// /model, the /trainer attributes with the vocabulary, and /rng (always read).
struct CheckpointParts {
  bool optimizer = true;        ///< /optimizer: type, step, hyperparameters and state tensors
  bool trainer_tensors = true;  ///< the /trainer datasets other than the vocabulary (TrainerState::tensors)
};

/// Reads a checkpoint (the parts asked for; all by default). IOError for a missing, non-HDF5,
/// truncated or corrupt file, a file that is not a tessera checkpoint or has another
/// format_version, and any missing or malformed part (naming the dataset or attribute path).
CheckpointData load_checkpoint(const std::string& path, const CheckpointParts& parts = {});

/// Names, shapes and dtypes of every tensor under /model, /layout, /optimizer and /trainer
/// ("/model/fc.weight", ...), read without loading data (after load_checkpoint's format checks).
std::map<std::string, DatasetInfo> inspect_checkpoint(const std::string& path);

/// A tensor a restore fills: `target` receives dataset `dataset` ("/model/fc.weight").
struct RestoreTarget {
  std::string dataset;
  Tensor target;
};

/// Restores tensors from `path` in two phases. First every target is checked against the file:
/// the dataset must exist with the target's shape and dtype, and with `strict`, every dataset
/// under the groups in `strict_groups` (e.g. "/model") must be a target. A problem throws one
/// error naming the dataset path and both shapes/dtypes ("dataset /model/fc.weight is f32[3, 4],
/// expected f32[4, 4]"; plus how many further problems there are): ShapeError for a shape,
/// DTypeError for a dtype, IOError for a missing or unexpected dataset. Then all data is read,
/// and only when every read succeeded is it copied into the targets (CPU tensors).
void restore_tensors(const std::string& path, const std::vector<RestoreTarget>& targets,
                     const std::vector<std::string>& strict_groups = {});

/// restore_tensors for parameters by name: /model/<name> into each tensor; strict: /model must
/// hold nothing else.
void restore_params(const std::string& path, const std::vector<graph::NamedParam>& params, bool strict = true);

namespace detail {
/// Phase one of restore_tensors (the checks) against an inspect_checkpoint() index.
void check_targets(const std::string& path, const std::map<std::string, DatasetInfo>& index,
                   const std::vector<RestoreTarget>& targets, const std::vector<std::string>& strict_groups);
/// "f32[3, 4]".
std::string meta_str(DType dtype, const Shape& shape);
}  // namespace detail

}  // namespace io
}  // namespace tessera
