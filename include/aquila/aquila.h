/* Aquila: a user-mode heterogeneous runtime in the HSA style.
 * Include this for everything; each header below holds one concept. */
#ifndef AQUILA_AQUILA_H_
#define AQUILA_AQUILA_H_

#include "aquila/status.h"
#include "aquila/runtime.h"
#include "aquila/signal.h"
#include "aquila/queue.h"
#include "aquila/memory.h"
#include "aquila/code_object.h"
#include "aquila/kernel.h"
#include "aquila/ops.h"
#include "aquila/graph.h"
#include "aquila/trace.h"
#include "aquila/unified.h"
#include "aquila/comm.h"

#endif /* AQUILA_AQUILA_H_ */
