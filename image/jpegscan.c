/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jpegscan: the structural check of a JPEG's scan (jh_check_scan in
 * jpeghdr.h), made before an image goes to the GPU's engines. nvJPEG
 * decodes a file cut short inside its scan as far as it goes and reports
 * success; a marker inside the entropy-coded data is what a damaged byte
 * most often makes, and what a decoder that stops there would not report
 * either. Pure: the workers run it on every image they leave to the GPU.
 */
#include "image/jpeghdr.h"

#include <errno.h>
#include <string.h>

#include "common/errtext.h"

/* Markers that may follow a scan when more scans follow: DHT, DQT, SOS,
 * DNL, DRI, APPn, COM. */
static int may_follow_scan(uint8_t m)
{
	return m == 0xc4 || m == 0xdb || m == 0xda || m == 0xdc || m == 0xdd || m == 0xfe ||
	       (m >= 0xe0 && m <= 0xef);
}

bool jh_gpu_takes(const uint8_t *data, size_t len, const struct jh_limits *lim,
		  struct jh_info *info)
{
	return jh_parse(data, len, info, NULL, 0) == 0 && jh_gpu_refusal(info, len, lim) == NULL &&
	       jh_check_scan(data, len, NULL, 0) == 0;
}

int jh_check_scan(const uint8_t *data, size_t len, char *err, size_t cap)
{
	if (!data || len < 2 || data[0] != 0xff || data[1] != 0xd8)
		return errtext(err, cap, -EBADMSG, "not a JPEG (no start-of-image marker)");
	/* The marker segments up to the first SOS. Whatever does not parse
	 * here is left to nvJPEG's parser, which judges headers. */
	size_t pos = 2;
	for (;;) {
		if (pos + 2 > len || data[pos] != 0xff)
			return 0;
		uint8_t m = data[pos + 1];
		if (m == 0xff) { /* fill */
			pos++;
			continue;
		}
		pos += 2;
		if (m == 0x01 || (m >= 0xd0 && m <= 0xd8))
			continue; /* no length */
		if (m == 0xd9 || pos + 2 > len)
			return 0;
		size_t seg = (size_t)data[pos] << 8 | data[pos + 1];
		if (seg < 2 || seg > len - pos)
			return 0;
		pos += seg;
		if (m == 0xda)
			break;
	}
	/* The entropy-coded data: every 0xff is stuffing (0xff 0x00), fill,
	 * the next restart marker in turn, or the marker that ends the scan. */
	unsigned next_rst = 0;
	for (;;) {
		const uint8_t *ff = pos < len ? memchr(data + pos, 0xff, len - pos) : NULL;
		if (!ff)
			break;
		size_t at = (size_t)(ff - data), q = at + 1;
		while (q < len && data[q] == 0xff)
			q++;
		if (q >= len)
			break;
		uint8_t m = data[q];
		pos = q + 1;
		if (m == 0x00)
			continue;
		if (m >= 0xd0 && m <= 0xd7) {
			if (m - 0xd0u != next_rst)
				return errtext(err, cap, -EBADMSG,
					       "corrupt JPEG data: restart marker %u at byte %zu "
					       "where %u was due",
					       m - 0xd0u, at, next_rst);
			next_rst = (next_rst + 1) & 7;
			continue;
		}
		if (m == 0xd9 || may_follow_scan(m))
			return 0; /* the end, or more scans: nvJPEG judges those */
		return errtext(err, cap, -EBADMSG,
			       "corrupt JPEG data: marker 0x%02x inside the scan at byte %zu", m,
			       at);
	}
	return errtext(err, cap, -EBADMSG,
		       "truncated: the data ends inside the scan (no end-of-image marker)");
}
