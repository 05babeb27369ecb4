/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jpeghdr: what a JPEG file's header says, read without libjpeg, and
 * whether the GPU's hardware JPEG decoder (the nvJPEG hardware backend)
 * can take the file.
 *
 * jh_parse walks the markers from SOI up to and including the first SOS
 * header and stops there: it never reads entropy-coded data, so its cost
 * is the header's length (APPn, COM and table segments are skipped by
 * their length fields), whatever the image's size. Workers run it on every
 * image before choosing a decoder.
 *
 * Input is untrusted: no read past len, no allocation, no global state, and
 * time linear in len for any bytes. Pure (no I/O, no logging); messages
 * never name the file: the caller, which knows the path, prefixes it and
 * logs once.
 *
 * What it accepts is what the JPEG standard (ITU-T T.81) allows, read
 * strictly; it is stricter than libjpeg in places where libjpeg recovers
 * with a warning (bytes that are not a marker between segments, scan
 * parameters a sequential scan cannot have) and where libjpeg fails only
 * later, at jpeg_start_decompress (more than 10 blocks per MCU). So a
 * refusal here means "this header cannot be vouched for", not always "no
 * decoder can read this": a caller routes such files to jd_decode_box
 * (image/jpeg.h), which has the last word on them.
 *
 * Threads: calls touch only their arguments.
 */
#ifndef LDR_IMAGE_JPEGHDR_H
#define LDR_IMAGE_JPEGHDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The coding process, from the frame's SOFn marker (T.81 table B.1). */
enum jh_process {
	JH_BASELINE,     /* SOF0: sequential DCT, Huffman, 8-bit */
	JH_EXTENDED,     /* SOF1 (Huffman), SOF9 (arithmetic): sequential DCT */
	JH_PROGRESSIVE,  /* SOF2 (Huffman), SOF10 (arithmetic) */
	JH_LOSSLESS,     /* SOF3 (Huffman), SOF11 (arithmetic) */
	JH_HIERARCHICAL, /* a DHP marker, or a differential frame (SOF5-7, SOF13-15) */
};

/*
 * Chroma subsampling: luma's (component 0's) sampling factors divided by
 * the chroma components' (1 and 2; a 4th component, YCCK's K, must have
 * luma's factors). Every chroma component must divide luma evenly, by the
 * same ratio, else JH_OTHER. The class is the ratio, so 2x2/2x2/2x2 is
 * JH_444 and 4x2/2x1/2x1 is JH_420.
 */
enum jh_subsamp {
	JH_GRAY,  /* one component */
	JH_444,   /* ratio 1x1 */
	JH_422,   /* 2x1 */
	JH_420,   /* 2x2 */
	JH_440,   /* 1x2 */
	JH_411,   /* 4x1 */
	JH_410,   /* 4x2 */
	JH_OTHER, /* anything else */
};

/* The color space of the stored components, inferred from the component
 * count, the JFIF and Adobe markers and the component identifiers by
 * libjpeg-turbo's rules (jdapimin.c, default_decompress_parms), so that it
 * is the jpeg_color_space libjpeg reports for the same file:
 *   1 component   GRAY
 *   3 components  YCBCR with a JFIF marker; else with an Adobe marker RGB
 *                 for transform 0, YCBCR for any other; else RGB when the
 *                 identifiers are 'R', 'G', 'B', YCBCR otherwise
 *   4 components  with an Adobe marker CMYK for transform 0, YCCK for any
 *                 other; CMYK without one
 *   2 components  UNKNOWN */
enum jh_color {
	JH_COLOR_UNKNOWN,
	JH_COLOR_GRAY,
	JH_COLOR_YCBCR,
	JH_COLOR_RGB,
	JH_COLOR_CMYK,
	JH_COLOR_YCCK,
};

