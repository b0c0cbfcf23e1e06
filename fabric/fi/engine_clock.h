// The clock the facade gives the RDM engine endpoints it creates: the
// steady clock, unless a benchmark substitutes its own (fi_benchmark's
// stepping clock, BYPASS_BENCH_STEP_NS, as //fabric/rdm:engine_benchmark
// gives its pairs) so that callgrind counts what a native round trip does
// rather than what a 50x slower one does (timers falling due on every
// round trip). Only the engine's clock: the facade's own deadlines
// (progress thread naps, EQ waits, liveness) keep the steady clock.
#ifndef BYPASS_FABRIC_FI_ENGINE_CLOCK_H_
#define BYPASS_FABRIC_FI_ENGINE_CLOCK_H_

#include "driver/clock.h"

namespace bypass::fi {

// The clock of engine endpoints created from now on.
const driver::Clock& EngineClock();
// Substitutes `clock` (never destroyed before the endpoints that use it are
// closed), or the steady clock again with null. Not for providers loaded by
// libfabric: for single-threaded benchmarks linking the static library,
// called before any endpoint is enabled.
void SetEngineClockForBenchmark(const driver::Clock* clock);

}  // namespace bypass::fi

#endif  // BYPASS_FABRIC_FI_ENGINE_CLOCK_H_
