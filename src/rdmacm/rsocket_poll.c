/*
 * rpoll and rselect: poll(2) and select(2) over a mix of rsockets and
 * ordinary fds.  An rsocket is ready by its own state; while none is, the
 * caller sleeps in poll() on the rsockets' CQ completion channels and
 * rdma_cm event channels next to the ordinary fds.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include "rsocket.h"

/* What an rsocket would report to poll() now (lock held). */
static short rs_revents(struct rsocket *rs, short events)
{
	short rev = 0;

	if (rs->state & RS_LISTENING) {
		/* a connection waits iff its CONNECT_REQUEST is queued */
		struct pollfd p = { .fd = rs->chan->fd, .events = POLLIN };

		if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN))
			rev |= POLLIN;
		return rev & events;
	}
	rs_progress(rs);
	if (rs->state & RS_OPENING)
		return 0;
	if (rs->state & RS_CONNECT_ERROR)
		rev = POLLOUT | POLLERR | POLLHUP | (events & POLLIN);
	else if (rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)) {
		if (rs_have_rdata(rs) || !(rs->state & RS_READABLE))
			rev |= POLLIN;
		if (rs_can_send(rs) || !(rs->state & RS_WRITABLE))
			rev |= POLLOUT;
		if (!(rs->state & RS_READABLE))
			rev |= POLLRDHUP;
		/* a hang-up only once the data before it is read: a peer
		 * that wrote and closed must not look like a reset */
		if ((rs->state & RS_DISCONNECTED) && !rs_have_rdata(rs))
			rev |= POLLHUP;
		if (rs->state & RS_ERROR)
			rev |= POLLERR;
	} else {
		/* neither connected nor listening, as TCP reports it */
		rev = POLLOUT | POLLHUP;
	}
	return rev & (events | POLLERR | POLLHUP);
}

static int remaining_ms(const struct timespec *deadline)
{
	struct timespec now;
	long long ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (deadline->tv_sec - now.tv_sec) * 1000LL +
	     (deadline->tv_nsec - now.tv_nsec) / 1000000;
	return ms < 0 ? 0 : (int)ms;
}

/* One entry of the poll() set: an ordinary fd of the caller's, or one of
 * an rsocket's two channels. */
struct slot {
	nfds_t i;		/* in the caller's array */
	bool comp;		/* the rsocket's CQ channel */
};

RS_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct rsocket **rss;
	struct pollfd *set;
	struct slot *slots;
	struct timespec deadline;
	bool any = false;
	int ret = -1;

	rss = calloc(nfds ? nfds : 1, sizeof(*rss));
	if (!rss) {
		errno = ENOMEM;
		return -1;
	}
	for (nfds_t i = 0; i < nfds; i++) {
		rss[i] = fds[i].fd >= 0 ? rs_get(fds[i].fd) : NULL;
		any |= rss[i] != NULL;
	}
	if (!any) {
		free(rss);
		return poll(fds, nfds, timeout);
	}
	set = calloc(2 * nfds, sizeof(*set));
	slots = calloc(2 * nfds, sizeof(*slots));
	if (!set || !slots) {
		errno = ENOMEM;
		goto out;
	}
	if (timeout > 0) {
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += timeout / 1000;
		deadline.tv_nsec += (timeout % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
	}
	for (;;) {
		int ready = 0, sleep_ms, m = 0, n;

		for (nfds_t i = 0; i < nfds; i++) {
			fds[i].revents = 0;
			if (!rss[i])
				continue;
			pthread_mutex_lock(&rss[i]->lock);
			fds[i].revents = rs_revents(rss[i], fds[i].events);
			pthread_mutex_unlock(&rss[i]->lock);
			ready += fds[i].revents != 0;
		}
		sleep_ms = ready || timeout == 0 ? 0
			   : timeout < 0	   ? -1
						   : remaining_ms(&deadline);
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsocket *rs = rss[i];

			if (!rs) {
				set[m] = (struct pollfd){ fds[i].fd,
							  fds[i].events, 0 };
				slots[m++] = (struct slot){ i, false };
				continue;
			}
			if (!sleep_ms)
				continue;
			pthread_mutex_lock(&rs->lock);
			set[m] = (struct pollfd){ rs->chan->fd, POLLIN, 0 };
			slots[m++] = (struct slot){ i, false };
			if (rs->cq && !(rs->state & RS_LISTENING)) {
				/* a completion that beat the arming is
				 * already processed: look again, no sleep */
				if (rs_arm(rs))
					sleep_ms = 0;
				set[m] = (struct pollfd){ rs->comp->fd,
							  POLLIN, 0 };
				slots[m++] = (struct slot){ i, true };
			}
			pthread_mutex_unlock(&rs->lock);
		}
		n = poll(set, m, sleep_ms);
		if (n < 0)
			goto out;
		for (int k = 0; k < m; k++) {
			struct rsocket *rs = rss[slots[k].i];

			if (!rs) {
				fds[slots[k].i].revents = set[k].revents;
				ready += set[k].revents != 0;
			} else if (slots[k].comp && set[k].revents) {
				pthread_mutex_lock(&rs->lock);
				rs_consume_cq_event(rs);
				pthread_mutex_unlock(&rs->lock);
			}
		}
		if (ready) {
			ret = ready;
			break;
		}
		if (timeout == 0 || (timeout > 0 && !remaining_ms(&deadline))) {
			ret = 0;
			break;
		}
	}
out:
	for (nfds_t i = 0; i < nfds; i++)
		if (rss[i])
			rs_put(rss[i]);
	free(rss);
	free(set);
	free(slots);
	return ret;
}

RS_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds,
		      fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *fds;
	int n = 0, ret, timeout_ms = -1;

	if (nfds < 0 || nfds > FD_SETSIZE) {
		errno = EINVAL;
		return -1;
	}
	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_usec < 0) {
			errno = EINVAL;
			return -1;
		}
		timeout_ms = (int)(timeout->tv_sec * 1000 +
				   (timeout->tv_usec + 999) / 1000);
	}
	fds = calloc(nfds ? nfds : 1, sizeof(*fds));
	if (!fds) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++) {
		short events = 0;

		if (readfds && FD_ISSET(fd, readfds))
			events |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			events |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			events |= POLLPRI;
		if (events)
			fds[n++] = (struct pollfd){ fd, events, 0 };
	}
	ret = rpoll(fds, n, timeout_ms);
	if (ret < 0) {
		free(fds);
		return -1;
	}
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	ret = 0;
	for (int k = 0; k < n; k++) {
		short rev = fds[k].revents;

		if (rev & POLLNVAL) {
			free(fds);
			errno = EBADF;
			return -1;
		}
		/* select reports hang-ups and errors as readable/writable */
		if (readfds && (fds[k].events & POLLIN) &&
		    (rev & (POLLIN | POLLHUP | POLLERR))) {
			FD_SET(fds[k].fd, readfds);
			ret++;
		}
		if (writefds && (fds[k].events & POLLOUT) &&
		    (rev & (POLLOUT | POLLERR))) {
			FD_SET(fds[k].fd, writefds);
			ret++;
		}
		if (exceptfds && (fds[k].events & POLLPRI) && (rev & POLLPRI)) {
			FD_SET(fds[k].fd, exceptfds);
			ret++;
		}
	}
	free(fds);
	return ret;
}
