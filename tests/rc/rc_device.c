/*
 * rc.device: the drop-in took effect.  Run with LD_LIBRARY_PATH=<build>/lib,
 * the program (linked against the system libibverbs) must see uroce's single
 * RoCE device as the first device, because programs such as ibv_rc_pingpong
 * take the first one when not told otherwise.  Every other test requires this
 * one (ctest fixture), so a wrong LD_LIBRARY_PATH shows up here once, not as
 * twenty confusing failures.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "harness.h"

static void check(struct h_proc *p)
{
	struct ibv_device **list;
	union ibv_gid want = { 0 };
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list)
		h_fail("ibv_get_device_list: %s", strerror(errno));
	H_CHECK(n >= 1);
	if (strcmp(ibv_get_device_name(list[0]), H_DEVICE_NAME))
		h_fail("first device is \"%s\", want \"%s\"",
		       ibv_get_device_name(list[0]), H_DEVICE_NAME);
	ibv_free_device_list(list);

	H_CHECK(!strcmp(ibv_get_device_name(p->ctx->device), H_DEVICE_NAME));
	H_EQ(p->port.state, IBV_PORT_ACTIVE);
	H_EQ(p->port.link_layer, IBV_LINK_LAYER_ETHERNET);
	H_EQ(p->port.active_mtu, IBV_MTU_4096);
	/* GID 0 is the IPv4-mapped loopback address, so that two processes on
	 * one host reach each other with gid index 0. */
	want.raw[10] = 0xff;
	want.raw[11] = 0xff;
	inet_pton(AF_INET, "127.0.0.1", &want.raw[12]);
	h_expect_mem(p->gid.raw, want.raw, sizeof(want.raw), "GID index 0");
}

int main(void)
{
	const struct h_test t = {
		.name = "rc.device",
		.nroles = 1,
		.role = { check },
		.deadline_s = 10,
	};

	return h_main(&t);
}
