/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ahead: the read-ahead thread of a client that decodes its GPU's JPEGs
 * (client_impl.h says what it is for and what it shares).
 *
 * Without it the library reads the daemon's frames only inside ldr_next:
 * a READY that arrives while the training runs its step waits in the
 * socket, and its batch's decoding begins only when the training asks for
 * the batch, which then waits for all of it (ldr_stats.decode_late_ns).
 * The thread polls the socket and a stop pipe; when a frame is there it
 * takes the handle's lock and reads every frame there (client_read_ahead).
 * While the caller is inside ldr_next, which holds the lock, the caller
 * reads them itself and the thread waits for the lock, then finds nothing.
 * The thread makes no CUDA call: it only queues work for the decoding
 * thread (decode.h), so nothing the training does on the GPU can block it.
 */
#include "client_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct client_ahead {
	struct ldr_client *c;
	pthread_mutex_t mu;
	pthread_t thread;
	int stop[2]; /* a pipe: closing stop[1] wakes the thread to exit */
};

static void *ahead_main(void *arg)
{
	struct client_ahead *a = arg;
	struct ldr_client *c = a->c;
	for (;;) {
		struct pollfd p[2] = {{.fd = c->sock, .events = POLLIN}, {.fd = a->stop[0], .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break; /* ldr_next reads the frames itself, as without the thread */
		}
		if (p[1].revents)
			break;
		pthread_mutex_lock(&a->mu);
		bool done = client_read_ahead(c);
		pthread_mutex_unlock(&a->mu);
		if (done)
			break;
	}
	return NULL;
}

int client_ahead_start(struct ldr_client *c)
{
	struct client_ahead *a = calloc(1, sizeof *a);
	if (!a)
		return client_error(c, -ENOMEM, "the read-ahead thread ($LOADERD_CLIENT_READ_AHEAD): "
				    "out of memory");
	a->c = c;
	if (pipe2(a->stop, O_CLOEXEC) < 0) {
		int r = -errno;
		free(a);
		return client_error(c, r, "the read-ahead thread ($LOADERD_CLIENT_READ_AHEAD): pipe: %s",
				    strerror(-r));
	}
	pthread_mutex_init(&a->mu, NULL);
	/* The thread takes no signal: in a training process a signal (Ctrl-C)
	 * must reach the caller's thread, whose ldr_next it interrupts, not
	 * this one, whose poll would just go round again. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&a->thread, NULL, ahead_main, a);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e == 0)
		pthread_setname_np(a->thread, "loaderd-ahead");
	if (e != 0) {
		close(a->stop[0]);
		close(a->stop[1]);
		pthread_mutex_destroy(&a->mu);
		free(a);
		return client_error(c, -e, "the read-ahead thread ($LOADERD_CLIENT_READ_AHEAD): "
				    "pthread_create: %s", strerror(e));
	}
	c->ahead = a;
	return 0;
}

void client_ahead_stop(struct ldr_client *c)
{
	struct client_ahead *a = c->ahead;
	if (!a)
		return;
	close(a->stop[1]);
	pthread_join(a->thread, NULL);
	close(a->stop[0]);
	pthread_mutex_destroy(&a->mu);
	free(a);
	c->ahead = NULL;
}

void client_lock(struct ldr_client *c)
{
	if (c->ahead)
		pthread_mutex_lock(&c->ahead->mu);
}

void client_unlock(struct ldr_client *c)
{
	if (c->ahead)
		pthread_mutex_unlock(&c->ahead->mu);
}
