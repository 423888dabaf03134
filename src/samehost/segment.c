/*
 * Same-host segments: this process's, which it publishes its QPs and MRs
 * in, and its peers', which it maps to check requests against (samehost.h).
 *
 * A segment is a POSIX shared-memory object of mode 0600 named by the
 * network namespace, the RoCEv2 port, the user and the process's slot, the
 * same things that name its forwarding socket: a peer finds it from the
 * QPN it talks to.  The slot is this process's while it lives, so a name
 * left behind by a process that crashed is replaced here (and swept by the
 * next process that opens the device: sweep_stale).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "samehost/segment.h"

static void seg_name(char *buf, size_t size, uint64_t netns, uint16_t port,
		     unsigned slot)
{
	snprintf(buf, size, "/uroce.%llu.%u.%u.%u", (unsigned long long)netns,
		 port, (unsigned)getuid(), slot);
}

/* ---- entries ------------------------------------------------------------- */

void sh_write(void *dst, const void *src, size_t size)
{
	_Atomic uint32_t *seq = dst;
	uint32_t *d = dst;
	const uint32_t *s = src;
	uint32_t v = atomic_load_explicit(seq, memory_order_relaxed) & ~1u;

	/* an odd count is a writer's lock: QP entries have two (modify_qp
	 * and a transition to error) */
	while (!atomic_compare_exchange_weak_explicit(seq, &v, v + 1,
						      memory_order_acquire,
						      memory_order_relaxed))
		v &= ~1u;
	atomic_thread_fence(memory_order_release);
	for (size_t i = 1; i < size / 4; i++)
		__atomic_store_n(&d[i], s[i], __ATOMIC_RELAXED);
	atomic_store_explicit(seq, v + 2, memory_order_release);
}

bool sh_read(void *dst, const void *src, size_t size)
{
	const _Atomic uint32_t *seq = src;
	const uint32_t *s = src;
	uint32_t *d = dst;

	for (unsigned tries = 0; tries < 1000; tries++) {
		uint32_t v = atomic_load_explicit(seq, memory_order_acquire);

		if (v & 1)
			continue;
		for (size_t i = 1; i < size / 4; i++)
			d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(seq, memory_order_relaxed) == v) {
			d[0] = v;
			return true;
		}
	}
	return false;
}

/* Gone, or a zombie: a process that has exited copies nothing more, and
 * its parent may take its time to reap it (or never does). */
static bool pid_gone(pid_t pid)
{
	char path[32], stat[256], *paren;
	bool exited = false;
	FILE *f;

	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT;
	/* "pid (comm) S ...": the name may hold anything, even ") " */
	if (fgets(stat, sizeof(stat), f) && (paren = strrchr(stat, ')')) &&
	    paren[1] == ' ')
		exited = paren[2] == 'Z' || paren[2] == 'X';
	fclose(f);
	return exited;
}

/* Wait until no peer still copies under an entry withdrawn before. */
static void quiesce_users(struct sh_seg *seg)
{
	const struct timespec pause = { 0, 10000 };

	atomic_thread_fence(memory_order_seq_cst);
	for (unsigned w = 0; w < SH_MASK_WORDS; w++) {
		uint64_t mask = atomic_load(&seg->user_mask[w]);

		while (mask) {
			struct sh_user *u = &seg->users[w * 64 +
							__builtin_ctzll(mask)];

			mask &= mask - 1;
			/* a copy takes as long as the bytes it moves; a
			 * process that died during one never ends it */
			while (atomic_load(&u->busy) &&
			       !pid_gone(atomic_load(&u->pid)))
				nanosleep(&pause, NULL);
		}
	}
}

/* The entry for MR index idx, its page allocated first; NULL if /dev/shm
 * has no room for it. */
static struct sh_mr *mr_entry_alloc(struct uroce_sh *sh, uint32_t idx)
{
	struct sh_mr *e = sh_mr_entry(sh->seg, idx);
	uint32_t page = idx / SH_MRS_PER_PAGE;

	if (e)
		return e;
	pthread_mutex_lock(&sh->page_lock);
	e = sh_mr_entry(sh->seg, idx);
	if (!e && !fallocate(sh->fd, 0,
			     (off_t)((char *)&sh->seg->mrs[page] -
				     (char *)sh->seg),
			     SH_PAGE)) {
		atomic_fetch_or_explicit(&sh->seg->mr_pages[page / 64],
					 1ull << (page % 64),
					 memory_order_release);
		e = sh_mr_entry(sh->seg, idx);
	}
	pthread_mutex_unlock(&sh->page_lock);
	return e;
}