/* The header of one file, as jh_parse found it. */
struct jh_info {
	uint32_t width, height;  /* pixels: the frame header's X and Y, both > 0 */
	uint8_t components;      /* Nf of the frame: 1..4 */
	uint8_t precision;       /* P, bits per sample: 8 or 12 (DCT), 2..16 (lossless) */
	uint8_t sof;             /* n of the frame's SOFn marker (0xC0 + n): 0..15 but 4, 8, 12 */
	enum jh_process process; /* from sof, or JH_HIERARCHICAL after a DHP marker */
	bool arithmetic;         /* arithmetic coding (SOF9..SOF15), else Huffman */
	enum jh_subsamp subsamp;
	enum jh_color color;
	uint8_t h[4], v[4];      /* sampling factors (1..4) of each component, in frame
				  * order; 0 past components */
	bool jfif;               /* a JFIF APP0 ("JFIF\0", at least 14 bytes of data) */
	bool adobe;              /* an Adobe APP14 ("Adobe", at least 12 bytes of data) */
	uint8_t adobe_transform; /* its transform byte (the last one's) when adobe, else 0:
				  * 0 RGB or CMYK as stored, 1 YCbCr, 2 YCCK */
	bool single_scan;        /* the first scan carries every component of the frame
				  * (interleaved); false when components have scans of
				  * their own */
	uint16_t restart_interval; /* MCUs between restart markers (the last DRI before
				    * the first scan), 0 for none */
	size_t scan_offset;      /* offset of the first scan's entropy-coded data: just
				  * past its SOS segment, <= len */
};

/*
 * Reads the header of the JPEG in data[0..len) into *out.
 *
 * Walks markers from SOI to the end of the first SOS segment. Fill bytes
 * (0xFF) before a marker are skipped; RSTn and TEM (no length) are passed
 * over; APPn, COM, DQT, DHT, DAC, DNL, DHP and EXP segments are skipped by
 * their length (APP0 and APP14 are looked into for JFIF and Adobe); DRI
 * sets restart_interval; SOF0..SOF15 (not C4 DHT, C8 JPG, CC DAC) is the
 * frame header.
 *
 * Checks, each failing with -EBADMSG and a message naming the marker and
 * its offset (that of the 0xFF just before its code, fill bytes aside;
 * e.g. "SOF0 at offset 158: length 14 does not match 3 components"):
 *   - the file starts with SOI (0xFF 0xD8); every segment starts with 0xFF
 *     (after the previous one, fill bytes aside) and a marker code; no
 *     second SOI, no EOI, no reserved marker (JPG, JPGn, 0x02..0xBF);
 *   - every segment's length is at least 2; DRI's is 4, SOF's is 8 + 3 Nf,
 *     SOS's 6 + 2 Ns;
 *   - exactly one SOF, before the first SOS;
 *   - SOF: Nf 1..4 (more, legal up to 255, is refused as unsupported);
 *     width not 0; height not 0 (0 means a DNL marker after the first scan
 *     gives it: unsupported); precision 8 or 12 for DCT frames, 2..16 for
 *     lossless ones; sampling factors 1..4; quantization tables 0..3;
 *     component identifiers distinct;
 *   - first SOS: Ns 1..4; every component in the frame, in the frame's
 *     order, none twice; Huffman or conditioning tables 0..3; at most 10
 *     blocks per MCU when it interleaves components (T.81 B.2.3); Ss, Se,
 *     Ah, Al valid for the frame's process (sequential: 0, 63, 0, 0;
 *     progressive: a DC scan or a one-component AC scan within 0..63, Ah and
 *     Al <= 13; lossless: a predictor 1..7, Se 0, Ah 0).
 *
 * Returns 0 and fills *out, or, with *out zeroed and a message (without a
 * file name) in err[0..err_cap) when err_cap > 0:
 *   -ENODATA  len == 0 ("empty file"), or the data ends before the first
 *             SOS segment does ("truncated in DQT at offset 20", or
 *             "truncated at offset 623, before the first scan" where it ends
 *             between segments). Every prefix of a file this accepts gets
 *             -ENODATA until it holds the whole first SOS segment.
 *   -EBADMSG  not a JPEG file ("not a JPEG file (starts with 0x89 0x50)"),
 *             or a header that fails a check above
 *   -EINVAL   out NULL, or data NULL with len > 0
 * err is emptied first, and stays empty on success.
 */
