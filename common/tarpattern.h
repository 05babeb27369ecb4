/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tarpattern: the brace expansion of a shard pattern, `source = tar:PATTERN`
 * and `source = llmc:PATTERN` (daemon/source/tarshard.h, llmc.h), as
 * WebDataset's braceexpand does it: `train-{000000..000127}.tar` is a
 * numeric range (zero-padded to the wider bound when either bound has a
 * leading zero), `{a,b,c}` a list; several braces multiply, nesting is not
 * supported. Names come in expansion order.
 *
 * Here, below the daemon's layers, because two of them use it: the config
 * parser checks a pattern's syntax where the line is known
 * (daemon/config/), the sources expand it to open the shards
 * (daemon/source/). Pure (no I/O, no logging); safe from any thread.
 */
#ifndef LDR_COMMON_TARPATTERN_H
#define LDR_COMMON_TARPATTERN_H

#include <stddef.h>

#define TAR_SHARDS_MAX 1000000u /* shards one pattern may name */

/* Expands pattern into *out (n_out paths, each malloc'ed, the array too).
 * 0, or -EINVAL with err naming the fault (an unclosed or nested brace, an
 * empty list item, a bad range, more than TAR_SHARDS_MAX names) or
 * -ENOMEM. */
int tar_pattern_expand(const char *pattern, char ***out, size_t *n_out, char *err, size_t err_cap);
void tar_pattern_free(char **paths, size_t n);

#endif