void uroce_sh_mr_publish(struct uroce_nic *nic, const struct uroce_mr *mr)
{
	struct sh_mr e = { 0 }, *slot;

	/* a window's key stays on the wire, where bindings are checked */
	if (!nic->sh || !nic->sh->seg || mr->mw)
		return;
	slot = mr_entry_alloc(nic->sh, mr->index);
	if (!slot) {
		STAT_INC(nic, samehost_no_room);
		return;		/* peers reach this MR over the wire */
	}
	e.key = mr->ibmr.rkey;
	e.access = (uint32_t)mr->access;
	e.pd = (uintptr_t)mr->pd;
	e.iova = mr->iova;
	e.length = mr->ibmr.length;
	e.addr = (uintptr_t)mr->ibmr.addr;
	sh_write(slot, &e, sizeof(e));
}

void uroce_sh_mr_withdraw(struct uroce_nic *nic, uint32_t index)
{
	struct sh_mr e = { 0 }, *slot;

	if (!nic->sh || !nic->sh->seg || !index)
		return;
	slot = sh_mr_entry(nic->sh->seg, index);
	if (!slot)
		return;		/* never published */
	sh_write(slot, &e, sizeof(e));
	quiesce_users(nic->sh->seg);
}

void uroce_sh_qp_update(struct uroce_qp *qp)
{
	struct uroce_sh *sh = qp->nic->sh;
	enum ibv_qp_state state = atomic_load(&qp->state);
	struct sh_qp e = { 0 }, old;

	if (!sh || !sh->seg)
		return;
	if (qp->ibqpx.qp_base.qp_type == IBV_QPT_RC &&
	    (state == IBV_QPS_RTR || state == IBV_QPS_RTS ||
	     state == IBV_QPS_SQD)) {
		e.accepting = 1;
		e.qpn = qp->ibqpx.qp_base.qp_num;
		e.dest_qpn = qp->attr.dest_qp_num;
		e.access = (uint32_t)qp->attr.qp_access_flags;
		e.pd = (uintptr_t)to_upd(qp->ibqpx.qp_base.pd);
	}
	if (!sh_read(&old, &sh->seg->qps[qp->index], sizeof(old)))
		old.accepting = 1;	/* we are its only writer: never */
	old.seq = 0;
	if (!memcmp(&old, &e, sizeof(e)))
		return;
	sh_write(&sh->seg->qps[qp->index], &e, sizeof(e));
	if (old.accepting)
		quiesce_users(sh->seg);
}

void uroce_sh_qp_withdraw(struct uroce_qp *qp)
{
	struct uroce_sh *sh = qp->nic->sh;
	struct sh_qp e = { 0 };

	if (!sh || !sh->seg)
		return;
	sh_write(&sh->seg->qps[qp->index], &e, sizeof(e));
	quiesce_users(sh->seg);
}

/* ---- this process's segment --------------------------------------------- */

static void debug(struct uroce_nic *nic, const char *fmt, const char *what,
		  int err)
{
	if (nic->cfg->debug)
		uroce_log(fmt, what, strerror(err));
}

static void sweep_stale(const struct uroce_sh *sh, uint16_t port);

static uint64_t netns_id(void)
{
	struct stat st;

	return stat("/proc/self/ns/net", &st) ? 0 : (uint64_t)st.st_ino;
}

static struct sh_seg *seg_create(struct uroce_nic *nic, struct uroce_sh *sh)
{
	struct sh_seg *seg;
	int fd, err;

