/*
 * Stub libefa.so.1: the efadv_* functions perftest imports.  uroce0 is not
 * an EFA device, so each fails as rdma-core's libefa does for a device it
 * does not drive: efadv_query_device returns EOPNOTSUPP, efadv_create_qp_ex
 * NULL with errno EOPNOTSUPP.
 */
#include <errno.h>
#include <stddef.h>

#include <infiniband/efadv.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int efadv_query_device(struct ibv_context *ibvctx,
			      struct efadv_device_attr *attr, uint32_t inlen)
{
	(void)ibvctx;
	(void)attr;
	(void)inlen;
	return EOPNOTSUPP;
}

EXPORT struct ibv_qp *efadv_create_qp_ex(struct ibv_context *ibvctx,
					 struct ibv_qp_init_attr_ex *attr_ex,
					 struct efadv_qp_init_attr *efa_attr,
					 uint32_t inlen)
{
	(void)ibvctx;
	(void)attr_ex;
	(void)efa_attr;
	(void)inlen;
	errno = EOPNOTSUPP;
	return NULL;
}
