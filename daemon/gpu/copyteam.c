/* SPDX-License-Identifier: Apache-2.0 */
/* copyteam: one memcpy shared by a few threads (copyteam.h). */
#include "daemon/gpu/copyteam.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void team_part(struct team *t, uint32_t k)
{
	size_t off = (size_t)k * t->part;
	if (off < t->bytes)
		memcpy(t->dst + off, t->src + off, t->bytes - off < t->part ? t->bytes - off : t->part);
}

static void *team_main(void *arg)
{
	struct team *t = arg;
	uint32_t k = 0;
	pthread_mutex_lock(&t->mu);
	for (uint32_t i = 0; i < t->n; i++)
		if (pthread_equal(t->threads[i], pthread_self()))
			k = i + 1;
	uint64_t seen = t->round;
	for (;;) {
		while (t->round == seen && !t->quit)
			pthread_cond_wait(&t->go, &t->mu);
		if (t->quit)
			break;
		seen = t->round;
		pthread_mutex_unlock(&t->mu);
		team_part(t, k);
		pthread_mutex_lock(&t->mu);
		if (--t->pending == 0)
			pthread_cond_signal(&t->done);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

int team_start(struct team *t, uint32_t threads)
{
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->go, NULL);
	pthread_cond_init(&t->done, NULL);
	t->n = 0;
	if (threads <= 1)
		return 0;
	t->threads = calloc(threads - 1, sizeof(pthread_t));
	if (!t->threads)
		return -ENOMEM;
	pthread_mutex_lock(&t->mu); /* team_main finds its index once all exist */
	for (uint32_t i = 0; i < threads - 1; i++) {
		if (pthread_create(&t->threads[i], NULL, team_main, t) != 0)
			break;
		pthread_setname_np(t->threads[i], "loaderd-pincopy");
		t->n++;
	}
	pthread_mutex_unlock(&t->mu);
	return 0;
}

void team_copy(struct team *t, uint8_t *dst, const uint8_t *src, size_t bytes)
{
	uint32_t parts = t->n + 1;
	if (t->n == 0 || bytes < (size_t)TEAM_MIN_PART * parts) {
		memcpy(dst, src, bytes);
		return;
	}
	pthread_mutex_lock(&t->mu);
	t->dst = dst;
	t->src = src;
	t->bytes = bytes;
	t->part = ((bytes + parts - 1) / parts + 4095) & ~(size_t)4095;
	t->pending = t->n;
	t->round++;
	pthread_cond_broadcast(&t->go);
	pthread_mutex_unlock(&t->mu);
	team_part(t, 0);
	pthread_mutex_lock(&t->mu);
	while (t->pending > 0)
		pthread_cond_wait(&t->done, &t->mu);
	pthread_mutex_unlock(&t->mu);
}

void team_stop(struct team *t)
{
	pthread_mutex_lock(&t->mu);
	t->quit = true;
	pthread_cond_broadcast(&t->go);
	pthread_mutex_unlock(&t->mu);
	for (uint32_t i = 0; i < t->n; i++)
		pthread_join(t->threads[i], NULL);
	free(t->threads);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->go);
	pthread_cond_destroy(&t->done);
}