int jh_parse(const uint8_t *data, size_t len, struct jh_info *out, char *err, size_t err_cap);

/* Limits on what is sent to the hardware decoder; 0 in a field is no limit. */
struct jh_limits {
	uint64_t max_bytes;  /* file size */
	uint32_t max_side;   /* width and height, each */
	uint64_t max_pixels; /* width * height */
};

/*
 * Whether the nvJPEG hardware backend can take the file whose header is
 * *info and whose size is file_bytes, within *lim (NULL: no limits).
 * Returns NULL when it can; else a short static reason, the first of these,
 * checked in this order:
 *   "hierarchical"                    process JH_HIERARCHICAL
 *   "lossless"                        process JH_LOSSLESS
 *   "12-bit samples"                  precision other than 8
 *   "arithmetic coding"
 *   "progressive"
 *   "extended sequential (SOF1)"      SOF1, even 8-bit Huffman: the hardware
 *                                     is documented for baseline only, so
 *                                     this stays conservative
 *   "4 components (CMYK/YCCK)"
 *   "2 components"
 *   "RGB (Adobe transform 0)"         3 components stored as RGB, not YCbCr,
 *                                     as an Adobe marker says (even beside a
 *                                     JFIF marker, which says otherwise)
 *   "Adobe transform other than 0 or 1"  3 components, an unknown transform
 *   "RGB (component ids R, G, B)"     3 components libjpeg takes as RGB
 *   "4:1:1 subsampling", "4:1:0 subsampling", "unusual subsampling"
 *                                     (JH_OTHER)
 *   "chroma sampling factors not 1x1" a class the hardware takes, written
 *                                     with larger factors (2x2/2x2/2x2)
 *   "components in separate scans"    not single_scan
 *   "chroma 2 samples wide"           4:2:2 or 4:2:0, 3 or 4 pixels wide:
 *                                     libjpeg repeats such a chroma plane
 *                                     across, the engines interpolate it,
 *                                     so the two would differ everywhere
 *   "over max_bytes", "over max_side", "over max_pixels"
 * So what it takes is: baseline (SOF0), Huffman, 8-bit, one interleaved
 * first scan, grayscale or YCbCr with chroma 1x1 at 4:4:4, 4:2:2, 4:2:0 or
 * 4:4:0 (the two subsampled across: not 3 or 4 pixels wide), within the
 * limits. A NULL info, or one no jh_parse filled (0 or
 * more than 4 components), gets "no header".
 */
const char *jh_gpu_refusal(const struct jh_info *info, uint64_t file_bytes,
			   const struct jh_limits *lim);

/*
 * The structural check of a JPEG's scan, made of every image before it goes
 * to the GPU's engines (nvjd_decode makes it unless the caller did).
 * Walks the marker segments of data[0..len) to the first scan, then its
 * entropy-coded data: 0 when the scan ends at an end-of-image marker (what
 * follows is not read) or at a marker that may start more scans (left to
 * nvJPEG); else -EBADMSG with err (cap bytes, may be NULL):
 *   "not a JPEG (no start-of-image marker)"
 *   "truncated: the data ends inside the scan (no end-of-image marker)"
 *   "corrupt JPEG data: marker 0xMM inside the scan at byte N"
 *   "corrupt JPEG data: restart marker M at byte N where K was due"
 * A header that does not parse is 0 here: nvJPEG's parser judges headers.
 * Pure; one memchr pass over the compressed bytes.
 */
int jh_check_scan(const uint8_t *data, size_t len, char *err, size_t cap);

/*
 * Whether the GPU's hardware decoder gets the JPEG in data[0..len): its
 * header reads (jh_parse), the decoder takes it within lim
 * (jh_gpu_refusal, with len as its bytes) and its scan is whole
 * (jh_check_scan). Fills *info when true. The workers' decision for a
 * sample that falls in the GPU's share (worker/image_rows.c); every other
 * JPEG is decoded on the CPU, where a bad one is handled by on_error.
 */
bool jh_gpu_takes(const uint8_t *data, size_t len, const struct jh_limits *lim,
		  struct jh_info *info);

#endif
