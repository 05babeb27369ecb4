/*
 * proto: the encoder and decoder of loaderd frames, byte for byte as
 * proto/PROTOCOL.md describes them.
 *
 * Each message has a put_* (encode) and a get_* (decode) function written
 * side by side over two small cursors, so the order of fields can be checked
 * at a glance. The cursors carry a sticky error: the first failure is kept
 * (with its reason) and later calls do nothing, so a message's fields read
 * as a plain list. The rules a message's values must obey live in one
 * check_* function per message, applied by the encoder before it writes and
 * by the decoder after it reads: both sides refuse the same messages.
 */
#include "proto/proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Formats a reason into why (when the caller wants one). */
__attribute__((format(printf, 3, 4)))
static void set_why(char *why, size_t why_cap, const char *fmt, ...)
{
	va_list ap;
	if (!why || why_cap == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, why_cap, fmt, ap);
	va_end(ap);
}

static uint64_t le_load(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = n; i-- > 0;)
		v = (v << 8) | p[i];
	return v;
}

static void le_store(uint8_t *p, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

/* ---- reader: bounds-checked cursor over an untrusted payload ---- */

struct reader {
	const uint8_t *p;
	size_t len;
	size_t pos;
	const char *msg_name; /* prefixes every reason: "HELLO: ..." */
	char *why;
	size_t why_cap;
	int err; /* 0 or -EPROTO, sticky */
};

__attribute__((format(printf, 2, 3)))
static void rd_fail(struct reader *r, const char *fmt, ...)
{
	char text[256];
	va_list ap;
	if (r->err)
		return;
	r->err = -EPROTO;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	set_why(r->why, r->why_cap, "%s: %s", r->msg_name, text);
}

/* The next n bytes, or NULL (and the error set) when fewer are left. */
static const uint8_t *rd_take(struct reader *r, const char *field, size_t n)
{
	const uint8_t *p;
	if (r->err)
		return NULL;
	if (r->len - r->pos < n) {
		rd_fail(r, "payload truncated in %s: need %zu bytes at offset %zu, %zu left",
			field, n, r->pos, r->len - r->pos);
		return NULL;
	}
	p = r->p + r->pos;
	r->pos += n;
	return p;
}

/* Little-endian unsigned of n bytes; 0 once the reader has failed. */
static uint64_t rd_uint(struct reader *r, const char *field, size_t n)
{
	const uint8_t *p = rd_take(r, field, n);
	return p ? le_load(p, n) : 0;
}

static void rd_u16(struct reader *r, const char *f, uint16_t *out) { *out = (uint16_t)rd_uint(r, f, 2); }
static void rd_u32(struct reader *r, const char *f, uint32_t *out) { *out = (uint32_t)rd_uint(r, f, 4); }
static void rd_u64(struct reader *r, const char *f, uint64_t *out) { *out = rd_uint(r, f, 8); }

static void rd_i32(struct reader *r, const char *f, int32_t *out)
{
	uint32_t u = (uint32_t)rd_uint(r, f, 4);
	memcpy(out, &u, sizeof(u)); /* two's complement bit pattern */
}

static void rd_bytes(struct reader *r, const char *field, uint8_t *dst, size_t n)
{
	const uint8_t *p = rd_take(r, field, n);
	if (p)
		memcpy(dst, p, n);
}

/* u16 length, then that many bytes: at most cap - 1, no NUL among them.
 * dst is NUL-terminated on success. */
static void rd_str(struct reader *r, const char *field, char *dst, size_t cap)
{
	uint16_t n = 0;
	const uint8_t *p;
	rd_u16(r, field, &n);
	if (r->err)
		return;
	if (n > cap - 1) {
		rd_fail(r, "%s length %u over maximum %zu", field, n, cap - 1);
		return;
	}
	p = rd_take(r, field, n);
	if (!p)
		return;
	if (memchr(p, 0, n)) {
		rd_fail(r, "%s contains a NUL byte", field);
		return;
	}
	memcpy(dst, p, n);
	dst[n] = '\0';
}

/* ---- writer: cursor over the caller's buffer ---- */

struct writer {
	uint8_t *p;
	size_t cap;
	size_t pos;
	int err; /* 0 or -EMSGSIZE, sticky */
};

static uint8_t *wr_take(struct writer *w, size_t n)
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

static void wr_uint(struct writer *w, uint64_t v, size_t n)
{
	uint8_t *p = wr_take(w, n);
	if (p)
		le_store(p, v, n);
}

static void wr_u16(struct writer *w, uint16_t v) { wr_uint(w, v, 2); }
static void wr_u32(struct writer *w, uint32_t v) { wr_uint(w, v, 4); }
static void wr_i32(struct writer *w, int32_t v) { wr_uint(w, (uint32_t)v, 4); }
static void wr_u64(struct writer *w, uint64_t v) { wr_uint(w, v, 8); }

static void wr_bytes(struct writer *w, const void *src, size_t n)
{
	uint8_t *p = wr_take(w, n);
	if (p && n)
		memcpy(p, src, n);
}

/* s has been checked to be terminated within its buffer (< 65535 bytes). */
static void wr_str(struct writer *w, const char *s)
{
	size_t n = strlen(s);
	wr_u16(w, (uint16_t)n);
	wr_bytes(w, s, n);
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
	[PROTO_RELOAD_REQ] = "RELOAD_REQ",
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

/* ---- the rules each message obeys (encode and decode alike) ---- */

static int terminated(const char *s, size_t cap)
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

static int check_hello(const struct proto_hello *m, char *why, size_t cap)
{
	long bad;
	if (!terminated(m->pipeline, sizeof(m->pipeline)) ||
	    !terminated(m->client_name, sizeof(m->client_name)) ||
	    !terminated(m->resume, sizeof(m->resume)))
		set_why(why, cap, "HELLO: a string is not NUL-terminated within its buffer");
	else if (m->delivery > PROTO_DELIVERY_MAX)
		set_why(why, cap, "HELLO: delivery %u unknown (0 host, 1 device)", m->delivery);
	else if (m->world < 1)
		set_why(why, cap, "HELLO: world 0, must be >= 1");
	else if (m->rank >= m->world)
		set_why(why, cap, "HELLO: rank %u >= world %u", m->rank, m->world);
	else if (m->pipeline[0] == '\0')
		set_why(why, cap, "HELLO: pipeline name is empty");
	else if ((bad = proto_word_bad_byte(m->pipeline)) >= 0)
		set_why(why, cap, "HELLO: pipeline byte %ld is 0x%02x, outside 0x21..0x7e "
			"(printable ASCII, no space)", bad, (unsigned char)m->pipeline[bad]);
	else if ((bad = proto_word_bad_byte(m->resume)) >= 0)
		set_why(why, cap, "HELLO: resume byte %ld is 0x%02x, outside 0x21..0x7e "
			"(printable ASCII, no space)", bad, (unsigned char)m->resume[bad]);
	else
		return 0;
	return -EPROTO;
}

static int check_tensor(const struct proto_welcome *m, uint32_t t, char *why, size_t cap)
{
	const struct proto_tensor *x = &m->tensors[t];
	uint64_t bytes = proto_dtype_bytes(x->dtype);
	if (!terminated(x->name, sizeof(x->name)) || x->name[0] == '\0') {
		set_why(why, cap, "WELCOME: tensor %u name is empty or not NUL-terminated", t);
		return -EPROTO;
	}
	if (bytes == 0) {
		set_why(why, cap, "WELCOME: tensor %u dtype %u unknown", t, x->dtype);
		return -EPROTO;
	}
	if (x->ndim < 1 || x->ndim > PROTO_NDIM_MAX) {
		set_why(why, cap, "WELCOME: tensor %u ndim %u not in 1..%d", t, x->ndim,
			PROTO_NDIM_MAX);
		return -EPROTO;
	}
	if (x->shape[0] != m->batch_size) {
		set_why(why, cap, "WELCOME: tensor %u shape[0] %llu is not batch_size %u", t,
			(unsigned long long)x->shape[0], m->batch_size);
		return -EPROTO;
	}
	for (uint32_t d = 0; d < PROTO_NDIM_MAX; d++) {
		if (d < x->ndim ? x->shape[d] == 0 : x->shape[d] != 0) {
			set_why(why, cap, "WELCOME: tensor %u shape[%u] %llu invalid for ndim %u",
				t, d, (unsigned long long)x->shape[d], x->ndim);
			return -EPROTO;
		}
		if (d < x->ndim && __builtin_mul_overflow(bytes, x->shape[d], &bytes)) {
			set_why(why, cap, "WELCOME: tensor %u size overflows 64 bits", t);
			return -EPROTO;
		}
	}
	/* With device delivery the tensors must fit a device slot too. */
	uint64_t limit = m->slot_bytes;
	if (m->delivery == PROTO_DELIVERY_DEVICE && m->device.slot_bytes < limit)
		limit = m->device.slot_bytes;
	if (x->offset > limit || bytes > limit - x->offset) {
		set_why(why, cap,
			"WELCOME: tensor %u (%llu bytes at offset %llu) outside slot_bytes %llu",
			t, (unsigned long long)bytes, (unsigned long long)x->offset,
			(unsigned long long)limit);
		return -EPROTO;
	}
	return 0;
}

static int check_device(const struct proto_welcome *m, char *why, size_t cap)
{
	const struct proto_device *d = &m->device;
	uint64_t ring;
	if (d->slots < 1 || d->slots > PROTO_DEVICE_SLOTS_MAX)
		set_why(why, cap, "WELCOME: device slots %u not in 1..%d", d->slots,
			PROTO_DEVICE_SLOTS_MAX);
	else if (d->slots != m->depth)
		set_why(why, cap, "WELCOME: device slots %u differ from depth %u", d->slots, m->depth);
	else if (d->slot_bytes == 0 || __builtin_mul_overflow(d->slot_bytes, (uint64_t)d->slots, &ring) ||
		 ring > d->ring_bytes)
		set_why(why, cap, "WELCOME: %u device slots of %llu bytes do not fit a ring of %llu",
			d->slots, (unsigned long long)d->slot_bytes, (unsigned long long)d->ring_bytes);
	else if (d->slot_bytes > m->slot_bytes)
		set_why(why, cap, "WELCOME: device slot_bytes %llu over staging slot_bytes %llu",
			(unsigned long long)d->slot_bytes, (unsigned long long)m->slot_bytes);
	else
		return 0;
	return -EPROTO;
}

static int check_welcome(const struct proto_welcome *m, char *why, size_t cap)
{
	if (m->n_tensors < 1 || m->n_tensors > PROTO_TENSORS_MAX)
		set_why(why, cap, "WELCOME: n_tensors %u not in 1..%d", m->n_tensors,
			PROTO_TENSORS_MAX);
	else if (m->batch_size < 1)
		set_why(why, cap, "WELCOME: batch_size 0, must be >= 1");
	else if (m->world < 1)
		set_why(why, cap, "WELCOME: world 0, must be >= 1");
	else if (m->rank >= m->world)
		set_why(why, cap, "WELCOME: rank %u >= world %u", m->rank, m->world);
	else if (m->shuffle > 1)
		set_why(why, cap, "WELCOME: shuffle %u not 0 or 1", m->shuffle);
	else if (m->drop_last > 1)
		set_why(why, cap, "WELCOME: drop_last %u not 0 or 1", m->drop_last);
	else if (m->slot_bytes > m->arena_bytes)
		set_why(why, cap, "WELCOME: slot_bytes %llu over arena_bytes %llu",
			(unsigned long long)m->slot_bytes, (unsigned long long)m->arena_bytes);
	else if (m->delivery > PROTO_DELIVERY_MAX)
		set_why(why, cap, "WELCOME: delivery %u unknown (0 host, 1 device)", m->delivery);
	else if (m->delivery == PROTO_DELIVERY_DEVICE && check_device(m, why, cap) < 0)
		return -EPROTO;
	else {
		for (uint32_t t = 0; t < m->n_tensors; t++) {
			int rc = check_tensor(m, t, why, cap);
			if (rc < 0)
				return rc;
		}
		return 0;
	}
	return -EPROTO;
}

static int check_ready(const struct proto_ready *m, char *why, size_t cap)
{
	if (m->rows < 1)
		set_why(why, cap, "READY: rows 0, must be >= 1");
	else if (m->flags & ~PROTO_READY_LAST_IN_EPOCH)
		set_why(why, cap, "READY: unknown flag bits 0x%x",
			m->flags & ~PROTO_READY_LAST_IN_EPOCH);
	else
		return 0;
	return -EPROTO;
}

static int check_error(const struct proto_error *m, char *why, size_t cap)
{
	if (m->code <= 0)
		set_why(why, cap, "ERROR: code %d, must be > 0", m->code);
	else if (!terminated(m->text, sizeof(m->text)))
		set_why(why, cap, "ERROR: text is not NUL-terminated within its buffer");
	else if (m->text[0] == '\0')
		set_why(why, cap, "ERROR: text is empty");
	else
		return 0;
	return -EPROTO;
}

static int check_status(const struct proto_status *m, char *why, size_t cap)
{
	if (m->text_len > PROTO_STATUS_TEXT_MAX)
		set_why(why, cap, "STATUS: text_len %u over maximum %d", m->text_len,
			PROTO_STATUS_TEXT_MAX);
	else if (memchr(m->text, 0, m->text_len))
		set_why(why, cap, "STATUS: text contains a NUL byte");
	else
		return 0;
	return -EPROTO;
}

static int check_payload(uint32_t type, const struct proto_msg *msg, char *why, size_t cap)
{
	switch (type) {
	case PROTO_HELLO: return check_hello(&msg->u.hello, why, cap);
	case PROTO_WELCOME: return check_welcome(&msg->u.welcome, why, cap);
	case PROTO_READY: return check_ready(&msg->u.ready, why, cap);
	case PROTO_ERROR: return check_error(&msg->u.error, why, cap);
	case PROTO_STATUS: return check_status(&msg->u.status, why, cap);
	default: return 0; /* RELEASE: any values; BYE, STATUS_REQ, RELOAD_REQ: no payload */
	}
}

/* ---- payloads, encode and decode side by side ---- */

static void put_hello(struct writer *w, const struct proto_hello *m)
{
	wr_u32(w, m->delivery);
	wr_u32(w, m->rank);
	wr_u32(w, m->world);
	wr_u32(w, m->depth);
	wr_bytes(w, m->device_uuid, PROTO_UUID_BYTES);
	wr_str(w, m->pipeline);
	wr_str(w, m->client_name);
	wr_str(w, m->resume);
}

static void get_hello(struct reader *r, struct proto_hello *m)
{
	memset(m, 0, sizeof(*m));
	rd_u32(r, "delivery", &m->delivery);
	rd_u32(r, "rank", &m->rank);
	rd_u32(r, "world", &m->world);
	rd_u32(r, "depth", &m->depth);
	rd_bytes(r, "device_uuid", m->device_uuid, PROTO_UUID_BYTES);
	rd_str(r, "pipeline", m->pipeline, sizeof(m->pipeline));
	rd_str(r, "client_name", m->client_name, sizeof(m->client_name));
	rd_str(r, "resume", m->resume, sizeof(m->resume));
}

static void put_welcome(struct writer *w, const struct proto_welcome *m)
{
	wr_u64(w, m->session);
	wr_u64(w, m->arena_bytes);
	wr_u64(w, m->slot_bytes);
	wr_u64(w, m->n_samples);
	wr_u64(w, m->seed);
	wr_u64(w, m->epoch);
	wr_u64(w, m->offset);
	wr_u32(w, m->batch_size);
	wr_u32(w, m->rank);
	wr_u32(w, m->world);
	wr_u32(w, m->depth);
	wr_u32(w, m->shuffle);
	wr_u32(w, m->drop_last);
	wr_u32(w, m->n_tensors);
	for (uint32_t t = 0; t < m->n_tensors; t++) {
		const struct proto_tensor *x = &m->tensors[t];
		wr_str(w, x->name);
		wr_u32(w, x->dtype);
		wr_u32(w, x->ndim);
		for (uint32_t d = 0; d < x->ndim; d++)
			wr_u64(w, x->shape[d]);
		wr_u64(w, x->offset);
	}
	wr_u32(w, m->delivery);
	if (m->delivery != PROTO_DELIVERY_DEVICE)
		return;
	const struct proto_device *d = &m->device;
	wr_u32(w, d->slots);
	wr_u64(w, d->slot_bytes);
	wr_u64(w, d->ring_bytes);
	wr_bytes(w, d->mem_handle, PROTO_IPC_HANDLE_BYTES);
	for (uint32_t i = 0; i < d->slots && i < PROTO_DEVICE_SLOTS_MAX; i++)
		wr_bytes(w, d->ready[i], PROTO_IPC_HANDLE_BYTES);
	for (uint32_t i = 0; i < d->slots && i < PROTO_DEVICE_SLOTS_MAX; i++)
		wr_bytes(w, d->released[i], PROTO_IPC_HANDLE_BYTES);
}

static void get_welcome(struct reader *r, struct proto_welcome *m)
{
	memset(m, 0, sizeof(*m));
	rd_u64(r, "session", &m->session);
	rd_u64(r, "arena_bytes", &m->arena_bytes);
	rd_u64(r, "slot_bytes", &m->slot_bytes);
	rd_u64(r, "n_samples", &m->n_samples);
	rd_u64(r, "seed", &m->seed);
	rd_u64(r, "epoch", &m->epoch);
	rd_u64(r, "offset", &m->offset);
	rd_u32(r, "batch_size", &m->batch_size);
	rd_u32(r, "rank", &m->rank);
	rd_u32(r, "world", &m->world);
	rd_u32(r, "depth", &m->depth);
	rd_u32(r, "shuffle", &m->shuffle);
	rd_u32(r, "drop_last", &m->drop_last);
	rd_u32(r, "n_tensors", &m->n_tensors);
	/* Counts bound the loops below, so they are checked before use. */
	if (!r->err && (m->n_tensors < 1 || m->n_tensors > PROTO_TENSORS_MAX))
		rd_fail(r, "n_tensors %u not in 1..%d", m->n_tensors, PROTO_TENSORS_MAX);
	for (uint32_t t = 0; t < m->n_tensors && !r->err; t++) {
		struct proto_tensor *x = &m->tensors[t];
		rd_str(r, "tensor name", x->name, sizeof(x->name));
		rd_u32(r, "tensor dtype", &x->dtype);
		rd_u32(r, "tensor ndim", &x->ndim);
		if (!r->err && (x->ndim < 1 || x->ndim > PROTO_NDIM_MAX))
			rd_fail(r, "tensor %u ndim %u not in 1..%d", t, x->ndim, PROTO_NDIM_MAX);
		for (uint32_t d = 0; d < x->ndim && !r->err; d++)
			rd_u64(r, "tensor shape", &x->shape[d]);
		rd_u64(r, "tensor offset", &x->offset);
	}
	rd_u32(r, "delivery", &m->delivery);
	if (r->err || m->delivery != PROTO_DELIVERY_DEVICE)
		return; /* an unknown delivery is refused by check_welcome */
	struct proto_device *d = &m->device;
	rd_u32(r, "device slots", &d->slots);
	if (!r->err && (d->slots < 1 || d->slots > PROTO_DEVICE_SLOTS_MAX))
		rd_fail(r, "device slots %u not in 1..%d", d->slots, PROTO_DEVICE_SLOTS_MAX);
	rd_u64(r, "device slot_bytes", &d->slot_bytes);
	rd_u64(r, "device ring_bytes", &d->ring_bytes);
	rd_bytes(r, "device mem_handle", d->mem_handle, PROTO_IPC_HANDLE_BYTES);
	for (uint32_t i = 0; i < d->slots && !r->err; i++)
		rd_bytes(r, "device ready event", d->ready[i], PROTO_IPC_HANDLE_BYTES);
	for (uint32_t i = 0; i < d->slots && !r->err; i++)
		rd_bytes(r, "device released event", d->released[i], PROTO_IPC_HANDLE_BYTES);
}

static void put_ready(struct writer *w, const struct proto_ready *m)
{
	wr_u64(w, m->seq);
	wr_u64(w, m->epoch);
	wr_u64(w, m->epoch_offset);
	wr_u64(w, m->batch);
	wr_u64(w, m->first);
	wr_u64(w, m->slot_offset);
	wr_u32(w, m->slot);
	wr_u32(w, m->generation);
	wr_u32(w, m->rows);
	wr_u32(w, m->flags);
}

static void get_ready(struct reader *r, struct proto_ready *m)
{
	memset(m, 0, sizeof(*m));
	rd_u64(r, "seq", &m->seq);
	rd_u64(r, "epoch", &m->epoch);
	rd_u64(r, "epoch_offset", &m->epoch_offset);
	rd_u64(r, "batch", &m->batch);
	rd_u64(r, "first", &m->first);
	rd_u64(r, "slot_offset", &m->slot_offset);
	rd_u32(r, "slot", &m->slot);
	rd_u32(r, "generation", &m->generation);
	rd_u32(r, "rows", &m->rows);
	rd_u32(r, "flags", &m->flags);
}

static void put_release(struct writer *w, const struct proto_release *m)
{
	wr_u64(w, m->seq);
	wr_u32(w, m->slot);
	wr_u32(w, m->generation);
}

static void get_release(struct reader *r, struct proto_release *m)
{
	memset(m, 0, sizeof(*m));
	rd_u64(r, "seq", &m->seq);
	rd_u32(r, "slot", &m->slot);
	rd_u32(r, "generation", &m->generation);
}

static void put_error(struct writer *w, const struct proto_error *m)
{
	wr_i32(w, m->code);
	wr_str(w, m->text);
}

static void get_error(struct reader *r, struct proto_error *m)
{
	memset(m, 0, sizeof(*m));
	rd_i32(r, "code", &m->code);
	rd_str(r, "text", m->text, sizeof(m->text));
}

static void put_status(struct writer *w, const struct proto_status *m)
{
	wr_u32(w, m->text_len);
	wr_bytes(w, m->text, m->text_len);
}

/* The text can be 64 KiB: only the bytes in use are written, not the whole
 * buffer. */
static void get_status(struct reader *r, struct proto_status *m)
{
	const uint8_t *p;
	m->text_len = 0;
	m->text[0] = '\0';
	rd_u32(r, "text_len", &m->text_len);
	if (!r->err && m->text_len > PROTO_STATUS_TEXT_MAX)
		rd_fail(r, "text_len %u over maximum %d", m->text_len, PROTO_STATUS_TEXT_MAX);
	p = rd_take(r, "text", m->text_len);
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
	struct writer w = {.p = buf, .cap = cap};
	size_t payload;

	if (h->type < 1 || h->type > PROTO_TYPE_MAX || (h->flags & ~PROTO_FLAGS_KNOWN))
		return -EINVAL;
	if (check_payload(h->type, msg, NULL, 0) < 0)
		return -EINVAL;

	wr_u32(&w, PROTO_MAGIC);
	wr_u16(&w, PROTO_VERSION);
	wr_u16(&w, h->type);
	wr_u32(&w, h->flags);
	wr_u32(&w, 0); /* length, filled in below */
	wr_u64(&w, h->request_id);
	switch (h->type) {
	case PROTO_HELLO: put_hello(&w, &msg->u.hello); break;
	case PROTO_WELCOME: put_welcome(&w, &msg->u.welcome); break;
	case PROTO_READY: put_ready(&w, &msg->u.ready); break;
	case PROTO_RELEASE: put_release(&w, &msg->u.release); break;
	case PROTO_ERROR: put_error(&w, &msg->u.error); break;
	case PROTO_STATUS: put_status(&w, &msg->u.status); break;
	default: break; /* BYE, STATUS_REQ, RELOAD_REQ: empty payload */
	}
	if (w.err)
		return w.err;
	payload = w.pos - PROTO_HEADER_BYTES;
	if (payload > PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	le_store(buf + 12, payload, 4);
	return (int)w.pos;
}

int proto_decode(const uint8_t *buf, size_t len, struct proto_msg *msg,
		 char *why, size_t why_cap)
{
	struct proto_header *h = &msg->hdr;
	struct reader r;
	int rc;

	set_why(why, why_cap, "%s", "");
	if (len < PROTO_HEADER_BYTES) {
		set_why(why, why_cap, "short frame: %zu bytes, the header alone is %d", len,
			PROTO_HEADER_BYTES);
		return -EBADMSG;
	}
	h->magic = (uint32_t)le_load(buf, 4);
	h->version = (uint16_t)le_load(buf + 4, 2);
	h->type = (uint16_t)le_load(buf + 6, 2);
	h->flags = (uint32_t)le_load(buf + 8, 4);
	h->length = (uint32_t)le_load(buf + 12, 4);
	h->request_id = le_load(buf + 16, 8);

	if (h->magic != PROTO_MAGIC) {
		set_why(why, why_cap, "bad magic 0x%08x, expected 0x%08x", h->magic, PROTO_MAGIC);
		return -EBADMSG;
	}
	if (h->version != PROTO_VERSION) {
		set_why(why, why_cap, "protocol version %u not supported (this side speaks %d)",
			h->version, PROTO_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h->length > PROTO_MAX_PAYLOAD) {
		set_why(why, why_cap, "frame length %u over maximum %d", h->length,
			PROTO_MAX_PAYLOAD);
		return -EMSGSIZE;
	}
	if (h->length != len - PROTO_HEADER_BYTES) {
		set_why(why, why_cap, "frame length %u disagrees with the %zu payload bytes received",
			h->length, len - PROTO_HEADER_BYTES);
		return -EBADMSG;
	}
	if (h->flags & ~PROTO_FLAGS_KNOWN) {
		set_why(why, why_cap, "unknown header flag bits 0x%x", h->flags & ~PROTO_FLAGS_KNOWN);
		return -EBADMSG;
	}
	if (h->type < 1 || h->type > PROTO_TYPE_MAX) {
		set_why(why, why_cap, "unknown message type %u", h->type);
		return -EPROTO;
	}

	r = (struct reader){.p = buf + PROTO_HEADER_BYTES, .len = h->length,
			    .msg_name = proto_type_name(h->type), .why = why, .why_cap = why_cap};
	switch (h->type) {
	case PROTO_HELLO: get_hello(&r, &msg->u.hello); break;
	case PROTO_WELCOME: get_welcome(&r, &msg->u.welcome); break;
	case PROTO_READY: get_ready(&r, &msg->u.ready); break;
	case PROTO_RELEASE: get_release(&r, &msg->u.release); break;
	case PROTO_ERROR: get_error(&r, &msg->u.error); break;
	case PROTO_STATUS: get_status(&r, &msg->u.status); break;
	default: break; /* BYE, STATUS_REQ, RELOAD_REQ: empty payload */
	}
	if (!r.err && r.pos != r.len) {
		if (r.pos == 0)
			rd_fail(&r, "payload must be empty, got %zu bytes", r.len);
		else
			rd_fail(&r, "%zu bytes after the last field", r.len - r.pos);
	}
	if (r.err)
		return r.err;
	rc = check_payload(h->type, msg, why, why_cap);
	return rc;
}
