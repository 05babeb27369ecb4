/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_uuid: GPU UUIDs as text, the form nvidia-smi prints and
 * CUDA_VISIBLE_DEVICES accepts: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
 *
 * loaderd names GPUs by UUID everywhere (protocol, logs, status), never by
 * ordinal: CUDA_VISIBLE_DEVICES can differ between the daemon and each
 * client, so an ordinal means a different GPU in each process.
 *
 * Thread-safety: reentrant.
 */
#ifndef LDR_COMMON_GPU_UUID_H
#define LDR_COMMON_GPU_UUID_H

#include <stdbool.h>
#include <stdint.h>

#define GPU_UUID_BYTES 16
#define GPU_UUID_TEXT_MAX 41 /* "GPU-" + 36, with the NUL */

void gpu_uuid_format(const uint8_t uuid[GPU_UUID_BYTES], char out[GPU_UUID_TEXT_MAX]);

/* Parses the text form, with or without the "GPU-" prefix (hex digits in
 * either case). 0 or -EINVAL. */
int gpu_uuid_parse(const char *text, uint8_t uuid[GPU_UUID_BYTES]);

bool gpu_uuid_is_zero(const uint8_t uuid[GPU_UUID_BYTES]);

#endif
