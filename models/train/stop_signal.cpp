#include "models/train/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

#include "core/error.h"

namespace tessera {
namespace train {

namespace {

volatile std::sig_atomic_t g_signal = 0;  // the first signal, 0 before one came
std::atomic<bool> g_installed{false};
struct sigaction g_old_int, g_old_term;

// Async-signal-safe: sets the flag on the first signal; the second leaves at once (_exit skips
// destructors and buffered output, so nothing half-written replaces a file).
extern "C" void on_stop_signal(int signo) {
  if (g_signal != 0) _exit(128 + signo);
  g_signal = signo;
}

}  // namespace

StopSignals::StopSignals() {
  TS_CHECK(!g_installed.exchange(true), ValueError, "StopSignals: one is already installed in this process");
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted reads and writes go on
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_installed = false;
}

bool StopSignals::requested() const { return g_signal != 0; }

int StopSignals::signal() const { return g_signal; }

const char* StopSignals::name(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace train
}  // namespace tessera
