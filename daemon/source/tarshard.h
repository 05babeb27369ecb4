/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tarshard: the sample list of `source = tar:PATTERN`, tar shards in
 * WebDataset layout, built once at start from the tar headers (and each
 * sample's small label member), never from the images.
 *
 * PATTERN names the shards with brace expressions, as WebDataset's
 * braceexpand does: `train-{000000..000127}.tar` is a numeric range
 * (zero-padded to the wider bound when either bound has a leading zero),
 * `{a,b,c}` a list; several braces multiply, nesting is not supported.
 * Shards are taken in expansion order, members in file order.
 *
 * Members group into samples as in WebDataset: a member's key is its path
 * up to the first '.' of its last component, the rest (compared in lower
 * case) its extension, and consecutive members with one key form one
 * sample. A sample's image is its `jpg` or `jpeg` member, its label the
 * decimal text of its `cls` member. Members without a '.' in the last
 * component, or whose last component starts with "__", are skipped, as are
 * directories, links and other non-file entries. A sample whose image is
 * another format WebDataset decodes (png, ppm, bmp, ...) is counted in
 * other_images and left out.
 *
 * The reader follows POSIX ustar, with GNU long names ('L'), GNU base-256
 * sizes and pax extended headers ('x': path and size; 'g' is skipped). It
 * reads one 1024-byte piece per member: the header and, for a label, long
 * name or pax member, its data.
 *
 * Errors name the shard, the byte offset of the header concerned and,
 * where there is one, the member: a bad header checksum (not a tar file,
 * or a damaged one), a member running past the end of the file, a
 * truncated header, a sample with no image or no label, a label that is
 * not a decimal integer, two members of one sample with the same
 * extension, a shard the pattern names that cannot be opened or is not a
 * regular file ("not a regular file (a FIFO)": never opened, so never
 * blocked on; common/regfile.h).
 */
#ifndef LDR_DAEMON_TARSHARD_H
#define LDR_DAEMON_TARSHARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/tarpattern.h" /* tar_pattern_expand: the pattern's braces */
#include "daemon/source/imagefolder.h"

/* Indexes every shard pattern names. 0, or -errno with err naming the
 * shard, offset and reason. */
int tar_scan(const char *pattern, struct image_index *out, char *err, size_t err_cap);

#endif
