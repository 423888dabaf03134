/*
 * The generated stand-ins, called through rdma-core's own prototypes and
 * bound to their versions at link time as perftest and pyverbs bind them,
 * must fail as the real providers do for a device they do not drive.  The
 * stubs ignore their arguments, so the calls pass NULL objects.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>

#include <infiniband/efadv.h>
#include <infiniband/mlx5dv.h>

static int failures;

#define CHECK(cond)                                                         \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,  \
				#cond);                                     \
			failures++;                                         \
		}                                                           \
	} while (0)

/* A pointer result: NULL with errno EOPNOTSUPP. */
#define CHECK_NULL(call)                                                    \
	do {                                                                \
		errno = 0;                                                  \
		CHECK((call) == NULL);                                      \
		CHECK(errno == EOPNOTSUPP);                                 \
	} while (0)

/* A -1 result with errno EOPNOTSUPP. */
#define CHECK_MINUS_ONE(call)                                               \
	do {                                                                \
		errno = 0;                                                  \
		CHECK((call) == -1);                                        \
		CHECK(errno == EOPNOTSUPP);                                 \
	} while (0)

int main(void)
{
	struct mlx5dv_context mlx5_attr = { 0 };
	struct efadv_device_attr efa_attr = { 0 };

	CHECK(!mlx5dv_is_supported(NULL));
	CHECK_NULL(mlx5dv_open_device(NULL, NULL));
	CHECK_NULL(mlx5dv_create_qp(NULL, NULL, NULL));
	CHECK(mlx5dv_query_device(NULL, &mlx5_attr) == EOPNOTSUPP);
	CHECK(mlx5dv_devx_general_cmd(NULL, NULL, 0, NULL, 0) == EOPNOTSUPP);
	CHECK(mlx5dv_init_obj(NULL, 0) == EOPNOTSUPP);
	CHECK_MINUS_ONE(mlx5dv_devx_get_event(NULL, NULL, 0));
	CHECK_MINUS_ONE(mlx5dv_vfio_get_events_fd(NULL));
	CHECK(mlx5dv_qp_cancel_posted_send_wrs(NULL, 0) == -EOPNOTSUPP);
	mlx5dv_devx_free_uar(NULL);

	/* The MLX5_1.0 mlx5dv_init_obj, which binaries older than MLX5_1.2
	 * bind to, is a function of its own. */
	int (*init_obj_1_0)(struct mlx5dv_obj *, uint64_t) =
		dlvsym(RTLD_DEFAULT, "mlx5dv_init_obj", "MLX5_1.0");
	CHECK(init_obj_1_0 != NULL);
	if (init_obj_1_0)
		CHECK(init_obj_1_0(NULL, 0) == EOPNOTSUPP);

	CHECK(efadv_query_device(NULL, &efa_attr, sizeof(efa_attr)) ==
	      EOPNOTSUPP);
	CHECK_NULL(efadv_create_qp_ex(NULL, NULL, NULL, 0));
	CHECK_NULL(efadv_create_cq(NULL, NULL, NULL, 0));

	if (failures)
		return 1;
	puts("stubs fail as expected");
	return 0;
}
