/*
 * rc.dlclose: a program that dlopens a library linked against libibverbs
 * and librdmacm, uses a QP through it and dlcloses it with the QPs, the
 * listening id and uroce's threads still there (Open MPI's ofi MTL unloads
 * libfabric at MPI_Finalize; DAPL unloads its providers), several times,
 * exits 0.  uroce's libraries stay mapped once loaded (-z nodelete), since
 * its threads and the CM's callbacks run in them.
 *
 * Usage: rc_dlclose <path of the library>
 */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

enum { ROUNDS = 4 };

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <library>\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < ROUNDS; i++) {
		void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
		int (*use)(void);

		if (!lib) {
			fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
			return 1;
		}
		*(void **)&use = dlsym(lib, "dl_verbs_use");
		if (!use || use()) {
			fprintf(stderr, "FAIL: round %d: the library's verbs failed\n",
				i);
			return 1;
		}
		if (dlclose(lib)) {
			fprintf(stderr, "FAIL: dlclose: %s\n", dlerror());
			return 1;
		}
		/* the threads go on meanwhile: let them run */
		nanosleep(&(struct timespec){ 0, 50 * 1000 * 1000 }, NULL);
	}
	printf("PASS: rc.dlclose: %d rounds of dlopen, verbs, dlclose\n", ROUNDS);
	return 0;
}
