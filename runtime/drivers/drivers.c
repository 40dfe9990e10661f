/* The drivers compiled into this build, in the order they start. */
#include "runtime/driver.h"

const aq_driver_t *const aq_drivers[] = {&aq_driver_cpu, &aq_driver_cuda, &aq_driver_rocr};
const unsigned aq_driver_count = sizeof(aq_drivers) / sizeof(aq_drivers[0]);
