/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto_check: the rules each message's values obey (proto_impl.h),
 * written once for both sides: the encoder applies them before it writes
 * and the decoder after it reads, so both refuse the same messages. Each
 * reason names the message and the field, as the ERROR frame sent back
 * will.
 */
#include "proto/proto_impl.h"

#include <errno.h>
#include <string.h>

#include "common/errtext.h"

static int proto_terminated(const char *s, size_t cap)
{
	return strnlen(s, cap) < cap;
}

long proto_word_bad_byte(const char *s)
{
	for (long i = 0; s[i]; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return i;
	return -1;
}

static int proto_check_hello(const struct proto_hello *m, char *why, size_t cap)
{
	long bad;
	if (!proto_terminated(m->pipeline, sizeof(m->pipeline)) ||
	    !proto_terminated(m->client_name, sizeof(m->client_name)) ||
	    !proto_terminated(m->resume, sizeof(m->resume)) ||
	    !proto_terminated(m->split, sizeof(m->split)) ||
	    !proto_terminated(m->group, sizeof(m->group)) ||
	    !proto_terminated(m->job, sizeof(m->job)) ||
	    !proto_terminated(m->declaration, sizeof(m->declaration)))
		return errtext(why, cap, -EPROTO,
			       "HELLO: a string is not NUL-terminated within its buffer");
	if (m->delivery > PROTO_DELIVERY_MAX)
		return errtext(why, cap, -EPROTO, "HELLO: delivery %u unknown (0 host, 1 device)",
			       m->delivery);
	if (m->world < 1)
		return errtext(why, cap, -EPROTO, "HELLO: world 0, must be >= 1");
	if (m->rank >= m->world)
		return errtext(why, cap, -EPROTO, "HELLO: rank %u >= world %u", m->rank, m->world);
	if (m->pipeline[0] == '\0' && m->declaration[0] == '\0')
		return errtext(why, cap, -EPROTO, "HELLO: pipeline name is empty and no pipeline "
			       "is declared");
	if (m->pipeline[0] && (m->declaration[0] || m->job[0]))
		return errtext(why, cap, -EPROTO, "HELLO: a pipeline name and a declaration (or a "
			       "job key): exactly one of a name and a declaration");
	if (m->declaration[0] && !m->job[0])
		return errtext(why, cap, -EPROTO, "HELLO: a declaration without a job key");
	if ((bad = proto_word_bad_byte(m->job)) >= 0)
		return errtext(why, cap, -EPROTO, "HELLO: job byte %ld is 0x%02x, outside "
			       "0x21..0x7e (printable ASCII, no space)", bad,
			       (unsigned char)m->job[bad]);
	for (long i = 0; m->declaration[i]; i++) {
		unsigned char ch = (unsigned char)m->declaration[i];
		if ((ch < 0x20 || ch > 0x7e) && ch != '\n' && ch != '\t')
			return errtext(why, cap, -EPROTO, "HELLO: declaration byte %ld is 0x%02x, "
				       "outside printable ASCII, tab and newline", i, ch);
	}
	if ((bad = proto_word_bad_byte(m->pipeline)) >= 0)
		return errtext(why, cap, -EPROTO, "HELLO: pipeline byte %ld is 0x%02x, outside "
			       "0x21..0x7e (printable ASCII, no space)", bad,
			       (unsigned char)m->pipeline[bad]);
	if ((bad = proto_word_bad_byte(m->resume)) >= 0)
		return errtext(why, cap, -EPROTO, "HELLO: resume byte %ld is 0x%02x, outside "
			       "0x21..0x7e (printable ASCII, no space)", bad,
			       (unsigned char)m->resume[bad]);
	if ((bad = proto_word_bad_byte(m->split)) >= 0)
		return errtext(why, cap, -EPROTO, "HELLO: split byte %ld is 0x%02x, outside "
			       "0x21..0x7e (printable ASCII, no space)", bad,
			       (unsigned char)m->split[bad]);
	if ((bad = proto_word_bad_byte(m->group)) >= 0)
		return errtext(why, cap, -EPROTO, "HELLO: group byte %ld is 0x%02x, outside "
			       "0x21..0x7e (printable ASCII, no space)", bad,
			       (unsigned char)m->group[bad]);
	if (m->group_size < 1 || m->group_size > PROTO_GROUP_SIZE_MAX)
		return errtext(why, cap, -EPROTO, "HELLO: group_size %u, must be 1..%d (1 = no group)",
			       m->group_size, PROTO_GROUP_SIZE_MAX);
	if (m->group_size == 1 && m->group[0])
		return errtext(why, cap, -EPROTO, "HELLO: a group key with group_size 1 (a group of "
			       "one is no group: send an empty group key)");
	if (m->group_size > 1 && !m->group[0])
		return errtext(why, cap, -EPROTO, "HELLO: group_size %u without a group key",
			       m->group_size);
	if (m->flags & ~PROTO_HELLO_FLAGS_KNOWN)
		return errtext(why, cap, -EPROTO, "HELLO: unknown flag bits 0x%x",
			       m->flags & ~PROTO_HELLO_FLAGS_KNOWN);
	if ((m->flags & PROTO_HELLO_DECODE) && m->delivery != PROTO_DELIVERY_DEVICE)
		return errtext(why, cap, -EPROTO, "HELLO: DECODE with host delivery (a client "
			       "decodes only for its GPU)");
	return 0;
}

static int proto_check_tensor(const struct proto_welcome *m, uint32_t t, char *why, size_t cap)
{
	const struct proto_tensor *x = &m->tensors[t];
	uint64_t bytes = proto_dtype_bytes(x->dtype);
	if (!proto_terminated(x->name, sizeof(x->name)) || x->name[0] == '\0')
		return errtext(why, cap, -EPROTO,
			       "WELCOME: tensor %u name is empty or not NUL-terminated", t);
	if (bytes == 0)
		return errtext(why, cap, -EPROTO, "WELCOME: tensor %u dtype %u unknown", t,
			       x->dtype);
	if (x->ndim < 1 || x->ndim > PROTO_NDIM_MAX)
		return errtext(why, cap, -EPROTO, "WELCOME: tensor %u ndim %u not in 1..%d", t,
			       x->ndim, PROTO_NDIM_MAX);
	if (x->shape[0] != m->batch_size)
		return errtext(why, cap, -EPROTO,
			       "WELCOME: tensor %u shape[0] %llu is not batch_size %u", t,
			       (unsigned long long)x->shape[0], m->batch_size);
	for (uint32_t d = 0; d < PROTO_NDIM_MAX; d++) {
		if (d < x->ndim ? x->shape[d] == 0 : x->shape[d] != 0)
			return errtext(why, cap, -EPROTO,
				       "WELCOME: tensor %u shape[%u] %llu invalid for ndim %u", t,
				       d, (unsigned long long)x->shape[d], x->ndim);
		if (d < x->ndim && __builtin_mul_overflow(bytes, x->shape[d], &bytes))
			return errtext(why, cap, -EPROTO,
				       "WELCOME: tensor %u size overflows 64 bits", t);
	}
	/* With device delivery the tensors must fit a device slot too. */
	uint64_t limit = m->slot_bytes;
	if (m->delivery == PROTO_DELIVERY_DEVICE && m->device.slot_bytes < limit)
		limit = m->device.slot_bytes;
	if (x->offset > limit || bytes > limit - x->offset)
		return errtext(why, cap, -EPROTO, "WELCOME: tensor %u (%llu bytes at offset %llu) "
			       "outside slot_bytes %llu", t, (unsigned long long)bytes,
			       (unsigned long long)x->offset, (unsigned long long)limit);
	return 0;
}

static int proto_check_device(const struct proto_welcome *m, char *why, size_t cap)
{
	const struct proto_device *d = &m->device;
	uint64_t ring;
	if (d->slots < 1 || d->slots > PROTO_DEVICE_SLOTS_MAX)
		return errtext(why, cap, -EPROTO, "WELCOME: device slots %u not in 1..%d", d->slots,
			       PROTO_DEVICE_SLOTS_MAX);
	if (d->slots != m->depth)
		return errtext(why, cap, -EPROTO, "WELCOME: device slots %u differ from depth %u",
			       d->slots, m->depth);
	if (d->slot_bytes == 0 ||
	    __builtin_mul_overflow(d->slot_bytes, (uint64_t)d->slots, &ring) ||
	    ring > d->ring_bytes)
		return errtext(why, cap, -EPROTO,
			       "WELCOME: %u device slots of %llu bytes do not fit a ring of %llu",
			       d->slots, (unsigned long long)d->slot_bytes,
			       (unsigned long long)d->ring_bytes);
	if (d->slot_bytes > m->slot_bytes)
		return errtext(why, cap, -EPROTO,
			       "WELCOME: device slot_bytes %llu over staging slot_bytes %llu",
			       (unsigned long long)d->slot_bytes,
			       (unsigned long long)m->slot_bytes);
	return 0;
}

static int proto_check_welcome(const struct proto_welcome *m, char *why, size_t cap)
{
	long bad;
	if (!proto_terminated(m->name, sizeof(m->name)))
		return errtext(why, cap, -EPROTO, "WELCOME: name is not NUL-terminated");
	if (!m->name[0])
		return errtext(why, cap, -EPROTO, "WELCOME: the pipeline's name is empty");
	if ((bad = proto_word_bad_byte(m->name)) >= 0)
		return errtext(why, cap, -EPROTO, "WELCOME: name byte %ld is 0x%02x, outside "
			       "0x21..0x7e (printable ASCII, no space)", bad, (unsigned char)m->name[bad]);
	if (m->n_tensors < 1 || m->n_tensors > PROTO_TENSORS_MAX)
		return errtext(why, cap, -EPROTO, "WELCOME: n_tensors %u not in 1..%d",
			       m->n_tensors, PROTO_TENSORS_MAX);
	if (m->batch_size < 1)
		return errtext(why, cap, -EPROTO, "WELCOME: batch_size 0, must be >= 1");
	if (m->world < 1)
		return errtext(why, cap, -EPROTO, "WELCOME: world 0, must be >= 1");
	if (m->rank >= m->world)
		return errtext(why, cap, -EPROTO, "WELCOME: rank %u >= world %u", m->rank,
			       m->world);
	if (m->shuffle > 1)
		return errtext(why, cap, -EPROTO, "WELCOME: shuffle %u not 0 or 1", m->shuffle);
	if (m->drop_last > 1)
		return errtext(why, cap, -EPROTO, "WELCOME: drop_last %u not 0 or 1", m->drop_last);
	if (m->slot_bytes > m->arena_bytes)
		return errtext(why, cap, -EPROTO, "WELCOME: slot_bytes %llu over arena_bytes %llu",
			       (unsigned long long)m->slot_bytes,
			       (unsigned long long)m->arena_bytes);
	if (m->delivery > PROTO_DELIVERY_MAX)
		return errtext(why, cap, -EPROTO, "WELCOME: delivery %u unknown (0 host, 1 device)",
			       m->delivery);
	if (m->delivery == PROTO_DELIVERY_DEVICE && proto_check_device(m, why, cap) < 0)
		return -EPROTO;
	if (m->decode > 1)
		return errtext(why, cap, -EPROTO, "WELCOME: decode %u not 0 or 1", m->decode);
	if (m->decode && m->delivery != PROTO_DELIVERY_DEVICE)
		return errtext(why, cap, -EPROTO, "WELCOME: decode with host delivery");
	if (!m->decode && (m->pipeline || m->decode_memory))
		return errtext(why, cap, -EPROTO, "WELCOME: pipeline or decode_memory without decode");
	for (uint32_t t = 0; t < m->n_tensors; t++) {
		int rc = proto_check_tensor(m, t, why, cap);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int proto_check_ready(const struct proto_ready *m, char *why, size_t cap)
{
	if (m->rows < 1)
		return errtext(why, cap, -EPROTO, "READY: rows 0, must be >= 1");
	if (m->flags & ~PROTO_READY_FLAGS_KNOWN)
		return errtext(why, cap, -EPROTO, "READY: unknown flag bits 0x%x",
			       m->flags & ~PROTO_READY_FLAGS_KNOWN);
	if (!(m->flags & PROTO_READY_DECODE) &&
	    (m->staging_offset || m->staging_slot || m->staging_generation))
		return errtext(why, cap, -EPROTO, "READY: a staging slot without the DECODE flag");
	return 0;
}

static int proto_check_decoded(const struct proto_decoded *m, char *why, size_t cap)
{
	if (m->reserved != 0)
		return errtext(why, cap, -EPROTO, "DECODED: reserved %u, must be 0", m->reserved);
	if ((uint64_t)m->gpu + m->cpu + m->bad > UINT32_MAX)
		return errtext(why, cap, -EPROTO, "DECODED: gpu + cpu + bad overflows");
	if ((m->bad == 0) != (m->bad_sample == UINT64_MAX))
		return errtext(why, cap, -EPROTO, "DECODED: bad %u with bad_sample %llu (UINT64_MAX "
			       "exactly when bad is 0)", m->bad, (unsigned long long)m->bad_sample);
	return 0;
}

static int proto_check_error(const struct proto_error *m, char *why, size_t cap)
{
	if (m->code <= 0)
		return errtext(why, cap, -EPROTO, "ERROR: code %d, must be > 0", m->code);
	if (!proto_terminated(m->text, sizeof(m->text)))
		return errtext(why, cap, -EPROTO,
			       "ERROR: text is not NUL-terminated within its buffer");
	if (m->text[0] == '\0')
		return errtext(why, cap, -EPROTO, "ERROR: text is empty");
	return 0;
}

static int proto_check_status(const struct proto_status *m, char *why, size_t cap)
{
	if (m->text_len > PROTO_STATUS_TEXT_MAX)
		return errtext(why, cap, -EPROTO, "STATUS: text_len %u over maximum %d",
			       m->text_len, PROTO_STATUS_TEXT_MAX);
	if (memchr(m->text, 0, m->text_len))
		return errtext(why, cap, -EPROTO, "STATUS: text contains a NUL byte");
	return 0;
}

int proto_check_payload(uint32_t type, const struct proto_msg *msg, char *why, size_t cap)
{
	switch (type) {
	case PROTO_HELLO: return proto_check_hello(&msg->u.hello, why, cap);
	case PROTO_WELCOME: return proto_check_welcome(&msg->u.welcome, why, cap);
	case PROTO_READY: return proto_check_ready(&msg->u.ready, why, cap);
	case PROTO_DECODED: return proto_check_decoded(&msg->u.decoded, why, cap);
	case PROTO_ERROR: return proto_check_error(&msg->u.error, why, cap);
	case PROTO_STATUS: return proto_check_status(&msg->u.status, why, cap);
	default: return 0; /* RELEASE: any values; BYE, STATUS_REQ, RELOAD_REQ: no payload */
	}
}
