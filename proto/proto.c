/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proto: the encoder and decoder of loaderd frames, byte for byte as
 * proto/PROTOCOL.md describes them.
 *
 * Each message has a proto_put_* (encode) and a proto_get_* (decode)
 * function written side by side over two small cursors, so the order of
 * fields can be checked at a glance. The cursors carry a sticky error: the
 * first failure is kept (with its reason) and later calls do nothing, so a
 * message's fields read as a plain list. The rules a message's values must
 * obey live in proto_check.c, applied by the encoder before it writes and
 * by the decoder after it reads: both sides refuse the same messages.
 */
#include "proto/proto.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "common/errtext.h"
#include "proto/proto_impl.h"

static uint64_t proto_le_load(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = n; i-- > 0;)
		v = (v << 8) | p[i];
	return v;
}

static void proto_le_store(uint8_t *p, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

/* ---- reader: bounds-checked cursor over an untrusted payload ---- */

struct proto_reader {
	const uint8_t *p;
	size_t len;
	size_t pos;
	const char *msg_name; /* prefixes every reason: "HELLO: ..." */
	char *why;
	size_t why_cap;
	int err; /* 0 or -EPROTO, sticky */
};

__attribute__((format(printf, 2, 3)))
static void proto_rd_fail(struct proto_reader *r, const char *fmt, ...)
{
	char text[256];
	va_list ap;
	if (r->err)
		return;
	va_start(ap, fmt);
	verrtext(text, sizeof(text), 0, fmt, ap);
	va_end(ap);
	r->err = errtext(r->why, r->why_cap, -EPROTO, "%s: %s", r->msg_name, text);
}

/* The next n bytes, or NULL (and the error set) when fewer are left. */
static const uint8_t *proto_rd_take(struct proto_reader *r, const char *field, size_t n)
{
	const uint8_t *p;
	if (r->err)
		return NULL;
	if (r->len - r->pos < n) {
		proto_rd_fail(r, "payload truncated in %s: need %zu bytes at offset %zu, %zu left",
			      field, n, r->pos, r->len - r->pos);
		return NULL;
	}
	p = r->p + r->pos;
	r->pos += n;
	return p;
}

/* Little-endian unsigned of n bytes; 0 once the reader has failed. */
static uint64_t proto_rd_uint(struct proto_reader *r, const char *field, size_t n)
{
	const uint8_t *p = proto_rd_take(r, field, n);
	return p ? proto_le_load(p, n) : 0;
}

static void proto_rd_u16(struct proto_reader *r, const char *f, uint16_t *out)
{
	*out = (uint16_t)proto_rd_uint(r, f, 2);
}

static void proto_rd_u32(struct proto_reader *r, const char *f, uint32_t *out)
{
	*out = (uint32_t)proto_rd_uint(r, f, 4);
}

static void proto_rd_u64(struct proto_reader *r, const char *f, uint64_t *out)
{
	*out = proto_rd_uint(r, f, 8);
}

static void proto_rd_i32(struct proto_reader *r, const char *f, int32_t *out)
{
	uint32_t u = (uint32_t)proto_rd_uint(r, f, 4);
	memcpy(out, &u, sizeof(u)); /* two's complement bit pattern */
}

static void proto_rd_bytes(struct proto_reader *r, const char *field, uint8_t *dst, size_t n)
{
	const uint8_t *p = proto_rd_take(r, field, n);
	if (p)
		memcpy(dst, p, n);
}

/* u16 length, then that many bytes: at most cap - 1, no NUL among them.
 * dst is NUL-terminated on success. */
static void proto_rd_str(struct proto_reader *r, const char *field, char *dst, size_t cap)
{
	uint16_t n = 0;
	const uint8_t *p;
	proto_rd_u16(r, field, &n);
	if (r->err)
		return;
	if (n > cap - 1) {
		proto_rd_fail(r, "%s length %u over maximum %zu", field, n, cap - 1);
		return;
	}
	p = proto_rd_take(r, field, n);
	if (!p)
		return;
	if (memchr(p, 0, n)) {
		proto_rd_fail(r, "%s contains a NUL byte", field);
		return;
	}
	memcpy(dst, p, n);
	dst[n] = '\0';
}

/* ---- writer: cursor over the caller's buffer ---- */

struct proto_writer {
	uint8_t *p;
	size_t cap;
	size_t pos;
	int err; /* 0 or -EMSGSIZE, sticky */
};

static uint8_t *proto_wr_take(struct proto_writer *w, size_t n)
{
	uint8_t *p;
	if (w->err)
		return NULL;
	if (w->cap - w->pos < n) {
		w->err = -EMSGSIZE;
		return NULL;
	}
	p = w->p + w->pos;
	w->pos += n;
	return p;
}

static void proto_wr_uint(struct proto_writer *w, uint64_t v, size_t n)
{
	uint8_t *p = proto_wr_take(w, n);
	if (p)
		proto_le_store(p, v, n);
}

static void proto_wr_u16(struct proto_writer *w, uint16_t v) { proto_wr_uint(w, v, 2); }
static void proto_wr_u32(struct proto_writer *w, uint32_t v) { proto_wr_uint(w, v, 4); }
static void proto_wr_i32(struct proto_writer *w, int32_t v) { proto_wr_uint(w, (uint32_t)v, 4); }
static void proto_wr_u64(struct proto_writer *w, uint64_t v) { proto_wr_uint(w, v, 8); }

static void proto_wr_bytes(struct proto_writer *w, const void *src, size_t n)
{
	uint8_t *p = proto_wr_take(w, n);
	if (p && n)
		memcpy(p, src, n);
}

/* s has been checked to be terminated within its buffer (< 65535 bytes). */
static void proto_wr_str(struct proto_writer *w, const char *s)
{
	size_t n = strlen(s);
	proto_wr_u16(w, (uint16_t)n);
	proto_wr_bytes(w, s, n);
}

/* ---- names ---- */

static const struct {
	const char *name;
	size_t bytes;
} dtypes[PROTO_DTYPE_MAX + 1] = {
	[PROTO_DTYPE_UINT8] = {"uint8", 1},     [PROTO_DTYPE_UINT16] = {"uint16", 2},
	[PROTO_DTYPE_UINT32] = {"uint32", 4},   [PROTO_DTYPE_INT32] = {"int32", 4},
	[PROTO_DTYPE_INT64] = {"int64", 8},     [PROTO_DTYPE_FLOAT16] = {"float16", 2},
	[PROTO_DTYPE_FLOAT32] = {"float32", 4},
};

static const char *const type_names[PROTO_TYPE_MAX + 1] = {
	[PROTO_HELLO] = "HELLO",     [PROTO_WELCOME] = "WELCOME",
	[PROTO_READY] = "READY",     [PROTO_RELEASE] = "RELEASE",
	[PROTO_BYE] = "BYE",         [PROTO_ERROR] = "ERROR",
	[PROTO_STATUS_REQ] = "STATUS_REQ", [PROTO_STATUS] = "STATUS",
	[PROTO_RELOAD_REQ] = "RELOAD_REQ", [PROTO_DECODED] = "DECODED",
};

size_t proto_dtype_bytes(uint32_t dtype)
{
	return dtype >= 1 && dtype <= PROTO_DTYPE_MAX ? dtypes[dtype].bytes : 0;
}

const char *proto_dtype_name(uint32_t dtype)
{
	return dtype >= 1 && dtype <= PROTO_DTYPE_MAX ? dtypes[dtype].name : "invalid";
}

const char *proto_type_name(uint32_t type)
{
	return type >= 1 && type <= PROTO_TYPE_MAX ? type_names[type] : "invalid";
}

/* ---- payloads, encode and decode side by side ---- */

static void proto_put_hello(struct proto_writer *w, const struct proto_hello *m)
{
	proto_wr_u32(w, m->delivery);
	proto_wr_u32(w, m->rank);
	proto_wr_u32(w, m->world);
	proto_wr_u32(w, m->depth);
	proto_wr_bytes(w, m->device_uuid, PROTO_UUID_BYTES);
	proto_wr_str(w, m->pipeline);
	proto_wr_str(w, m->client_name);
	proto_wr_str(w, m->resume);
	proto_wr_str(w, m->split);
	proto_wr_str(w, m->group);
	proto_wr_u32(w, m->group_size);
	proto_wr_u32(w, m->flags);
	proto_wr_str(w, m->job);
	proto_wr_str(w, m->declaration);
}

static void proto_get_hello(struct proto_reader *r, struct proto_hello *m)
{
	memset(m, 0, sizeof(*m));
	proto_rd_u32(r, "delivery", &m->delivery);
	proto_rd_u32(r, "rank", &m->rank);
	proto_rd_u32(r, "world", &m->world);
	proto_rd_u32(r, "depth", &m->depth);
	proto_rd_bytes(r, "device_uuid", m->device_uuid, PROTO_UUID_BYTES);
	proto_rd_str(r, "pipeline", m->pipeline, sizeof(m->pipeline));
	proto_rd_str(r, "client_name", m->client_name, sizeof(m->client_name));
	proto_rd_str(r, "resume", m->resume, sizeof(m->resume));
	proto_rd_str(r, "split", m->split, sizeof(m->split));
	proto_rd_str(r, "group", m->group, sizeof(m->group));
	proto_rd_u32(r, "group_size", &m->group_size);
	proto_rd_u32(r, "flags", &m->flags);
	proto_rd_str(r, "job", m->job, sizeof(m->job));
	proto_rd_str(r, "declaration", m->declaration, sizeof(m->declaration));
}

static void proto_put_welcome(struct proto_writer *w, const struct proto_welcome *m)
{
	proto_wr_u64(w, m->session);
	proto_wr_u64(w, m->arena_bytes);
	proto_wr_u64(w, m->slot_bytes);
	proto_wr_u64(w, m->n_samples);
	proto_wr_u64(w, m->seed);
	proto_wr_u64(w, m->epoch);
	proto_wr_u64(w, m->offset);
	proto_wr_u32(w, m->batch_size);
	proto_wr_u32(w, m->rank);
	proto_wr_u32(w, m->world);
	proto_wr_u32(w, m->depth);
	proto_wr_u32(w, m->shuffle);
	proto_wr_u32(w, m->drop_last);
	proto_wr_u32(w, m->n_tensors);
	for (uint32_t t = 0; t < m->n_tensors; t++) {
		const struct proto_tensor *x = &m->tensors[t];
		proto_wr_str(w, x->name);
		proto_wr_u32(w, x->dtype);
		proto_wr_u32(w, x->ndim);
		for (uint32_t d = 0; d < x->ndim; d++)
			proto_wr_u64(w, x->shape[d]);
		proto_wr_u64(w, x->offset);
	}
	proto_wr_u32(w, m->delivery);
	if (m->delivery == PROTO_DELIVERY_DEVICE) {
		const struct proto_device *d = &m->device;
		proto_wr_u32(w, d->slots);
		proto_wr_u64(w, d->slot_bytes);
		proto_wr_u64(w, d->ring_bytes);
		proto_wr_bytes(w, d->mem_handle, PROTO_IPC_HANDLE_BYTES);
		for (uint32_t i = 0; i < d->slots && i < PROTO_DEVICE_SLOTS_MAX; i++)
			proto_wr_bytes(w, d->ready[i], PROTO_IPC_HANDLE_BYTES);
		for (uint32_t i = 0; i < d->slots && i < PROTO_DEVICE_SLOTS_MAX; i++)
			proto_wr_bytes(w, d->released[i], PROTO_IPC_HANDLE_BYTES);
	}
	proto_wr_u64(w, m->data);
	proto_wr_u32(w, m->decode);
	proto_wr_u32(w, m->pipeline);
	proto_wr_u64(w, m->decode_memory);
	proto_wr_str(w, m->name);
}

static void proto_get_welcome(struct proto_reader *r, struct proto_welcome *m)
{
	memset(m, 0, sizeof(*m));
	proto_rd_u64(r, "session", &m->session);
	proto_rd_u64(r, "arena_bytes", &m->arena_bytes);
	proto_rd_u64(r, "slot_bytes", &m->slot_bytes);
	proto_rd_u64(r, "n_samples", &m->n_samples);
	proto_rd_u64(r, "seed", &m->seed);
	proto_rd_u64(r, "epoch", &m->epoch);
	proto_rd_u64(r, "offset", &m->offset);
	proto_rd_u32(r, "batch_size", &m->batch_size);
	proto_rd_u32(r, "rank", &m->rank);
	proto_rd_u32(r, "world", &m->world);
	proto_rd_u32(r, "depth", &m->depth);
	proto_rd_u32(r, "shuffle", &m->shuffle);
	proto_rd_u32(r, "drop_last", &m->drop_last);
	proto_rd_u32(r, "n_tensors", &m->n_tensors);
	/* Counts bound the loops below, so they are checked before use. */
	if (!r->err && (m->n_tensors < 1 || m->n_tensors > PROTO_TENSORS_MAX))
		proto_rd_fail(r, "n_tensors %u not in 1..%d", m->n_tensors, PROTO_TENSORS_MAX);
	for (uint32_t t = 0; t < m->n_tensors && !r->err; t++) {
		struct proto_tensor *x = &m->tensors[t];
		proto_rd_str(r, "tensor name", x->name, sizeof(x->name));
		proto_rd_u32(r, "tensor dtype", &x->dtype);
		proto_rd_u32(r, "tensor ndim", &x->ndim);
		if (!r->err && (x->ndim < 1 || x->ndim > PROTO_NDIM_MAX))
			proto_rd_fail(r, "tensor %u ndim %u not in 1..%d", t, x->ndim,
				      PROTO_NDIM_MAX);
		for (uint32_t d = 0; d < x->ndim && !r->err; d++)
			proto_rd_u64(r, "tensor shape", &x->shape[d]);
		proto_rd_u64(r, "tensor offset", &x->offset);
	}
	proto_rd_u32(r, "delivery", &m->delivery);
	if (r->err)
		return;
	/* An unknown delivery has no device block: proto_check_welcome refuses it. */
	if (m->delivery == PROTO_DELIVERY_DEVICE) {
		struct proto_device *d = &m->device;
		proto_rd_u32(r, "device slots", &d->slots);
		if (!r->err && (d->slots < 1 || d->slots > PROTO_DEVICE_SLOTS_MAX))
			proto_rd_fail(r, "device slots %u not in 1..%d", d->slots,
				      PROTO_DEVICE_SLOTS_MAX);
		proto_rd_u64(r, "device slot_bytes", &d->slot_bytes);
		proto_rd_u64(r, "device ring_bytes", &d->ring_bytes);
		proto_rd_bytes(r, "device mem_handle", d->mem_handle, PROTO_IPC_HANDLE_BYTES);
		for (uint32_t i = 0; i < d->slots && !r->err; i++)
			proto_rd_bytes(r, "device ready event", d->ready[i], PROTO_IPC_HANDLE_BYTES);
		for (uint32_t i = 0; i < d->slots && !r->err; i++)
			proto_rd_bytes(r, "device released event", d->released[i],
				       PROTO_IPC_HANDLE_BYTES);
	}
	proto_rd_u64(r, "data", &m->data);
	proto_rd_u32(r, "decode", &m->decode);
	proto_rd_u32(r, "pipeline", &m->pipeline);
	proto_rd_u64(r, "decode_memory", &m->decode_memory);
	proto_rd_str(r, "name", m->name, sizeof(m->name));
}

static void proto_put_ready(struct proto_writer *w, const struct proto_ready *m)
{
	proto_wr_u64(w, m->seq);
	proto_wr_u64(w, m->epoch);
	proto_wr_u64(w, m->epoch_offset);
	proto_wr_u64(w, m->batch);
	proto_wr_u64(w, m->first);
	proto_wr_u64(w, m->slot_offset);
	proto_wr_u32(w, m->slot);
	proto_wr_u32(w, m->generation);
	proto_wr_u32(w, m->rows);
	proto_wr_u32(w, m->flags);
	proto_wr_u64(w, m->staging_offset);
	proto_wr_u32(w, m->staging_slot);
	proto_wr_u32(w, m->staging_generation);
}

static void proto_get_ready(struct proto_reader *r, struct proto_ready *m)
{
	memset(m, 0, sizeof(*m));
	proto_rd_u64(r, "seq", &m->seq);
	proto_rd_u64(r, "epoch", &m->epoch);
	proto_rd_u64(r, "epoch_offset", &m->epoch_offset);
	proto_rd_u64(r, "batch", &m->batch);
	proto_rd_u64(r, "first", &m->first);
	proto_rd_u64(r, "slot_offset", &m->slot_offset);
	proto_rd_u32(r, "slot", &m->slot);
	proto_rd_u32(r, "generation", &m->generation);
	proto_rd_u32(r, "rows", &m->rows);
	proto_rd_u32(r, "flags", &m->flags);
	proto_rd_u64(r, "staging_offset", &m->staging_offset);
	proto_rd_u32(r, "staging_slot", &m->staging_slot);
	proto_rd_u32(r, "staging_generation", &m->staging_generation);
}

static void proto_put_release(struct proto_writer *w, const struct proto_release *m)
{
	proto_wr_u64(w, m->seq);
	proto_wr_u32(w, m->slot);
	proto_wr_u32(w, m->generation);
	proto_wr_u64(w, m->wait_ns);
}

static void proto_get_release(struct proto_reader *r, struct proto_release *m)
{
	memset(m, 0, sizeof(*m));
	proto_rd_u64(r, "seq", &m->seq);
	proto_rd_u32(r, "slot", &m->slot);
	proto_rd_u32(r, "generation", &m->generation);
	proto_rd_u64(r, "wait_ns", &m->wait_ns);
}

static void proto_put_decoded(struct proto_writer *w, const struct proto_decoded *m)
{
	proto_wr_u64(w, m->seq);
	proto_wr_u32(w, m->staging_slot);
	proto_wr_u32(w, m->staging_generation);
	proto_wr_u32(w, m->gpu);
	proto_wr_u32(w, m->cpu);
	proto_wr_u32(w, m->bad);
	proto_wr_u32(w, m->reserved);
	proto_wr_u64(w, m->bad_sample);
	proto_wr_u64(w, m->submit_ns);
}

static void proto_get_decoded(struct proto_reader *r, struct proto_decoded *m)
{
	memset(m, 0, sizeof(*m));
	proto_rd_u64(r, "seq", &m->seq);
	proto_rd_u32(r, "staging_slot", &m->staging_slot);
	proto_rd_u32(r, "staging_generation", &m->staging_generation);
	proto_rd_u32(r, "gpu", &m->gpu);
	proto_rd_u32(r, "cpu", &m->cpu);
	proto_rd_u32(r, "bad", &m->bad);
	proto_rd_u32(r, "reserved", &m->reserved);
	proto_rd_u64(r, "bad_sample", &m->bad_sample);
	proto_rd_u64(r, "submit_ns", &m->submit_ns);
}

static void proto_put_error(struct proto_writer *w, const struct proto_error *m)
{
	proto_wr_i32(w, m->code);
	proto_wr_str(w, m->text);
}

static void proto_get_error(struct proto_reader *r, struct proto_error *m)
{
	memset(m, 0, sizeof(*m));
	proto_rd_i32(r, "code", &m->code);
	proto_rd_str(r, "text", m->text, sizeof(m->text));
}

static void proto_put_status(struct proto_writer *w, const struct proto_status *m)
{
	proto_wr_u32(w, m->text_len);
	proto_wr_bytes(w, m->text, m->text_len);
}

/* The text can be 64 KiB: only the bytes in use are written, not the whole
 * buffer. */
static void proto_get_status(struct proto_reader *r, struct proto_status *m)
{
	const uint8_t *p;
	m->text_len = 0;
	m->text[0] = '\0';
	proto_rd_u32(r, "text_len", &m->text_len);
	if (!r->err && m->text_len > PROTO_STATUS_TEXT_MAX)
		proto_rd_fail(r, "text_len %u over maximum %d", m->text_len, PROTO_STATUS_TEXT_MAX);
	p = proto_rd_take(r, "text", m->text_len);
	if (!p) {
		m->text_len = 0;
		return;
	}
	memcpy(m->text, p, m->text_len);
	m->text[m->text_len] = '\0';
}

/* ---- frames ---- */

int proto_encode(const struct proto_msg *msg, uint8_t *buf, size_t cap)
{
	const struct proto_header *h = &msg->hdr;
	struct proto_writer w = {.p = buf, .cap = cap};
	size_t payload;

	if (h->type < 1 || h->type > PROTO_TYPE_MAX || (h->flags & ~PROTO_FLAGS_KNOWN))
		return -EINVAL;
	if (((h->flags & PROTO_FLAG_JSON) && h->type != PROTO_STATUS_REQ) ||
	    ((h->flags & PROTO_FLAG_MORE) && h->type != PROTO_STATUS))
		return -EINVAL;
	if (proto_check_payload(h->type, msg, NULL, 0) < 0)
		return -EINVAL;

	proto_wr_u32(&w, PROTO_MAGIC);
	proto_wr_u16(&w, PROTO_VERSION);
	proto_wr_u16(&w, h->type);
	proto_wr_u32(&w, h->flags);
	proto_wr_u32(&w, 0); /* length, filled in below */
	proto_wr_u64(&w, h->request_id);
	switch (h->type) {
	case PROTO_HELLO: proto_put_hello(&w, &msg->u.hello); break;
	case PROTO_WELCOME: proto_put_welcome(&w, &msg->u.welcome); break;
	case PROTO_READY: proto_put_ready(&w, &msg->u.ready); break;
	case PROTO_RELEASE: proto_put_release(&w, &msg->u.release); break;
	case PROTO_DECODED: proto_put_decoded(&w, &msg->u.decoded); break;
	case PROTO_ERROR: proto_put_error(&w, &msg->u.error); break;
	case PROTO_STATUS: proto_put_status(&w, &msg->u.status); break;
	default: break; /* BYE, STATUS_REQ, RELOAD_REQ: empty payload */
	}
	if (w.err)
		return w.err;
	payload = w.pos - PROTO_HEADER_BYTES;
	if (payload > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	proto_le_store(buf + 12, payload, 4);
	return (int)w.pos;
}

int proto_decode(const uint8_t *buf, size_t len, struct proto_msg *msg,
		 char *why, size_t why_cap)
{
	struct proto_header *h = &msg->hdr;
	struct proto_reader r;

	errtext(why, why_cap, 0, "%s", "");
	if (len < PROTO_HEADER_BYTES)
		return errtext(why, why_cap, -EBADMSG,
			       "short frame: %zu bytes, the header alone is %d", len,
			       PROTO_HEADER_BYTES);
	h->magic = (uint32_t)proto_le_load(buf, 4);
	h->version = (uint16_t)proto_le_load(buf + 4, 2);
	h->type = (uint16_t)proto_le_load(buf + 6, 2);
	h->flags = (uint32_t)proto_le_load(buf + 8, 4);
	h->length = (uint32_t)proto_le_load(buf + 12, 4);
	h->request_id = proto_le_load(buf + 16, 8);

	if (h->magic != PROTO_MAGIC)
		return errtext(why, why_cap, -EBADMSG, "bad magic 0x%08x, expected 0x%08x",
			       h->magic, PROTO_MAGIC);
	if (h->version != PROTO_VERSION)
		return errtext(why, why_cap, -EPROTONOSUPPORT,
			       "protocol version %u not supported (this side speaks %d)",
			       h->version, PROTO_VERSION);
	if (h->length > PROTO_MAX_PAYLOAD)
		return errtext(why, why_cap, -EMSGSIZE, "frame length %u over maximum %d",
			       h->length, PROTO_MAX_PAYLOAD);
	if (h->length != len - PROTO_HEADER_BYTES)
		return errtext(why, why_cap, -EBADMSG,
			       "frame length %u disagrees with the %zu payload bytes received",
			       h->length, len - PROTO_HEADER_BYTES);
	if (h->flags & ~PROTO_FLAGS_KNOWN)
		return errtext(why, why_cap, -EBADMSG, "unknown header flag bits 0x%x",
			       h->flags & ~PROTO_FLAGS_KNOWN);
	if (h->type < 1 || h->type > PROTO_TYPE_MAX)
		return errtext(why, why_cap, -EPROTO, "unknown message type %u", h->type);
	if (((h->flags & PROTO_FLAG_JSON) && h->type != PROTO_STATUS_REQ) ||
	    ((h->flags & PROTO_FLAG_MORE) && h->type != PROTO_STATUS))
		return errtext(why, why_cap, -EPROTO, "header flag 0x%x on %s (JSON is STATUS_REQ's, "
			       "MORE is STATUS's)", h->flags & (PROTO_FLAG_JSON | PROTO_FLAG_MORE),
			       proto_type_name(h->type));

	r = (struct proto_reader){.p = buf + PROTO_HEADER_BYTES, .len = h->length,
			    .msg_name = proto_type_name(h->type), .why = why, .why_cap = why_cap};
	switch (h->type) {
	case PROTO_HELLO: proto_get_hello(&r, &msg->u.hello); break;
	case PROTO_WELCOME: proto_get_welcome(&r, &msg->u.welcome); break;
	case PROTO_READY: proto_get_ready(&r, &msg->u.ready); break;
	case PROTO_RELEASE: proto_get_release(&r, &msg->u.release); break;
	case PROTO_DECODED: proto_get_decoded(&r, &msg->u.decoded); break;
	case PROTO_ERROR: proto_get_error(&r, &msg->u.error); break;
	case PROTO_STATUS: proto_get_status(&r, &msg->u.status); break;
	default: break; /* BYE, STATUS_REQ, RELOAD_REQ: empty payload */
	}
	if (!r.err && r.pos != r.len) {
		if (r.pos == 0)
			proto_rd_fail(&r, "payload must be empty, got %zu bytes", r.len);
		else
			proto_rd_fail(&r, "%zu bytes after the last field", r.len - r.pos);
	}
	if (r.err)
		return r.err;
	return proto_check_payload(h->type, msg, why, why_cap);
}
