#include "core/collective.h"

#include "core/error.h"

namespace tessera {

int Collective::reserve_tickets(int count) {
  TS_CHECK(count >= 0, ValueError, "reserve_tickets: a negative count " << count);
  const int first = next_ticket_;
  next_ticket_ += count;
  return first;
}

}  // namespace tessera