	/* a crashed process's segment under our slot's name */
	shm_unlink(sh->name);
	fd = shm_open(sh->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		debug(nic, "same-host path: shm_open %s: %s: peers reach this "
			   "process over UDP", sh->name, errno);
		return NULL;
	}
	/* the header and the QP table now, MR pages as MRs need them */
	if (ftruncate(fd, sizeof(*seg)) ||
	    fallocate(fd, 0, 0, offsetof(struct sh_seg, mrs))) {
		err = errno;
		close(fd);
		shm_unlink(sh->name);
		debug(nic, "same-host path: %s: %s: peers reach this process "
			   "over UDP", sh->name, err);
		return NULL;
	}
	seg = mmap(NULL, sizeof(*seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   0);
	err = errno;
	if (seg == MAP_FAILED) {
		close(fd);
		shm_unlink(sh->name);
		debug(nic, "same-host path: mmap %s: %s: peers reach this "
			   "process over UDP", sh->name, err);
		return NULL;
	}
	if (getrandom(&seg->nonce, sizeof(seg->nonce), 0) != sizeof(seg->nonce))
		seg->nonce = (uint64_t)uroce_now_ns() ^ (uint64_t)getpid() << 32;
	seg->self = (uintptr_t)seg;
	seg->pid = getpid();
	seg->slot = nic->slot;
	seg->wake_fd = nic->doorbell_fd;
	sh->fd = fd;
	atomic_store_explicit((_Atomic uint64_t *)&seg->magic, SH_MAGIC,
			      memory_order_release);
	return seg;
}

void uroce_sh_open(struct uroce_nic *nic)
{
	const struct uroce_config *cfg = nic->cfg;
	struct uroce_sh *sh;

	if (!cfg->shm || cfg->pcap[0] || cfg->faults.enabled) {
		if (cfg->debug)
			uroce_log("same-host path off (%s): every packet goes "
				  "over UDP",
				  !cfg->shm ? "UROCE_SHM=0"
				  : cfg->pcap[0] ? "capturing (UROCE_PCAP)"
						 : "fault injection (UROCE_FAULTS)");
		return;
	}
	sh = calloc(1, sizeof(*sh));
	if (!sh)
		return;
	pthread_mutex_init(&sh->lock, NULL);
	pthread_mutex_init(&sh->page_lock, NULL);
	sh->fd = -1;
	sh->quiet_calls = ~0u >> 1;	/* no ring traffic yet */
	sh->netns = netns_id();
	seg_name(sh->name, sizeof(sh->name), sh->netns, cfg->udp_port,
		 nic->slot);
	sweep_stale(sh, cfg->udp_port);
	sh->seg = seg_create(nic, sh);
	nic->sh = sh;
}

static void forget_gone_peers(struct uroce_nic *nic, struct uroce_sh *sh);

void uroce_sh_exit(struct uroce_nic *nic)
{
	struct uroce_sh *sh = nic->sh;

	if (!sh)
		return;
	if (sh->seg)
		shm_unlink(sh->name);
	/* the program may exit from anywhere: a thread of ours may hold the
	 * lock, and the next process to open the device sweeps instead */
	if (!pthread_mutex_trylock(&sh->lock)) {
		forget_gone_peers(nic, sh);
		pthread_mutex_unlock(&sh->lock);
	}
}

void uroce_sh_close(struct uroce_nic *nic)
{
	struct uroce_sh *sh = nic->sh;

	if (!sh)
		return;
	pthread_mutex_lock(&sh->lock);
	forget_gone_peers(nic, sh);
	pthread_mutex_unlock(&sh->lock);
	while (sh->all) {
		struct uroce_sh_peer *p = sh->all;

		sh->all = p->next;
		if (p->doorbell >= 0)
			close(p->doorbell);
		pthread_mutex_destroy(&p->ring_lock);
		munmap(p->seg, sizeof(*p->seg));
		free(p);
	}
	if (sh->seg) {
		shm_unlink(sh->name);
		munmap(sh->seg, sizeof(*sh->seg));
		close(sh->fd);
	}
	pthread_mutex_destroy(&sh->page_lock);
	pthread_mutex_destroy(&sh->lock);
	free(sh);
	nic->sh = NULL;
}

/* ---- peers' segments ----------------------------------------------------- */

/* Reads a header's first 16 bytes (magic, nonce) out of the process that
 * a segment names (its pid, and where the header is there): proves that the
 * kernel lets us reach it and that the pid is still the segment's owner. */
static int owner_probe(pid_t pid, uint64_t self, uint64_t nonce)
{
	uint64_t probe[2];
	struct iovec local = { probe, sizeof(probe) };
	struct iovec remote = { (void *)(uintptr_t)self, sizeof(probe) };

	if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != sizeof(probe))
		return errno ? errno : EIO;
	return probe[0] == SH_MAGIC && probe[1] == nonce ? 0 : ESRCH;
}

static int peer_probe(const struct sh_seg *seg)
{
	return owner_probe(seg->pid, seg->self, seg->nonce);
}

/* What a probe's error says of a segment's owner: gone when its pid is
 * (ESRCH), holds another nonce (ESRCH), or has nothing mapped where the
 * header was (EFAULT: a reused pid).  EPERM says nothing. */
static bool owner_gone(int err)
{
	return err == ESRCH || err == EFAULT;
}

bool uroce_sh_peer_gone(const struct uroce_sh_peer *peer)
{
	return owner_gone(peer_probe(peer->seg));
}

