// inspect: print what a tessera checkpoint (core/io/checkpoint.h) holds.
//
//   inspect CKPT.h5
//
// Prints the file's format and version, the config (pretty JSON), the trainer's step and
// scalars, the optimizer, the RNG states, and a table of the parameters (name, shape, dtype,
// numel; for the weight of a block-sparse layer also its layout's density and block size, from
// /layout/<module path>), with totals, then every layout (when there are any: block and attention),
// one line per module with its real density (models::format_layout_report: stored / all blocks;
// for attention, kept / causal blocks), flagged when a sparse kind keeps every block, e.g.
//   blocks.0.attn  attention local_window(window_blocks=2)  T=64 bs=8 heads=2  30/72 causal blocks,
//                  density 0.417 of causal blocks   (one line)
// and last whether models::load_model rebuilds the model ("char_lstm, rebuilt by
// models::load_model: N parameters, vocabulary V", or "not rebuilt: <why>").
// A missing, corrupt or non-checkpoint file is one line on stderr and exit status 1; a usage
// error exits with 2.
#include <tessera/tessera.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

using namespace tessera;

namespace {

// "blocks.0.fc.weight" -> module "blocks.0.fc", leaf "weight"; a root parameter's module is "(root)".
std::pair<std::string, std::string> split_param(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {io::kRootModulePath, name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

std::string human_bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) n /= 1024, ++u;
  std::ostringstream s;
  s << std::fixed << std::setprecision(u == 0 ? 0 : 2) << n << " " << units[u];
  return s.str();
}

std::string percent(double f) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << 100 * f << "%";
  return s.str();
}

void print_header(const std::string& path, const io::CheckpointData& ck) {
  std::string format;
  int64_t version = 0;
  {
    // load_checkpoint has checked these; read them back as the file states them.
    std::lock_guard<std::recursive_mutex> lock(io::hdf5_mutex());
    io::H5File f = io::H5File::open(path);
    format = f.attr_string("/", "format");
    version = f.attr_int("/", "format_version");
  }
  std::cout << "checkpoint " << path << "\n"
            << "  format " << format << ", version " << version << ", written by tessera "
            << ck.framework_version << "\n";
}

void print_config(const std::string& config) {
  const nlohmann::json j = nlohmann::json::parse(config, nullptr, /*allow_exceptions=*/false);
  std::cout << "config\n";
  std::istringstream lines(j.is_discarded() ? config + "   (not valid JSON)" : j.dump(2));
  for (std::string line; std::getline(lines, line);) std::cout << "  " << line << "\n";
}

void print_trainer(const io::TrainerState& t) {
  std::cout << "trainer\n  step " << t.step << ", tokens_seen " << t.tokens_seen << ", loss_scale "
            << t.loss_scale << "\n";
  for (const auto& [k, v] : t.ints) std::cout << "  " << k << " = " << v << "\n";
  for (const auto& [k, v] : t.reals) std::cout << "  " << k << " = " << v << "\n";
  for (const auto& [k, v] : t.strings) std::cout << "  " << k << " = \"" << v << "\"\n";
  if (!t.vocabulary.empty()) std::cout << "  vocabulary: " << t.vocabulary.size() << " bytes\n";
  for (const auto& [k, v] : t.tensors) std::cout << "  tensor " << k << ": " << v.dtype() << v.shape() << "\n";
}

void print_optimizer(const io::OptimizerState& o) {
  if (o.type.empty()) {
    std::cout << "optimizer: none saved\n";
    return;
  }
  std::cout << "optimizer " << o.type << ", step " << o.step << "\n ";
  for (const auto& [k, v] : o.hyperparameters) std::cout << " " << k << "=" << v;
  int64_t tensors = 0, numel = 0;
  double bytes = 0;
  for (const auto& [param, states] : o.state)
    for (const auto& [name, t] : states) {
      ++tensors, numel += t.numel();
      bytes += static_cast<double>(t.nbytes());
    }
  std::cout << "\n  state: " << tensors << " tensors of " << o.state.size() << " parameters, " << numel
            << " elements (" << human_bytes(bytes) << ")\n";
}

void print_rng(const std::map<std::string, Generator::State>& rng) {
  std::cout << "rng" << (rng.empty() ? ": none saved" : "") << "\n";
  for (const auto& [name, s] : rng)
    std::cout << "  " << name << ": seed " << s.seed << ", offset " << s.offset << "\n";
}

