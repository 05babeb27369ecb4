/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_uuid: GPU UUID text form (gpu_uuid.h). */
#include "common/gpu_uuid.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Byte positions after which the text form has a dash. */
static bool gpu_uuid_dash_after(int byte)
{
	return byte == 3 || byte == 5 || byte == 7 || byte == 9;
}

void gpu_uuid_format(const uint8_t uuid[GPU_UUID_BYTES], char out[GPU_UUID_TEXT_MAX])
{
	char *p = out + 4;
	memcpy(out, "GPU-", 4);
	for (int i = 0; i < GPU_UUID_BYTES; i++) {
		p += sprintf(p, "%02x", uuid[i]);
		if (gpu_uuid_dash_after(i))
			*p++ = '-';
	}
	*p = '\0';
}

static int gpu_uuid_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int gpu_uuid_parse(const char *text, uint8_t uuid[GPU_UUID_BYTES])
{
	if (strncasecmp(text, "GPU-", 4) == 0)
		text += 4;
	for (int i = 0; i < GPU_UUID_BYTES; i++) {
		int hi = gpu_uuid_hex_value(text[0]);
		int lo = hi < 0 ? -1 : gpu_uuid_hex_value(text[1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		uuid[i] = (uint8_t)(hi << 4 | lo);
		text += 2;
		if (gpu_uuid_dash_after(i) && *text++ != '-')
			return -EINVAL;
	}
	return *text == '\0' ? 0 : -EINVAL;
}

bool gpu_uuid_is_zero(const uint8_t uuid[GPU_UUID_BYTES])
{
	for (int i = 0; i < GPU_UUID_BYTES; i++)
		if (uuid[i])
			return false;
	return true;
}
