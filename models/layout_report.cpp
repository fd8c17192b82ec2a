#include "models/layout_report.h"

#include <algorithm>
#include <cctype>
#include <iomanip>
#include <sstream>

#include "models/char_lstm_lm.h"
#include "models/model_checkpoint.h"
#include "models/transformer_lm.h"

namespace tessera {
namespace models {
namespace {

std::string fixed3(double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(3) << x;
  return s.str();
}

// dense_causal (and its 64-block refinement) is the one kind that asks for every causal block.
bool dense_kind(const std::string& kind) { return kind.rfind("dense_causal", 0) == 0; }

// "T=32 bs=32 heads=4" or "[64, 256] bs=16".
std::string geometry(const LayoutInfo& e) {
  std::ostringstream s;
  if (e.is_attention())
    s << "T=" << e.attention->seq_len() << " bs=" << e.attention->block_size() << " heads=" << e.attention->heads();
  else
    s << "[" << e.block->in_features() << ", " << e.block->out_features() << "] bs=" << e.block->block_size();
  return s.str();
}

// "attention strided(stride_blocks=2)" or "block-sparse".
std::string what(const LayoutInfo& e) { return e.is_attention() ? "attention " + e.requested : e.requested; }

std::string denominator(const LayoutInfo& e) { return e.is_attention() ? "of causal blocks" : "of all blocks"; }

std::string note(const LayoutInfo& e) {
  if (e.degenerate) return e.is_attention() ? " (dense causal: degenerate)" : " (every block stored: degenerate)";
  if (!e.is_attention() && e.block->stores_every_block()) return " (dense, as configured)";
  return "";
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// Like layouts: the same path up to numeric components, kind, geometry and degeneracy.
struct Group {
  std::string key;
  std::vector<std::string> parts;  // the path's components, "*" for numeric ones
  std::vector<const LayoutInfo*> members;
  std::vector<std::vector<int64_t>> numbers;  // each member's numeric components
};

std::vector<Group> group(const std::vector<LayoutInfo>& report, bool degenerate_only) {
  std::vector<Group> groups;
  for (const LayoutInfo& e : report) {
    if (degenerate_only && !e.degenerate) continue;
    std::vector<std::string> parts;
    std::vector<int64_t> numbers;
    std::string tmpl;
    std::istringstream in(e.path);
    for (std::string p; std::getline(in, p, '.');) {
      if (all_digits(p)) numbers.push_back(std::stoll(p)), p = "*";
      parts.push_back(p);
      tmpl += (tmpl.empty() ? "" : ".") + p;
    }
    const std::string key = tmpl + "|" + what(e) + "|" + geometry(e) + "|" + (e.degenerate ? "d" : "");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{key, parts, {}, {}});
    it->members.push_back(&e);
    it->numbers.push_back(numbers);
  }
  return groups;
}

// A group's paths: the path itself for one module; blocks.{0..3}.attn (runs of 3 or more as
// a..b) for modules differing in one numeric component; else blocks.*.x.* (N modules).
std::string paths(const Group& g) {
  if (g.members.size() == 1) return g.members[0]->path;
  const int64_t stars = std::count(g.parts.begin(), g.parts.end(), "*");
  std::string list;
  if (stars == 1) {
    std::vector<int64_t> n;
    for (const auto& v : g.numbers) n.push_back(v[0]);
    std::sort(n.begin(), n.end());
    for (size_t i = 0; i < n.size();) {
      size_t j = i;
      while (j + 1 < n.size() && n[j + 1] == n[j] + 1) ++j;
      list += (list.empty() ? "" : ",") + std::to_string(n[i]);
      if (j >= i + 2) list += ".." + std::to_string(n[j]);
      else if (j == i + 1) list += "," + std::to_string(n[j]);
      i = j + 1;
    }
  }
  std::string out;
  for (const std::string& p : g.parts) {
    out += out.empty() ? "" : ".";
    out += (p == "*" && stars == 1) ? "{" + list + "}" : p;
  }
  return stars == 1 ? out : out + " (" + std::to_string(g.members.size()) + " modules)";
}

LayoutInfo attention_info(const std::string& path, const AttentionLayoutPtr& l) {
  LayoutInfo e;
  e.path = path;
  e.attention = l;
  e.requested = l->kind();
  e.kept = l->nnz();
  e.total = l->causal_blocks();
  e.density = l->density();
  e.degenerate = l->keeps_every_causal_block() && !dense_kind(l->kind());
  e.effective = l->keeps_every_causal_block() ? "dense causal attention" : l->kind();
  return e;
}

LayoutInfo block_info(const std::string& path, const LayoutPtr& l, bool sparse_weights) {
  LayoutInfo e;
  e.path = path;
  e.block = l;
  e.requested = sparse_weights ? "block-sparse" : "dense";
  e.kept = l->nnz();
  e.total = l->grid_blocks();
  e.density = l->density();
  e.degenerate = sparse_weights && l->stores_every_block();
  e.effective = l->stores_every_block() ? "dense weight" : "block-sparse";
  return e;
}

}  // namespace

std::vector<LayoutInfo> layout_report(const std::map<std::string, LayoutPtr>& block_layouts,
                                      const std::map<std::string, AttentionLayoutPtr>& attention_layouts,
                                      bool sparse_weights) {
  std::vector<LayoutInfo> out;
  for (const auto& [path, l] : block_layouts) out.push_back(block_info(path, l, sparse_weights));
  for (const auto& [path, l] : attention_layouts) out.push_back(attention_info(path, l));
  return out;
}

std::vector<LayoutInfo> layout_report(const nn::Module& model, bool sparse_weights) {
  return layout_report(io::collect_layouts(model), io::collect_attention_layouts(model), sparse_weights);
}

std::vector<LayoutInfo> layout_report(const TransformerLM& model) {
  return layout_report(static_cast<const nn::Module&>(model), /*sparse_weights=*/true);
}

std::vector<LayoutInfo> layout_report(const CharLSTMLM& model) {
  return layout_report(static_cast<const nn::Module&>(model), model.config().layout != "dense");
}

bool sparse_weights_requested(const nlohmann::json& config) {
  const nlohmann::json& m = config.is_object() && config.contains("model") ? config["model"] : config;
  if (!m.is_object() || !m.contains("layout") || !m["layout"].is_string()) return true;
  return m["layout"].get<std::string>() != "dense";
}

std::vector<std::string> format_layout_report(const std::vector<LayoutInfo>& report) {
  std::vector<std::string> lines;
  for (const LayoutInfo& e : report)
    lines.push_back(e.path + "  " + what(e) + "  " + geometry(e) + "  " + std::to_string(e.kept) + "/" +
                    std::to_string(e.total) + (e.is_attention() ? " causal blocks" : " blocks") + ", density " +
                    fixed3(e.density) + " " + denominator(e) + note(e));
  return lines;
}

std::vector<std::string> summarize_layouts(const std::vector<LayoutInfo>& report) {
  std::vector<std::string> lines;
  for (const Group& g : group(report, /*degenerate_only=*/false)) {
    const LayoutInfo& first = *g.members[0];
    double lo = first.density, hi = first.density;
    bool shared = g.members.size() > 1;
    for (const LayoutInfo* e : g.members) {
      lo = std::min(lo, e->density), hi = std::max(hi, e->density);
      const void* a = e->is_attention() ? static_cast<const void*>(e->attention.get()) : e->block.get();
      const void* b = first.is_attention() ? static_cast<const void*>(first.attention.get()) : first.block.get();
      shared = shared && a == b;
    }
    const std::string d = fixed3(lo) == fixed3(hi) ? fixed3(lo) : fixed3(lo) + ".." + fixed3(hi);
    std::string line = paths(g) + "  " + what(first) + "  " + geometry(first) + "  density " + d + " " +
                       denominator(first) + note(first);
    if (shared) line += " (one layout shared by " + std::to_string(g.members.size()) + " modules)";
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> degenerate_layouts(const std::vector<LayoutInfo>& report) {
  std::vector<std::string> lines;
  for (const Group& g : group(report, /*degenerate_only=*/true)) {
    const LayoutInfo& e = *g.members[0];
    std::ostringstream s;
    s << paths(g) << ": ";
    if (e.is_attention()) {
      const AttentionLayout& l = *e.attention;
      const int64_t nb = l.blocks(), per_head = nb * (nb + 1) / 2;
      s << "attention " << e.requested << " with T=" << l.seq_len() << " and bs=" << l.block_size() << " (" << nb
        << (nb == 1 ? " block" : " blocks") << " per sequence) keeps every causal block (" << per_head << " of "
        << per_head << " per head): the effective layout is dense causal attention";
    } else {
      const BlockLayout& l = *e.block;
      s << "block-sparse [" << l.in_features() << ", " << l.out_features() << "] in " << l.block_size() << "x"
        << l.block_size() << " blocks stores all " << l.grid_blocks()
        << " blocks (density 1): the effective layout is a dense [" << l.in_features() << ", "
        << l.out_features() << "] weight";
    }
    lines.push_back(s.str());
  }
  return lines;
}

}  // namespace models
}  // namespace tessera
