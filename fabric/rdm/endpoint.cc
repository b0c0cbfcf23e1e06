// The default instantiation (virtual call per burst), compiled once.
#include "fabric/rdm/endpoint.h"

#include "driver/device.h"

namespace bypass::rdm {

template class Port<driver::QueuePair>;
template class Endpoint<driver::QueuePair>;

}  // namespace bypass::rdm
