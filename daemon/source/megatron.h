/* SPDX-License-Identifier: Apache-2.0 */
/*
 * megatron: the index of a Megatron-LM indexed dataset (the MMapIndexed /
 * IndexedDataset format of tokenized text), read and checked in full
 * before any token is served.
 *
 * A dataset is two files with one prefix: PREFIX.bin holds the tokens of
 * every sequence, back to back, and PREFIX.idx says where each sequence
 * starts, how long it is and how sequences group into documents. The .idx
 * is, little-endian, with no padding anywhere:
 *
 *   offset  size     field
 *   0       9        magic "MMIDIDX\0\0"
 *   9       8        version (u64), 1
 *   17      1        dtype code (u8) of the tokens in .bin: 1 uint8, 2 int8,
 *                    3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
 *                    8 uint16
 *   18      8        sequence_count S (u64)
 *   26      8        document_count D (u64): the entries of document_indices,
 *                    that is one more than the documents
 *   34      4 S      sequence_lengths: tokens per sequence (i32)
 *   34+4S   8 S      sequence_pointers: byte offset of each sequence in .bin (i64)
 *   34+12S  8 D      document_indices: sequence index where each document
 *                    starts, then S (i64); document d is the sequences
 *                    [document_indices[d], document_indices[d+1])
 *
 * The arrays start at offsets that are not aligned for their types (34 is
 * not a multiple of 4 or 8), so they are read byte by byte, never through a
 * cast pointer (mg_length, mg_pointer, mg_doc_index), from the bytes
 * parsed: nothing is copied, so an index of a billion documents costs no
 * memory of its own beyond its file's pages (mg_index_open maps the file
 * and gives back the pages it has checked as it goes).
 *
 * The rules, every one checked at parse time, where the format leaves a
 * choice decided strictly (a refusal names the file, the field, its byte
 * offset and the value at fault):
 *   - magic exact; version 1 only;
 *   - dtype: the integer codes only (uint8, int8, int16, int32, int64,
 *     uint16: token_bytes 1, 1, 2, 4, 8, 2); float32 and float64 are not
 *     token ids and are refused, as is any other code;
 *   - the file is exactly 34 + 12 S + 8 D bytes. A shorter one is
 *     truncated (-ENODATA). A longer one is refused: when the surplus is
 *     exactly S bytes it is the int8 sequence_modes array a multimodal
 *     dataset appends (the file does not say whether it has one), and the
 *     message says multimodal datasets are not supported; any other surplus
 *     is reported as trailing bytes;
 *   - D >= 1 (document_indices always holds its leading 0);
 *   - sequence_lengths[i] >= 0 (Megatron's writer stores empty sequences,
 *     so 0 is accepted);
 *   - sequence_pointers contiguous from 0, as Megatron's writer computes
 *     them: pointers[0] == 0 and pointers[i+1] == pointers[i] +
 *     lengths[i] * token_bytes; each sequence within .bin, and .bin exactly
 *     as long as the sequences together (a longer .bin is refused too: it
 *     belongs to another index, or one that was cut);
 *   - document_indices: the first 0, non-decreasing (an empty document, two
 *     equal entries, is what Megatron's builder writes for a document with
 *     no sequences, and is accepted), none past S, the last S.
 *
 * Threads: calls touch only their arguments.
 */
#ifndef LDR_DAEMON_MEGATRON_H
#define LDR_DAEMON_MEGATRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/source/cachefile.h"

#define MG_HEADER_BYTES 34u /* magic, version, dtype code and the two counts */

/* Megatron's DType codes. */
enum mg_dtype {
	MG_UINT8 = 1,
	MG_INT8 = 2,
	MG_INT16 = 3,
	MG_INT32 = 4,
	MG_INT64 = 5,
	MG_FLOAT64 = 6,
	MG_FLOAT32 = 7,
	MG_UINT16 = 8,
};

/* A file of a dataset as it was when it was opened: its stamp and size. */
struct mg_file {
	struct cachefile_stamp stamp;
	uint64_t bytes;
};

/* A validated PREFIX.idx. Its arrays are read from the bytes parsed
 * (data), which must outlive it: mg_index_open's mapping, which the
 * struct then owns and mg_index_free unmaps. */
struct mg_index {
	uint8_t dtype_code;       /* enum mg_dtype, an integer one */
	uint32_t token_bytes;     /* 1, 2, 4 or 8 */
	bool token_signed;        /* int8, int16, int32, int64 */
	uint64_t n_sequences;     /* the header's sequence_count */
	uint64_t n_documents;     /* documents: the header's document_count - 1 */
	uint64_t n_tokens;        /* sum of lengths */
	uint64_t bin_bytes;       /* the size of PREFIX.bin: n_tokens * token_bytes */
	const uint8_t *data;      /* the index's bytes */
	void *map;                /* mg_index_open's mapping of them, NULL for a parse */
	size_t map_bytes;
	/* mg_index_open: the .idx it checked (the workers check that the one
	 * they map is the same file) */
	uint64_t idx_dev, idx_ino;
	int64_t idx_mtime_sec, idx_mtime_nsec;
	/* mg_index_map: PREFIX.idx (opened) and PREFIX.bin (stat'ed) */
	struct mg_file idx_file, bin_file;
};

