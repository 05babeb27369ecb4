/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_transform: libFuzzer harness for the transform chain's parser
 * (image/transform.c), which reads a pipeline's `transform` text, and its
 * messages: close matches, torchvision's syntax rewritten, the expected
 * forms.
 *
 * A refusal must carry a message (one line for text of one line) and leave
 * the chain zeroed; an accepted chain must have a fixed output size in
 * range, and format to a text that parses back to the same chain. Any
 * breach aborts.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "image/transform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct tf_chain zero;
	char text[1024], err[512], formatted[1024];
	struct tf_chain chain, again;
	if (size >= sizeof(text))
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (tf_parse(text, &chain, err, sizeof(err)) < 0) {
		/* one line, for text of one line (as a config value always is) */
		bool one_line = !strpbrk(text, "\r\n");
		if (err[0] == '\0' || !memchr(err, '\0', sizeof(err)) ||
		    (one_line && strpbrk(err, "\r\n")) || memcmp(&chain, &zero, sizeof(chain)) != 0)
			abort();
		/* a short buffer: cut, terminated */
		char small[7];
		if (tf_parse(text, &chain, small, sizeof(small)) >= 0 || strlen(small) >= sizeof(small))
			abort();
		return 0;
	}
	if (chain.n == 0 || chain.n > TF_OPS_MAX || chain.out_h < 1 || chain.out_h > TF_SIZE_MAX ||
	    chain.out_w < 1 || chain.out_w > TF_SIZE_MAX)
		abort();
	if (tf_format(&chain, formatted, sizeof(formatted)) != 0 ||
	    tf_parse(formatted, &again, err, sizeof(err)) != 0 ||
	    memcmp(&chain, &again, sizeof(chain)) != 0)
		abort();
	return 0;
}
