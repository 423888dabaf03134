/*
 * An MPI job over uroce (through UCX): ping-pong between ranks 0 and 1 at
 * a few sizes, allreduce, alltoall, and one-sided MPI_Put / MPI_Get into a
 * window, every result checked.  Rank 0 prints the ping-pong latency and
 * bandwidth, then "mpi_check: N ranks passed".
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "mpi_check: rank %d: %s:%d: %s\n",    \
				rank, __FILE__, __LINE__, #cond);              \
			MPI_Abort(MPI_COMM_WORLD, 1);                          \
		}                                                              \
	} while (0)

static int rank, nranks;

static uint8_t pattern(size_t i, int round)
{
	return (uint8_t)(i * 7 + (size_t)round * 13 + 1);
}

/* what the echoing rank sends back */
static uint8_t echoed(size_t i, int round)
{
	return (uint8_t)(0xFF ^ pattern(i, round));
}

static void pingpong(void)
{
	static const size_t sizes[] = { 8, 4096, 1 << 20 };
	/* the first rounds also set up the connection: not timed */
	enum { WARMUP = 20, ROUNDS = 200 };

	if (rank > 1)
		return;
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t len = sizes[s];
		uint8_t *buf = malloc(len);
		double t0 = 0;

		CHECK(buf);
		for (int r = 0; r < WARMUP + ROUNDS; r++) {
			if (r == WARMUP)
				t0 = MPI_Wtime();
			if (rank == 0) {
				for (size_t i = 0; i < len; i++)
					buf[i] = pattern(i, r);
				MPI_Send(buf, (int)len, MPI_BYTE, 1, r,
					 MPI_COMM_WORLD);
				MPI_Recv(buf, (int)len, MPI_BYTE, 1, r,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (size_t i = 0; i < len; i++)
					CHECK(buf[i] == echoed(i, r));
			} else {
				MPI_Recv(buf, (int)len, MPI_BYTE, 0, r,
					 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (size_t i = 0; i < len; i++) {
					CHECK(buf[i] == pattern(i, r));
					buf[i] = echoed(i, r);
				}
				MPI_Send(buf, (int)len, MPI_BYTE, 0, r,
					 MPI_COMM_WORLD);
			}
		}
		if (rank == 0) {
			double us = (MPI_Wtime() - t0) / ROUNDS / 2 * 1e6;

			printf("mpi_check: ping-pong %zu bytes: %.2f us one way, "
			       "%.1f MB/s\n", len, us, (double)len / us);
		}
		free(buf);
	}
}

static void collectives(void)
{
	long mine = rank + 1, sum = 0;
	int *out = malloc(sizeof(int) * (size_t)nranks);
	int *in = malloc(sizeof(int) * (size_t)nranks);

	CHECK(out && in);
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	CHECK(sum == (long)nranks * (nranks + 1) / 2);
	for (int i = 0; i < nranks; i++)
		out[i] = rank * 1000 + i;
	MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
	for (int i = 0; i < nranks; i++)
		CHECK(in[i] == i * 1000 + rank);
	free(out);
	free(in);
}

/* Each rank puts its number into its right neighbour's window, then gets
 * its left neighbour's whole window back. */
static void one_sided(void)
{
	enum { N = 1024 };
	int *base, *got = malloc(sizeof(int) * N);
	int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	int mine[N];
	MPI_Win win;

	CHECK(got);
	MPI_Win_allocate(sizeof(int) * N, sizeof(int), MPI_INFO_NULL,
			 MPI_COMM_WORLD, &base, &win);
	for (int i = 0; i < N; i++) {
		base[i] = -1;
		mine[i] = rank * N + i;
	}
	MPI_Win_fence(0, win);
	MPI_Put(mine, N, MPI_INT, right, 0, N, MPI_INT, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < N; i++)
		CHECK(base[i] == left * N + i);
	MPI_Get(got, N, MPI_INT, left, 0, N, MPI_INT, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < N; i++)
		CHECK(got[i] == ((left + nranks - 1) % nranks) * N + i);
	MPI_Win_free(&win);
	free(got);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	pingpong();
	MPI_Barrier(MPI_COMM_WORLD);
	collectives();
	one_sided();
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: %d ranks passed\n", nranks);
	MPI_Finalize();
	return 0;
}
