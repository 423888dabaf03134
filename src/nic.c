/*
 * The process-wide NIC: every ibv_context of a process shares one set of
 * sockets, one QP/MR namespace and one progress engine, the way one RNIC
 * serves every context opened on it.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cm/cm.h"
#include "control.h"
#include "net/gid.h"
#include "samehost/samehost.h"
#include "transport/transport.h"
#include "verbs/ops.h"

static pthread_mutex_t nic_global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uroce_nic *the_nic;

static void nic_free(struct uroce_nic *nic)
{
	if (nic->wake_fd >= 0)
		close(nic->wake_fd);
	if (nic->leave_fd >= 0)
		close(nic->leave_fd);
	if (nic->doorbell_fd >= 0)
		close(nic->doorbell_fd);
	free(nic->mrs);
	pthread_rwlock_destroy(&nic->mr_lock);
	pthread_mutex_destroy(&nic->gsi.lock);
	free(nic->held);
	free(nic->draining);
	pthread_mutex_destroy(&nic->held_lock);
	pthread_mutex_destroy(&nic->drain_lock);
	free(nic->mcast.groups);
	pthread_mutex_destroy(&nic->mcast.lock);
	pthread_mutex_destroy(&nic->rx_lock);
	pthread_mutex_destroy(&nic->lock);
	free(nic);
}

/* RoCE v1, when asked for: its link and GIDs, or one line saying why not
 * (kept for `uroce status`). */
static void roce1_open(struct uroce_nic *nic)
{
	int err = uroce_net_roce1.open(nic);

	if (!err) {
		nic->roce1 = &uroce_net_roce1;
		uroce_gids_add_roce1(nic);
		return;
	}
	snprintf(nic->roce1_absent, sizeof(nic->roce1_absent), "%s",
		 err != -EPERM && err != -EACCES ? strerror(-err)
		 : nic->service ? "Ethernet frames take CAP_NET_RAW, which "
				  "uroced lacks (scripts/setup.sh gives it)"
		 : nic->served ? "Ethernet frames take CAP_NET_RAW, which "
				 "neither this process nor uroced has (give it "
				 "to uroced: scripts/setup.sh does)"
			       : "Ethernet frames take CAP_NET_RAW, which this "
				 "process lacks (give it the capability, run it "
				 "as root, or start uroced with it: "
				 "scripts/setup.sh)");
	/* uroced says it in its own words */
	if (!nic->service)
		fprintf(stderr, "uroce: UROCE_ROCE_V1=1 but no RoCE v1 GIDs: "
			"%s\n", nic->roce1_absent);
}

static struct uroce_nic *nic_create(const struct uroce_objects_ops *objects)
{
	struct uroce_nic *nic = calloc(1, sizeof(*nic));
	int err;

	if (!nic)
		return NULL;
	pthread_mutex_init(&nic->lock, NULL);
	pthread_mutex_init(&nic->rx_lock, NULL);
	pthread_mutex_init(&nic->held_lock, NULL);
	pthread_mutex_init(&nic->drain_lock, NULL);
	pthread_mutex_init(&nic->mcast.lock, NULL);
	pthread_rwlock_init(&nic->mr_lock, NULL);
	nic->wake_fd = -1;
	nic->leave_fd = -1;
	nic->doorbell_fd = -1;
	nic->ctl_fd = nic->ctl_wake = -1;
	nic->cfg = uroce_config();
	nic->net = &uroce_net_udp;
	nic->objects = objects;
	nic->next_qp_index = 1;
	nic->next_mr_index = 1;
	pthread_mutex_init(&nic->gsi.lock, NULL);
	nic->gsi.tx4 = nic->gsi.tx6 = nic->gsi.tx1 = -1;

	nic->mrs = calloc(UROCE_MAX_MR + 1, sizeof(*nic->mrs));
	nic->held = calloc(UROCE_MAX_QP, sizeof(*nic->held));
	nic->draining = calloc(UROCE_MAX_QP, sizeof(*nic->draining));
	nic->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	nic->leave_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	nic->doorbell_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!nic->mrs || !nic->held || !nic->draining || nic->wake_fd < 0 ||
	    nic->leave_fd < 0 || nic->doorbell_fd < 0) {
		err = errno ? errno : ENOMEM;
		goto fail;
	}
	err = uroce_gids_discover(nic);
	if (err)
		goto fail;
	uroce_faults_init(&nic->faults, &nic->cfg->faults);
	err = -nic->net->open(nic);
	if (err)
		goto fail;
	if (nic->cfg->roce_v1)
		roce1_open(nic);
	uroce_sh_open(nic);
	err = -uroce_cm_init(nic);
	if (!err)
		err = uroce_engine_start(nic);
	if (err) {
		uroce_cm_fini(nic);
		uroce_sh_close(nic);
		if (nic->roce1)
			nic->roce1->close(nic);
		nic->net->close(nic);
		goto fail;
	}
	uroce_ctl_start(nic);
	nic->refcnt = 1;
	return nic;
fail:
	nic_free(nic);
	errno = err;
	return NULL;
}

/*
 * A process may exit without closing its device.  Its peers are told, as the
 * kernel tells them for a dying process's rdma_cm ids, and the datagrams for
 * other processes that the kernel handed to our shared sockets (a CM message
 * we just sent to a neighbour, typically) are forwarded, not lost with us.
 */
static void nic_dump_stats(struct uroce_nic *nic)
{
#define UROCE_STAT_PRINT(n)                                                    \
	if (atomic_load(&nic->stats.n))                                        \
		uroce_log("slot %u: %s %lu", nic->slot, #n,                    \
			  atomic_load(&nic->stats.n));
	UROCE_STATS(UROCE_STAT_PRINT)
#undef UROCE_STAT_PRINT
}

static void nic_at_exit(void)
{
	struct uroce_nic *nic;

	if (pthread_mutex_trylock(&nic_global_lock))
		return;
	nic = the_nic;
	pthread_mutex_unlock(&nic_global_lock);
	if (!nic)
		return;
	uroce_cm_exit(nic);
	uroce_sh_exit(nic);
	uroce_engine_drain(nic);
	/* a program that exits without closing its device (most do on an
	 * error) still reports its counters */
	if (nic->cfg->debug)
		nic_dump_stats(nic);
}

static void register_exit(void)
{
	atexit(nic_at_exit);
}

struct uroce_nic *uroce_nic_get(const struct uroce_objects_ops *objects)
{
	static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

	pthread_once(&exit_once, register_exit);
	struct uroce_nic *nic;

	pthread_mutex_lock(&nic_global_lock);
	if (the_nic) {
		the_nic->refcnt++;
	} else {
		the_nic = nic_create(objects);
	}
	nic = the_nic;
	pthread_mutex_unlock(&nic_global_lock);
	return nic;
}

void uroce_nic_put(struct uroce_nic *nic)
{
	pthread_mutex_lock(&nic_global_lock);
	if (--nic->refcnt == 0) {
		uroce_ctl_stop(nic);
		uroce_engine_stop(nic);
		nic_dump_stats(nic);
		uroce_gsi_close(nic);
		uroce_cm_fini(nic);
		uroce_sh_close(nic);
		if (nic->roce1)
			nic->roce1->close(nic);
		nic->net->close(nic);
		nic_free(nic);
		the_nic = NULL;
	}
	pthread_mutex_unlock(&nic_global_lock);
}