/* sequence_lengths[i] (>= 0), i < n_sequences. */
int32_t mg_length(const struct mg_index *ix, uint64_t i);
/* sequence_pointers[i] (>= 0), i < n_sequences. */
int64_t mg_pointer(const struct mg_index *ix, uint64_t i);
/* document_indices[d] (0 .. n_sequences), d <= n_documents. */
int64_t mg_doc_index(const struct mg_index *ix, uint64_t d);
/* Byte offsets of sequence_pointers and document_indices in the file. */
uint64_t mg_pointers_at(const struct mg_index *ix);
uint64_t mg_doc_indices_at(const struct mg_index *ix);

/*
 * Reads and checks the index in data[0..len) (the bytes of idx_path)
 * against a .bin of bin_bytes bytes, into *out. idx_path is used only in
 * messages (NULL: none), and names the .bin too: its ".idx" suffix replaced
 * by ".bin".
 *
 * Returns 0, or with *out zeroed and one line in err[0..cap) when cap > 0:
 *   -ENODATA  the .idx ends before the header or an array does ("...: truncated:
 *             sequence_pointers at offset 74 needs 40 bytes, the file has 100")
 *   -EINVAL   a rule above broken, e.g. "/d/x.idx: sequence_pointers[17] at
 *             offset 1234: 99999999 is past the end of /d/x.bin (4096 bytes)";
 *             or out NULL, or data NULL with len > 0
 * Pure (no I/O, no logging, no allocation); time linear in len. *out
 * refers to data.
 */
int mg_index_parse(const uint8_t *data, size_t len, uint64_t bin_bytes, const char *idx_path,
		   struct mg_index *out, char *err, size_t cap);

/*
 * Opens PREFIX.idx (a regular file, common/regfile.h: a FIFO or directory
 * is refused without being opened), maps it read-only, stats PREFIX.bin
 * (which must be a regular file too), into *out: its mapping, bin_bytes,
 * idx_file and bin_file (and the idx_ fields the workers compare), its
 * figures not yet read. One of mg_index_check and mg_index_trust follows.
 * 0, or for a file that cannot be used -errno (-ENOENT, -EACCES, ...;
 * REGFILE_NOT_REGULAR with "PATH: not a regular file (a FIFO)"), the
 * message naming the file.
 */
int mg_index_map(const char *prefix, struct mg_index *out, char *err, size_t cap);

/*
 * A mapped index checked in full with mg_index_parse's checks, the pages
 * it has checked given back as it goes (so that checking a large index
 * takes bounded memory), its progress counted (daemon/core/progress.h).
 * *ix keeps the mapping (its arrays are read from it; a page read again is
 * the page cache's). 0, or what mg_index_parse returns (-ECANCELED when
 * loaderd stops meanwhile), *ix then freed. idx_path names it.
 */
int mg_index_check(struct mg_index *ix, const char *idx_path, char *err, size_t cap);

/*
 * A mapped index whose arrays were checked before, when its files were as
 * they are now (megatron_cache.h): only the header's checks and the
 * arrays' sizes against the file, O(1), and the figures of that check
 * (dtype_code, n_sequences, n_documents, n_tokens of *figures) against
 * the header's and the .bin's size. 0 with n_tokens taken from figures;
 * or -ESTALE ("its header ... is not the one checked") or what
 * mg_index_parse returns, *ix left mapped (for mg_index_check).
 */
int mg_index_trust(struct mg_index *ix, const char *idx_path, const struct mg_index *figures,
		   char *err, size_t cap);

/* mg_index_map, then mg_index_check. */
int mg_index_open(const char *prefix, struct mg_index *out, char *err, size_t cap);

/* Gives back the pages of an opened index's mapping that hold documents
 * [from, to) (their document_indices and their sequences' pointers): a
 * walk over the documents calls it behind itself, so that the walk, too,
 * takes bounded memory. */
void mg_index_drop_documents(const struct mg_index *ix, uint64_t from, uint64_t to);

/* Unmaps what a successful open mapped; NULL, a zeroed struct, a parse's
 * and a freed one are fine. Leaves *ix zeroed. */
void mg_index_free(struct mg_index *ix);

/* The name of a dtype code ("uint16", "float32"), "unknown" for others. */
const char *mg_dtype_name(uint8_t code);

#endif
