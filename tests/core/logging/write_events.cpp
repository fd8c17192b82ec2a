// Writes a small event file for read_events.py (TensorBoard's own reader) and prints what it
// wrote, one "tag step value wall_time" line per scalar, for the script to compare against.
//   write_events <logdir>
#include <cmath>
#include <cstdio>
#include <exception>

#include "core/logging/event_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <logdir>\n", argv[0]);
    return 2;
  }
  try {
    tessera::logging::EventWriter w(argv[1], "run");
    const double t0 = 1700000000.125;
    for (int64_t step = 0; step < 60; ++step) {
      const struct { const char* tag; double value; } points[] = {
          {"loss/train", 4.0 * std::exp(-step / 20.0) + 0.01 * static_cast<double>(step % 3)},
          {"loss/val", 4.2 * std::exp(-step / 25.0) + 0.3}};
      for (const auto& p : points) {
        if (p.tag[5] == 'v' && step % 10 != 9) continue;  // validation every 10 steps
        const int64_t s = step * 1000003;                 // multi-byte varints
        const double wall = t0 + static_cast<double>(step) * 0.5;
        w.add_scalar(p.tag, p.value, s, wall);
        std::printf("%s %lld %.17g %.17g\n", p.tag, static_cast<long long>(s), p.value, wall);
      }
    }
    w.flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_events: %s\n", e.what());
    return 1;
  }
  return 0;
}
