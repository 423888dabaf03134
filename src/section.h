/*
 * A section count: a counter a thread increments as it enters a section and
 * again as it leaves (odd while inside), so that another thread, having
 * unpublished something the section may have picked up, can wait for the
 * section it may be in to end (uroce_section_wait).
 */
#ifndef UROCE_SECTION_H
#define UROCE_SECTION_H

#include <stdatomic.h>
#include <time.h>

static inline void uroce_section_wait(atomic_uint *count)
{
	unsigned seq = atomic_load(count);
	struct timespec pause = { 0, 20000 };

	/* even: outside; whatever it loads next already sees the unpublish */
	if (!(seq & 1))
		return;
	while (atomic_load(count) == seq)
		nanosleep(&pause, NULL);
}

#endif
