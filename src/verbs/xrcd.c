/*
 * XRC domains (ibv_open_xrcd / ibv_close_xrcd).
 *
 * A domain groups the XRC SRQs and target QPs that an XRC request may
 * reach.  Opened with a file descriptor, it is named by that file's inode:
 * opening the same inode again gives the same domain.  Every uroce process
 * is its own NIC, so a domain is shared among the contexts of one process,
 * not across processes as a kernel-backed NIC shares it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "verbs/ops.h"

static pthread_mutex_t xrcd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uroce_xrcd *xrcd_list;	/* the ones opened by inode */

static struct uroce_xrcd *xrcd_find(struct ibv_context *ctx,
				    const struct stat *st)
{
	for (struct uroce_xrcd *x = xrcd_list; x; x = x->next)
		if (x->ibxrcd.context == ctx && x->dev == st->st_dev &&
		    x->ino == st->st_ino)
			return x;
	return NULL;
}

struct ibv_xrcd *uroce_open_xrcd(struct ibv_context *ctx,
				 struct ibv_xrcd_init_attr *attr)
{
	struct uroce_xrcd *x = NULL;
	struct stat st;
	int err = 0;

	/* both are required (man ibv_open_xrcd) */
	if (!attr || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
	    !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
	    (attr->comp_mask & ~(IBV_XRCD_INIT_ATTR_FD |
				 IBV_XRCD_INIT_ATTR_OFLAGS)) ||
	    (attr->oflags & ~(O_CREAT | O_EXCL))) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->fd >= 0 && fstat(attr->fd, &st))
		return NULL;	/* EBADF from fstat */

	pthread_mutex_lock(&xrcd_lock);
	if (attr->fd >= 0)
		x = xrcd_find(ctx, &st);
	if (x) {
		if (attr->oflags & O_EXCL)
			err = EEXIST;
		else
			x->opens++;
		goto out;
	}
	/* a named domain is created only when asked to */
	if (attr->fd >= 0 && !(attr->oflags & O_CREAT)) {
		err = EINVAL;
		goto out;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		err = ENOMEM;
		goto out;
	}
	x->ibxrcd.context = ctx;
	x->opens = 1;
	atomic_init(&x->use_cnt, 0);
	if (attr->fd >= 0) {
		x->dev = st.st_dev;
		x->ino = st.st_ino;
		x->next = xrcd_list;
		xrcd_list = x;
	}
out:
	pthread_mutex_unlock(&xrcd_lock);
	if (err) {
		errno = err;
		return NULL;
	}
	return &x->ibxrcd;
}

int uroce_close_xrcd(struct ibv_xrcd *ibxrcd)
{
	struct uroce_xrcd *x;
	int err = 0;

	if (!ibxrcd)
		return EINVAL;
	x = to_uxrcd(ibxrcd);
	pthread_mutex_lock(&xrcd_lock);
	if (x->opens == 1 && atomic_load(&x->use_cnt)) {
		err = EBUSY;
	} else if (--x->opens == 0) {
		for (struct uroce_xrcd **pp = &xrcd_list; *pp; pp = &(*pp)->next) {
			if (*pp == x) {
				*pp = x->next;
				break;
			}
		}
		free(x);
	}
	pthread_mutex_unlock(&xrcd_lock);
	return err;
}
