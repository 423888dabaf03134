/*
 * Looking into a running uroce process (the `uroce` command, tools/uroce.c):
 * every process that opens the device listens on the abstract AF_UNIX
 * stream socket "\0uroce-ctl.<pid>" and answers one request per
 * connection, to its own uid and root only.
 *
 * A request is one line: "stat", "capture FILE", "capture stop" or
 * "faults SPEC" (SPEC as UROCE_FAULTS, or "off").  The reply is "ok\n"
 * followed by the answer (stat: one JSON object), or "error: <why>\n".
 */
#ifndef UROCE_CONTROL_H
#define UROCE_CONTROL_H

#define UROCE_CTL_PREFIX "uroce-ctl."
enum { UROCE_CTL_REQ_MAX = 4096, UROCE_CTL_TIMEOUT_MS = 5000 };

#ifndef UROCE_CTL_NO_INTERNALS
#include "uroce.h"

/* The control thread of a NIC; failing to start it only loses `uroce`'s
 * view of the process. */
void uroce_ctl_start(struct uroce_nic *nic);
void uroce_ctl_stop(struct uroce_nic *nic);
#endif

#endif