/*
 * A peer killed without closing (SIGKILL, a crash) left its segment's name;
 * the first of its peers to notice it gone removes it (when it maps that
 * slot again or closes its device, even at exit), so that nothing of it
 * outlives them.  Only the file we mapped: a new owner of the slot makes a
 * new one.
 */
static void unlink_gone(struct uroce_nic *nic, struct uroce_sh *sh,
			struct uroce_sh_peer *p)
{
	struct stat st;
	char name[80];
	int fd;

	seg_name(name, sizeof(name), sh->netns, nic->cfg->udp_port, p->slot);
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (!fstat(fd, &st) && st.st_ino == p->ino)
		shm_unlink(name);
	close(fd);
}

/* Called with sh->lock held. */
static void forget_gone_peers(struct uroce_nic *nic, struct uroce_sh *sh)
{
	for (struct uroce_sh_peer *p = sh->all; p; p = p->next)
		if (uroce_sh_peer_gone(p))
			unlink_gone(nic, sh, p);
}

_Static_assert(offsetof(struct sh_seg, pid) == 3 * sizeof(uint64_t),
	       "sweep_stale reads the header's first fields");

/* A segment still being made has no magic yet; one left so long has no
 * maker any more. */
#define SWEEP_UNFINISHED_S 60

/*
 * A process killed without closing (SIGKILL, a crash) leaves its segment's
 * name behind, and slots are drawn at random, so such names would pile up
 * in /dev/shm.  Opening the device removes those of this user, port and
 * namespace whose owner is gone: its pid is, or no longer holds the
 * segment's nonce (a reused pid).
 */
static void sweep_stale(const struct uroce_sh *sh, uint16_t port)
{
	char prefix[80], name[300];
	struct dirent *d;
	size_t plen;
	DIR *dir;

	dir = opendir("/dev/shm");
	if (!dir)
		return;
	snprintf(prefix, sizeof(prefix), "uroce.%llu.%u.%u.",
		 (unsigned long long)sh->netns, port, (unsigned)getuid());
	plen = strlen(prefix);
	while ((d = readdir(dir))) {
		struct {
			uint64_t magic, nonce, self;
			int32_t pid;
		} h;
		struct stat st, now;
		bool stale;
		int fd;

		if (strncmp(d->d_name, prefix, plen) ||
		    !strcmp(d->d_name, sh->name + 1))
			continue;
		snprintf(name, sizeof(name), "/%s", d->d_name);
		fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) || st.st_uid != getuid() ||
		    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
			close(fd);
			continue;
		}
		close(fd);
		if (h.magic != SH_MAGIC)
			stale = time(NULL) - st.st_mtime > SWEEP_UNFINISHED_S;
		else
			stale = pid_gone(h.pid) ||
				owner_gone(owner_probe(h.pid, h.self, h.nonce));
		/* the same file still: not one a new owner has just made */
		if (stale && !fstatat(dirfd(dir), d->d_name, &now, 0) &&
		    now.st_ino == st.st_ino)
			shm_unlink(name);
	}
	closedir(dir);
}

/*
 * Our packet ring in a peer's segment, and a duplicate of its engine's
 * eventfd to wake it with (pidfd_getfd: the permission cross-memory access
 * needs too).  Without them the peer's QPs get our packets over UDP.
 */
static void peer_ring(struct uroce_nic *nic, struct uroce_sh_peer *peer,
		      int fd, const char *name)
{
	struct sh_ring *ring = &peer->seg->rings[nic->slot];
	int pidfd, err = 0;

	peer->doorbell = -1;
	pidfd = pidfd_open(peer->pid, 0);
	if (pidfd >= 0) {
		peer->doorbell = pidfd_getfd(pidfd, peer->seg->wake_fd, 0);
		err = errno;
		close(pidfd);
	} else {
		err = errno;
	}
	if (peer->doorbell < 0) {
		debug(nic, "same-host path: %s: no doorbell (%s): packets go "
			   "over UDP", name, err);
		return;
	}
	if (fallocate(fd, 0, (off_t)((char *)ring - (char *)peer->seg),
		      sizeof(*ring))) {
		debug(nic, "same-host path: %s: no room for a ring (%s): "
			   "packets go over UDP", name, errno);
		close(peer->doorbell);
		peer->doorbell = -1;
		return;
	}
	/* a process that had our slot before us may have left packets:
	 * the consumer sees the jump and skips them */
	atomic_store(&ring->head, atomic_load(&ring->tail));
	atomic_fetch_or_explicit(&peer->seg->ring_mask[nic->slot / 64],
				 1ull << (nic->slot % 64),
				 memory_order_release);
	peer->ring = ring;
}

