/*
 * uroce internals shared by the verbs objects, the transport engine and the
 * network backends, one header per part.  The public API is rdma-core's
 * <infiniband/verbs.h>.
 */
#ifndef UROCE_H
#define UROCE_H

#include "config.h"
#include "macros.h"
#include "net/faults.h"
#include "net/link.h"
#include "nic.h"
#include "stats.h"
#include "verbs/objects.h"
#include "verbs/qp.h"

#endif
