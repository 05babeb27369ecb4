/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto_impl: what the codec (proto.c) and the rules it applies
 * (proto_check.c) share. Not an interface: nothing outside proto/ includes
 * it.
 */
#ifndef LDR_PROTO_IMPL_H
#define LDR_PROTO_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* The rules of a message of this type, applied to msg's payload: 0, or
 * -EPROTO with why (when not NULL and cap > 0) naming the first broken
 * ("HELLO: world 0, must be >= 1"). */
int proto_check_payload(uint32_t type, const struct proto_msg *msg, char *why, size_t cap);

#endif