static struct uroce_sh_peer *peer_map(struct uroce_nic *nic,
				      struct uroce_sh *sh, unsigned slot)
{
	struct uroce_sh_peer *peer;
	struct sh_seg *seg;
	struct stat st;
	char name[80];
	int fd, err;

	seg_name(name, sizeof(name), sh->netns, nic->cfg->udp_port, slot);
	fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (fd < 0) {
		/* ENOENT: the peer runs with the path off, or is another
		 * user's process */
		debug(nic, "same-host path: %s: %s: using UDP", name, errno);
		return NULL;
	}
	if (fstat(fd, &st) || st.st_size != (off_t)sizeof(*seg) ||
	    st.st_uid != getuid()) {
		close(fd);
		debug(nic, "same-host path: %s: %s: using UDP", name, EPROTO);
		return NULL;
	}
	seg = mmap(NULL, sizeof(*seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   0);
	if (seg == MAP_FAILED) {
		close(fd);
		debug(nic, "same-host path: mmap %s: %s: using UDP", name,
		      errno);
		return NULL;
	}
	err = atomic_load_explicit((_Atomic uint64_t *)&seg->magic,
				   memory_order_acquire) != SH_MAGIC ||
			      seg->slot != slot
		      ? EPROTO
		      : peer_probe(seg);
	if (err) {
		close(fd);
		munmap(seg, sizeof(*seg));
		if (err == EPERM)
			debug(nic, "same-host path: %s: the kernel refuses "
				   "cross-memory access (%s: Yama "
				   "ptrace_scope, seccomp or a container): "
				   "using UDP", name, err);
		else
			debug(nic, "same-host path: %s: owner gone (%s): "
				   "using UDP", name, err);
		return NULL;
	}
	peer = calloc(1, sizeof(*peer));
	if (!peer) {
		close(fd);
		munmap(seg, sizeof(*seg));
		return NULL;
	}
	peer->seg = seg;
	peer->pid = seg->pid;
	peer->slot = slot;
	peer->ino = st.st_ino;
	pthread_mutex_init(&peer->ring_lock, NULL);
	peer_ring(nic, peer, fd, name);
	close(fd);
	/* our user slot there: a process that had our slot before us may
	 * have died during a copy */
	struct sh_user *me = &seg->users[nic->slot];
	if (atomic_load(&me->pid) != getpid()) {
		atomic_store(&me->busy, 0);
		atomic_store(&me->pid, getpid());
	}
	atomic_fetch_or(&seg->user_mask[nic->slot / 64],
			1ull << (nic->slot % 64));
	peer->next = sh->all;
	sh->all = peer;
	return peer;
}

/* Whether addr is one of this host's: a GID of ours, or loopback. */
static bool addr_local(const struct uroce_nic *nic,
		       const union uroce_sockaddr *addr)
{
	union uroce_sockaddr a;

	if (addr->sa.sa_family == AF_INET &&
	    (ntohl(addr->in4.sin_addr.s_addr) >> 24) == 127)
		return true;
	if (addr->sa.sa_family == AF_INET6 &&
	    IN6_IS_ADDR_LOOPBACK(&addr->in6.sin6_addr))
		return true;
	for (int i = 0; i < nic->num_gids; i++) {
		uroce_gid_to_sockaddr(&nic->gids[i].gid, 0, &a);
		if (uroce_sockaddr_same_ip(&a, addr))
			return true;
	}
	return false;
}

void uroce_sh_attach(struct uroce_qp *qp)
{
	struct uroce_nic *nic = qp->nic;
	struct uroce_sh *sh = nic->sh;
	uint32_t dest = qp->attr.dest_qp_num;
	unsigned slot = uroce_qpn_slot(dest);
	struct uroce_sh_peer *peer;

	qp->sh_peer = NULL;
	if (!sh || qp->ibqpx.qp_base.qp_type != IBV_QPT_RC || !slot ||
	    !addr_local(nic, &qp->peer))
		return;
	pthread_mutex_lock(&sh->lock);
	/* mapped again only once its owner is gone: a live owner's ring
	 * must have one producer here, and so one peer struct */
	peer = sh->by_slot[slot];
	if (peer && uroce_sh_peer_gone(peer)) {
		unlink_gone(nic, sh, peer);
		peer = NULL;
	}
	if (!peer)
		peer = sh->by_slot[slot] = peer_map(nic, sh, slot);
	pthread_mutex_unlock(&sh->lock);
	qp->sh_dest = dest & UROCE_MAX_QP;
	qp->sh_peer = peer;
}
