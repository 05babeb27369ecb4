/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llmc: the header of an llm.c token shard, read and checked before any
 * token of the shard is served.
 *
 * llm.c's data preparation (dev/data/data_common.py, write_datafile)
 * writes each shard as a header of 256 little-endian int32, then the
 * tokens as little-endian uint16:
 *
 *   offset  size    field
 *   0       4       magic, 20240520
 *   4       4       version, 1 (uint16 tokens, GPT-2's vocabulary)
 *   8       4       token count N (int32)
 *   12      1012    the rest of the header, zeros as written; not read
 *   1024    2 N     the tokens
 *
 * The rules, each checked (a refusal names the file, the field, its byte
 * offset and the value at fault):
 *   - the file holds the whole header (1024 bytes);
 *   - magic exact; version 1 only (llm.c's later uint32 shards have
 *     another magic and version and are refused as such);
 *   - N >= 0, and the file is exactly 1024 + 2 N bytes: a shorter file is
 *     truncated, a longer one has bytes no token count accounts for.
 *
 * Threads: calls touch only their arguments.
 */
#ifndef LDR_DAEMON_LLMC_H
#define LDR_DAEMON_LLMC_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/source/imagefolder.h"

#define LLMC_HEADER_BYTES 1024u
#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_TOKEN_BYTES 2u

/*
 * Checks the header in data[0..len) (the first len bytes of a file of
 * file_bytes bytes; len may be less than the header, when the file is)
 * and stores the token count in *n_tokens. path is used only in messages
 * (NULL: none). Returns 0, or with one line in err[0..cap) (cap > 0):
 *   -ENODATA  the file is shorter than the header, or than its tokens
 *             ("/d/s.bin: token count at offset 8: 1000 tokens need 3024
 *             bytes, the file has 2000: truncated")
 *   -EINVAL   a rule above broken ("/d/s.bin: magic at offset 0: 1234,
 *             not 20240520 (not an llm.c token shard)"); data NULL with
 *             len > 0, or n_tokens NULL
 * Pure (no I/O, no logging).
 */
int llmc_header_parse(const uint8_t *data, size_t len, uint64_t file_bytes, const char *path,
		      uint64_t *n_tokens, char *err, size_t cap);

/*
 * Opens path (a regular file, common/regfile.h: a FIFO or directory is
 * refused without being opened), reads its header and parses it with
 * llmc_header_parse. 0, what llmc_header_parse returns, or -errno for a
 * file that cannot be read, the message naming the file.
 */
int llmc_header_read(const char *path, uint64_t *n_tokens, char *err, size_t cap);

/*
 * An llmc:PATTERN source's shards: the pattern expanded as a tar source's
 * (daemon/source/tarshard.h, tar_pattern_expand), each shard's header read and
 * checked (llmc_header_read), and its windows of seq_len + 1 tokens,
 * seq_len apart, within the shard: (N - 1) div seq_len of them, none when
 * N <= seq_len. Into out: shards[] (the windows of shard s are samples
 * first_sample .. first_sample + n_samples - 1, in pattern order) and
 * paths (no entries: out->n is 0); *n_samples the windows of them all.
 * Reads each shard's first 1024 bytes, nothing more. 0, or -errno with
 * err naming the shard and, for a bad header, the field and its offset;
 * -EINVAL when the shards hold no window at all.
 */
int llmc_scan(const char *pattern, uint64_t seq_len, struct image_index *out,
	      uint64_t *n_samples, char *err, size_t cap);

#endif
