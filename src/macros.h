/*
 * The few macros every part of uroce uses.
 */
#ifndef UROCE_MACROS_H
#define UROCE_MACROS_H



#include <stddef.h>

#define UROCE_EXPORT __attribute__((visibility("default")))

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
