// The choice among the block-sparse matmul kernels (see bsmm_tc.h).
#include "kernels/common/cuda/bsmm_tc.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

#include "kernels/common/cuda/bsmm_sm80.h"
#include "kernels/common/env_switch.h"
#ifdef TESSERA_HAVE_SM90A
#include "kernels/common/cuda/bsmm_sm90.h"
#endif

namespace tessera {
namespace cuda {
namespace {

enum class Path { automatic, sm80, simt };

Path path_override() {
  const char* e = std::getenv("TESSERA_BSMM_PATH");
  if (e && std::strcmp(e, "sm80") == 0) return Path::sm80;
  if (e && std::strcmp(e, "simt") == 0) return Path::simt;
  return Path::automatic;
}

}  // namespace

namespace {

enum class ConvKernel { none, sm80, sm90 };

// The convolution kernel the rule picks (bsmm_tc.h): not forced to simt; sm_90a where
// its kernels take the call (not forced to sm80), else sm_80 where they do.
ConvKernel conv_kernel(const GatherProduct& p, const ConvIndex& ci, int device) {
  const Path path = path_override();
  if (path == Path::simt) return ConvKernel::none;
#ifdef TESSERA_HAVE_SM90A
  if (path == Path::automatic && sm90::conv_supported(p, ci, device)) return ConvKernel::sm90;
#else
  (void)ci;
#endif
  return sm80::conv_supported(p, device) ? ConvKernel::sm80 : ConvKernel::none;
}

ConvKernel conv_gradient_kernel(const BlockGradient& g, const ConvIndex& ci, int device) {
  const Path path = path_override();
  if (path == Path::simt) return ConvKernel::none;
#ifdef TESSERA_HAVE_SM90A
  if (path == Path::automatic && sm90::conv_gradient_supported(g, ci, device)) return ConvKernel::sm90;
#else
  (void)ci;
#endif
  return sm80::conv_gradient_supported(g, device) ? ConvKernel::sm80 : ConvKernel::none;
}

// TESSERA_BSCONV_HALO=0 gives every pass to the sm_90a per-tap kernels (1 or unset: halo mode where
// it pays).
[[maybe_unused]] bool halo_allowed() { return env_switch("TESSERA_BSCONV_HALO", "0", "1", true); }

// The sm_90a dW kernel's choice: halo mode where allowed and it pays.
bool dw_halo_taken(const BlockGradient& g, const ConvIndex& ci, int64_t batch) {
#ifdef TESSERA_HAVE_SM90A
  return halo_allowed() && sm90::dw_halo_pays(g, ci, batch);
#else
  (void)g, (void)ci, (void)batch;
  return false;
#endif
}

// The halo dW kernel's strip form (the default; TESSERA_BSCONV_DW_STRIP=0 off): where halo mode is allowed and it
// takes the call (bs 32, a 3x3 filter of dilation 1 over two spatial axes).
bool dw_strip_taken(const BlockGradient& g, const ConvIndex& ci, int64_t batch) {
#ifdef TESSERA_HAVE_SM90A
  return halo_allowed() && sm90::dw_strip_takes(g, ci, batch);
#else
  (void)g, (void)ci, (void)batch;
  return false;
#endif
}

}  // namespace

bool conv_takes(const GatherProduct& p, const ConvIndex& ci, int device) {
  return conv_kernel(p, ci, device) != ConvKernel::none;
}

bool conv_gradient_takes(const BlockGradient& g, const ConvIndex& ci, int device) {
  return conv_gradient_kernel(g, ci, device) != ConvKernel::none;
}

void run_conv(const GatherProduct& p, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream) {
  const ConvKernel kernel = conv_kernel(p, ci, device);
  TS_CHECK(kernel != ConvKernel::none, DeviceError, "bsconv: no tensor-core kernel takes this call (ask conv_takes)");
#ifdef TESSERA_HAVE_SM90A
  if (kernel == ConvKernel::sm90) {
    if (halo_allowed() && sm90::halo_pays(p, ci, batch))
      sm90::gather_conv_halo(p, ci, batch, stream);
    else
      sm90::gather_conv(p, ci, batch, stream);
    return;
  }
#else
  (void)batch;
#endif
  sm80::gather_conv(p, ci, stream);
}

int32_t conv_gradient_run_size(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device) {
#ifdef TESSERA_HAVE_SM90A
  if (conv_gradient_kernel(g, ci, device) == ConvKernel::sm90) {
    if (dw_strip_taken(g, ci, batch)) return sm90::dw_strip_run_size();
    if (dw_halo_taken(g, ci, batch)) return sm90::dw_halo_run_size(g.bs);
  }
#else
  (void)ci, (void)batch, (void)device;
#endif
  return dw_col_run_size(g.bs);
}

void run_conv_gradient(const BlockGradient& g, const ConvIndex& ci, int64_t batch, int device, cudaStream_t stream) {
  const ConvKernel kernel = conv_gradient_kernel(g, ci, device);
  TS_CHECK(kernel != ConvKernel::none, DeviceError,
           "bsconv_dw: no tensor-core kernel takes this call (ask conv_gradient_takes)");
#ifdef TESSERA_HAVE_SM90A
  if (kernel == ConvKernel::sm90) {
    if (dw_strip_taken(g, ci, batch)) return sm90::conv_gradient_strip(g, ci, batch, device, stream);
    if (dw_halo_taken(g, ci, batch)) return sm90::conv_gradient_halo(g, ci, batch, device, stream);
    return sm90::conv_gradient(g, ci, batch, device, stream);
  }
#else
  (void)batch;
#endif
  sm80::conv_gradient(g, ci, stream);
}

bool have_sm90_kernels() {
#ifdef TESSERA_HAVE_SM90A
  return true;
#else
  return false;
#endif
}

bool run_gather(const GatherProduct& p, int device, cudaStream_t stream) {
  const Path path = path_override();
  if (path == Path::simt) return false;
#ifdef TESSERA_HAVE_SM90A
  if (path == Path::automatic && sm90::gather_supported(p, device)) {
    sm90::gather_product(p, stream);
    return true;
  }
#endif
  if (!sm80::gather_supported(p, device)) return false;
  sm80::gather_product(p, stream);
  return true;
}

bool run_gate_gradient(const BlockGradient& g, const LayoutPtr& layout, int device, cudaStream_t stream) {
#ifdef TESSERA_HAVE_SM90A
  if (path_override() != Path::automatic || !sm90::gate_gradient_wanted(g, device)) return false;
  const GateRuns runs = gate_dw_runs(layout, device);
  if (runs.runs == 0) return false;
  sm90::gate_gradient(g, runs, stream);
  return true;
#else
  (void)g;
  (void)layout;
  (void)device;
  (void)stream;
  return false;
#endif
}

bool gate_pair_gradient_applies(const BlockGradient& a, const LayoutPtr& la, const GatePairOperand& b,
                                const LayoutPtr& lb, int device) {
#ifdef TESSERA_HAVE_SM90A
  return path_override() == Path::automatic && sm90::gate_pair_gradient_wanted(a, b, device) &&
         gate_pair_dw_runs(la, lb, device).runs > 0;
#else
  (void)a, (void)la, (void)b, (void)lb, (void)device;
  return false;
#endif
}

bool run_gate_pair_gradient(const BlockGradient& a, const LayoutPtr& la, const GatePairOperand& b,
                            const LayoutPtr& lb, int device, cudaStream_t stream, bool* sums_written) {
  if (sums_written) *sums_written = false;
#ifdef TESSERA_HAVE_SM90A
  if (path_override() != Path::automatic || !sm90::gate_pair_gradient_wanted(a, b, device)) return false;
  const GatePairTables runs = gate_pair_dw_runs(la, lb, device);
  if (runs.runs == 0) return false;
  const bool sums = sm90::gate_pair_gradient(a, b, runs, stream);
  if (sums_written) *sums_written = sums;
  return true;
#else
  (void)a, (void)la, (void)b, (void)lb, (void)device, (void)stream;
  return false;
#endif
}

bool gradient_wants_transposed(const BlockGradient& g, int device) {
#ifdef TESSERA_HAVE_SM90A
  BlockGradient t = g;
  t.transposed = true;
  return path_override() == Path::automatic && sm90::gradient_wants_transposed(g) &&
         sm90::gradient_supported(t, device);
#else
  (void)g;
  (void)device;
  return false;
#endif
}

bool run_gradient(const BlockGradient& g, int device, cudaStream_t stream) {
  const Path path = path_override();
  if (path == Path::simt) return false;
#ifdef TESSERA_HAVE_SM90A
  if (path == Path::automatic && sm90::gradient_supported(g, device)) {
    sm90::block_gradient(g, device, stream);
    return true;
  }
#endif
  TS_CHECK(!g.transposed, DeviceError, "bsmm_dw: transposed operands reached a kernel that takes none");
  if (!sm80::gradient_supported(g, device)) return false;
  sm80::block_gradient(g, stream);
  return true;
}

uint64_t bsmm_launches(BsmmKernel kernel) {
  if (kernel == BsmmKernel::sm80) return sm80::launch_count();
  if (kernel == BsmmKernel::sm80_conv) return sm80::conv_launch_count();
#ifdef TESSERA_HAVE_SM90A
  if (kernel == BsmmKernel::sm90_pairs) return sm90::pair_launch_count();
  if (kernel == BsmmKernel::sm90_quads) return sm90::quad_launch_count();
  if (kernel == BsmmKernel::sm90_conv) return sm90::conv_launch_count();
  if (kernel == BsmmKernel::sm90_halo) return sm90::halo_launch_count();
  if (kernel == BsmmKernel::sm90_halo_tall) return sm90::halo_tall_launch_count();
  if (kernel == BsmmKernel::sm90_halo_entry) return sm90::halo_entry_launch_count();
  if (kernel == BsmmKernel::sm90_halo_strip) return sm90::halo_strip_launch_count();
  if (kernel == BsmmKernel::sm90_dw_strip) return sm90::dw_strip_launch_count();
  if (kernel == BsmmKernel::sm90_gate_runs) return sm90::gate_launch_count();
  return sm90::launch_count();
#else
  return 0;
#endif
}

}  // namespace cuda
}  // namespace tessera