// The parameter table from the /model index, with each block-sparse weight's layout.
void print_parameters(const std::map<std::string, io::DatasetInfo>& index,
                      const std::map<std::string, LayoutPtr>& layouts) {
  const std::string prefix = "/model/";
  std::vector<std::vector<std::string>> rows = {{"name", "shape", "dtype", "numel", "layout"}};
  int64_t count = 0, numel = 0, stored = 0, dense = 0;
  double bytes = 0;
  std::set<std::string> shown;  // layouts attached to a weight row
  for (const auto& [path, info] : index) {
    if (path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = path.substr(prefix.size());
    const auto [module, leaf] = split_param(name);
    std::string layout;
    const auto it = layouts.find(module);
    if (it != layouts.end() && leaf == "weight") {
      const BlockLayout& l = *it->second;
      layout = "density " + percent(l.density()) + " (" + std::to_string(l.nnz()) + "/" +
               std::to_string(l.block_rows() * l.block_cols()) + " blocks), bs " +
               std::to_string(l.block_size());
      // per stored block bs² elements, or taps·bs² for a convolution's filter [nnz, kernel…, bs, bs]
      const int64_t per_block = l.nnz() > 0 ? info.shape.numel() / l.nnz() : 0;
      stored += info.shape.numel(), dense += l.block_rows() * l.block_cols() * per_block;
      shown.insert(module);
    }
    rows.push_back(
        {name, info.shape.str(), dtype_name(info.dtype), std::to_string(info.shape.numel()), layout});
    ++count, numel += info.shape.numel();
    bytes += static_cast<double>(info.shape.numel() * static_cast<int64_t>(dtype_size(info.dtype)));
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  std::cout << "parameters\n";
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      const std::string pad(width[c] - r[c].size(), ' ');
      line += "  " + (c == 3 ? pad + r[c] : r[c] + pad);  // numel right-aligned
    }
    std::cout << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
  }
  std::cout << "  total: " << count << " tensors, " << numel << " elements (" << human_bytes(bytes) << ")\n";
  if (!shown.empty())
    std::cout << "  block-sparse weights: " << shown.size()
              << (shown.size() == 1 ? " layer stores " : " layers store ") << stored << " of " << dense
              << " dense elements (" << percent(static_cast<double>(stored) / static_cast<double>(dense))
              << ")\n";
  for (const auto& [module, l] : layouts)
    if (!shown.count(module)) std::cout << "  layout " << module << " (no weight found): " << l->str() << "\n";
}

// Every layout with its real density; nothing for a model without layouts. Block layouts count
// as meant sparse unless the config asks for dense weights in block form (models::sparse_weights_requested).
void print_layouts(const io::CheckpointData& ck) {
  if (ck.layouts.empty() && ck.attention_layouts.empty()) return;
  const nlohmann::json config = nlohmann::json::parse(ck.config, nullptr, /*allow_exceptions=*/false);
  const auto report = models::layout_report(ck.layouts, ck.attention_layouts,
                                            config.is_discarded() || models::sparse_weights_requested(config));
  std::cout << "layouts\n";
  for (const std::string& line : models::format_layout_report(report)) std::cout << "  " << line << "\n";
}

}  // namespace

// Whether models::load_model rebuilds the checkpoint's model (its model_type registered, its config,
// layouts and parameters consistent): one line either way (a model that does not rebuild is
// reported, not an error: the file's contents are still shown).
void print_model(const std::string& path) {
  try {
    const models::LoadedModel m = models::load_model(path);
    std::cout << "model\n  " << m.type << ", rebuilt by models::load_model: " << m.module->num_parameters()
              << " parameters" << (m.has_vocab ? ", vocabulary " + std::to_string(m.vocab.size()) : std::string())
              << "\n";
  } catch (const std::exception& e) {
    std::cout << "model\n  not rebuilt: " << e.what() << "\n";
  }
}

int main(int argc, char** argv) {
  CLI::App app{"Print what a tessera checkpoint holds"};
  std::string path;
  app.add_option("checkpoint", path, "checkpoint file (.h5)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "inspect: " << e.what() << "\n";
    return 2;
  }

  try {
    // Both check the format first: IOError for anything that is not a readable checkpoint.
    const std::map<std::string, io::DatasetInfo> index = io::inspect_checkpoint(path);
    const io::CheckpointData ck = io::load_checkpoint(path);
    print_header(path, ck);
    print_config(ck.config);
    print_trainer(ck.trainer);
    print_optimizer(ck.optimizer);
    print_rng(ck.rng);
    print_parameters(index, ck.layouts);
    print_layouts(ck);
    print_model(path);
  } catch (const std::exception& e) {
    std::cerr << "inspect: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
