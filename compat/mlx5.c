/*
 * Stub libmlx5.so.1: the mlx5dv_* functions perftest imports.  uroce0 is not
 * a Mellanox device, so each fails the way rdma-core's libmlx5 fails for a
 * device it does not drive: pointer results are NULL with errno EOPNOTSUPP,
 * int results are EOPNOTSUPP itself (mlx5dv's int verbs return an errno
 * value rather than setting errno).
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/mlx5dv.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device,
					      struct mlx5dv_context_attr *attr)
{
	(void)device;
	(void)attr;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context,
				       struct ibv_qp_init_attr_ex *qp_attr,
				       struct mlx5dv_qp_init_attr *mlx5_qp_attr)
{
	(void)context;
	(void)qp_attr;
	(void)mlx5_qp_attr;
	errno = EOPNOTSUPP;
	return NULL;
}

/* Only a QP from mlx5dv_create_qp has an mlx5dv_qp_ex, and that never
 * succeeds here. */
EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
	(void)qp;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in,
				   size_t inlen, void *out, size_t outlen)
{
	(void)context;
	(void)in;
	(void)inlen;
	(void)out;
	(void)outlen;
	return EOPNOTSUPP;
}

EXPORT struct mlx5dv_mkey *
mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr *mkey_init_attr)
{
	(void)mkey_init_attr;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey *mkey)
{
	(void)mkey;
	return EOPNOTSUPP;
}

EXPORT int mlx5dv_crypto_login(struct ibv_context *context,
			       struct mlx5dv_crypto_login_attr *login_attr)
{
	(void)context;
	(void)login_attr;
	return EOPNOTSUPP;
}

EXPORT struct mlx5dv_dek *mlx5dv_dek_create(struct ibv_context *context,
					    struct mlx5dv_dek_init_attr *init_attr)
{
	(void)context;
	(void)init_attr;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int mlx5dv_dek_destroy(struct mlx5dv_dek *dek)
{
	(void)dek;
	return EOPNOTSUPP;
}
