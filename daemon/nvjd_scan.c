/*
 * nvjd_scan: the structural check of a JPEG's end that nvjd_decode makes
 * before an image goes to the engines (nvjd.h): nvJPEG decodes a file cut
 * short inside its scan as far as it goes and reports success. Pure: it
 * needs no nvJPEG, so it is built (and tested) with or without nvjpeg.h.
 */
#include "daemon/nvjd.h"

bool nvjd_ends_in_scan(const uint8_t *data, size_t len)
{
	if (!data)
		return false;
	/* Walk back over pairs (data[i - 1], data[i]). In entropy-coded data a
	 * 0xff is followed by 0x00 (stuffing) or a marker; 0xff 0xff is fill;
	 * RST0..RST7 sit inside the scan. The first other marker found from
	 * the end is the last one in the file. */
	for (size_t i = len; i >= 2; i--) {
		if (data[i - 2] != 0xff)
			continue;
		uint8_t m = data[i - 1];
		if (m == 0x00 || m == 0xff || (m >= 0xd0 && m <= 0xd7))
			continue;
		return m == 0xda; /* SOS: the data stops inside the scan it starts */
	}
	return false;
}
