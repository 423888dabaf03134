/* The uroce processes of a hostile test (see hostile.h). */
#ifndef UROCE_HOSTILE_TARGET_H
#define UROCE_HOSTILE_TARGET_H

#include <stdbool.h>

#include "harness.h"

/* Serves the attacker's commands on ctl; link leads to the peer. */
void target_main(struct h_proc *p, int ctl, int link);
/* The legitimate peer; cm: it also connects through rdma_cm at the end. */
void peer_main(struct h_proc *p, int link, bool cm);

#endif
