/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pinner_dechelp: the helpers of a lane's JPEG decoder (dechelp.h), on
 * their own threads: each takes a share of a part of a batch for one
 * buffer set, and queues it on the engines through an nvJPEG decoder of
 * its own per set, or hands it to its decoder process (gpu_decode_helpers
 * = processes): the process decodes into the set's buffer (opened by CUDA
 * IPC) and records an interprocess event behind its work, which the set's
 * stream waits for as for a helper thread's. A process that fails or does
 * not answer within worker_timeout_ms is killed; the images it held get
 * -EIO and so are decoded on the CPU like any the engines refused, the
 * share of the next parts goes to the helpers left, and the helper's
 * thread starts another process once its wait has passed (proc_schedule).
 * One that cannot be set up at the lane's start is not retried: that is
 * the program or the GPU, said once in the log.
 */
#include "daemon/gpu/dechelp.h"

#if LOADERD_HAVE_GPUDECODE_BATCH

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/paths.h"

/* Sets when h's next decoder process starts, its wait doubling from
 * DECODER_RESTART_MIN_MS to DECODER_RESTART_MAX_MS while they die young;
 * that wait. */
static uint32_t proc_schedule(struct decode_helper *h)
{
	uint64_t now = clock_mono_ns();
	if (h->backoff_ms == 0 || now - h->born_ns >= DECODER_RESTART_MAX_MS * 1000000ull)
		h->backoff_ms = DECODER_RESTART_MIN_MS;
	uint32_t wait_ms = h->backoff_ms;
	h->restart_ns = now + (uint64_t)wait_ms * 1000000;
	h->backoff_ms = wait_ms * 2 < DECODER_RESTART_MAX_MS ? wait_ms * 2 : DECODER_RESTART_MAX_MS;
	return wait_ms;
}

/* Ends h's decoder process, saying why (it failed to answer): then h is
 * dead, and its helper thread starts another at restart_ns. */
static void proc_end(struct decode_helper *h, const char *why)
{
	if (!h->proc)
		return;
	if (h->sock >= 0)
		close(h->sock);
	h->sock = -1;
	uint32_t wait_ms = why ? proc_schedule(h) : 0;
	if (h->pid > 0) {
		kill(h->pid, SIGKILL);
		waitpid(h->pid, NULL, 0);
		if (why)
			log_warning("GPU %s: JPEG decoder process %d ended (%s): its images are "
				    "decoded on the CPU, and another is started in %u ms", h->gpu->uuid,
				    (int)h->pid, why, wait_ms);
	}
	if (h->counted)
		atomic_fetch_sub(&h->gpu->decoders, 1);
	h->counted = false;
	h->pid = 0;
	h->dead = why != NULL;
}

/* Waits up to timeout_ms for a datagram on h's socket; its length, or -1. */
static ssize_t proc_recv(struct decode_helper *h, void *buf, size_t cap, int timeout_ms,
			 const char **why)
{
	struct pollfd pfd = {.fd = h->sock, .events = POLLIN};
	int r;
	do
		r = poll(&pfd, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r <= 0) {
		*why = r == 0 ? "no answer in time" : "poll failed";
		return -1;
	}
	ssize_t n = recv(h->sock, buf, cap, MSG_TRUNC);
	if (n <= 0 || (size_t)n > cap) {
		*why = n == 0 ? "it closed its socket" : n < 0 ? "recv failed" : "an oversized answer";
		return -1;
	}
	return n;
}

/* h's share through its decoder process: the job out, each image's
 * status back, checked. A process that fails is ended (proc_end) and its
 * images get -EIO, so that the lane decodes them on the CPU: -ECHILD, and
 * no event of it to wait for. Otherwise nvjd_decode's rc. */
static int proc_decode(struct decode_helper *h, uint32_t s)
{
	struct decoder_job job = {.magic = DECODER_MAGIC, .set = s, .n = h->n};
	struct decoder_image *out = (void *)(h->msg + sizeof(job));
	memcpy(h->msg, &job, sizeof(job));
	for (uint32_t i = 0; i < h->n; i++) {
		const struct nvjd_image *im = &h->imgs[i];
		out[i] = (struct decoder_image){
			.data_offset = (uint64_t)(im->data - h->arena_base), .len = im->len,
			.dst_offset = (uint64_t)(im->dst - h->set_buf[s]), .pitch = im->pitch,
			.dst_bytes = im->dst_bytes, .roi_x = im->roi_x, .roi_y = im->roi_y,
			.roi_w = im->roi_w, .roi_h = im->roi_h, .scan_checked = im->scan_checked,
			.given_w = im->given_w, .given_h = im->given_h};
	}
	size_t len = sizeof(job) + h->n * sizeof(*out);
	const char *why = NULL;
	struct decoder_done done = {0};
	if (send(h->sock, h->msg, len, MSG_NOSIGNAL) != (ssize_t)len) {
		why = "it does not take jobs";
	} else {
		ssize_t n = proc_recv(h, h->msg, h->msg_cap, (int)h->timeout_ms, &why);
		if (n >= 0 && decoder_done_check(h->msg, (size_t)n, h->imgs, h->n, &done))
			why = "a malformed answer";
	}
	if (why) {
		proc_end(h, why);
		for (uint32_t i = 0; i < h->n; i++) {
			h->imgs[i].status = -EIO;
			snprintf(h->imgs[i].err, sizeof(h->imgs[i].err),
				 "its GPU decoder process failed (%s)", why);
		}
		return -ECHILD;
	}
	const struct decoder_result *res = (const void *)(h->msg + sizeof(done));
	const struct decoder_err *err = (const void *)(res + done.n);
	for (uint32_t i = 0; i < h->n; i++) {
		struct nvjd_image *im = &h->imgs[i];
		im->status = res[i].status;
		im->width = res[i].width;
		im->height = res[i].height;
		im->out_w = res[i].out_w;
		im->out_h = res[i].out_h;
		im->err[0] = '\0';
		if (im->status != 0)
			snprintf(im->err, sizeof(im->err), "the GPU's decoder refused it");
	}
	for (uint32_t k = 0; k < done.n_err; k++) /* indexes checked */
		snprintf(h->imgs[err[k].index].err, sizeof(h->imgs[0].err), "%.*s",
			 (int)sizeof(err[k].text) - 1, err[k].text);
	return done.rc;
}

/* Starts h's decoder process (gpu_decode_helpers = processes) and sets it
 * up: the socketpair on its descriptor 3, the arena read-only on 4, the
 * sets' buffers as IPC handles out, its events back. From the lane's
 * thread at its decoder's start, from h's own thread to start another;
 * it reads only what stays put while the lane decodes (h->lane's arena
 * and device, h->dc's sets). false, with why. */
static bool proc_start(struct decode_helper *h, char *why, size_t cap)
{
	struct pinner *p = h->lane->p;
	struct lane_decode *dc = h->dc;
	char prog[PATH_MAX], dev[16], batch[16], fl[16];
	paths_program("loaderd-decoder", LOADERD_PROGRAMS_FROM_BIN, LOADERD_PROGRAMS_DIR, prog,
		      sizeof(prog));
	snprintf(dev, sizeof(dev), "%d", h->dev);
	snprintf(batch, sizeof(batch), "%u", dc->info.max_batch);
	snprintf(fl, sizeof(fl), "%u", h->flags);
	char *argv[] = {prog, "--device", dev, "--max-batch", batch, "--flags", fl,
			h->lib[0] ? "--lib" : NULL, h->lib, NULL};
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		snprintf(why, cap, "socketpair: %s", strerror(errno));
		return false;
	}
	/* Both above the descriptors they become, so neither dup2 clobbers
	 * the other's source. */
	int sock_fd = fcntl(sv[1], F_DUPFD_CLOEXEC, DECODER_FD_ARENA + 1);
	int arena_fd = fcntl(p->arena->client_fd, F_DUPFD_CLOEXEC, DECODER_FD_ARENA + 1);
	close(sv[1]);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sock_fd, DECODER_FD_SOCKET);
	posix_spawn_file_actions_adddup2(&fa, arena_fd, DECODER_FD_ARENA);
	extern char **environ;
	int rc = sock_fd < 0 || arena_fd < 0 ? EMFILE
					     : posix_spawn(&h->pid, prog, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (sock_fd >= 0)
		close(sock_fd);
	if (arena_fd >= 0)
		close(arena_fd);
	h->proc = true;
	h->sock = sv[0];
	if (rc != 0) {
		h->pid = 0;
		snprintf(why, cap, "%.400s: %s", prog, strerror(rc));
		return false;
	}
	h->arena_base = p->arena->base;
	h->msg_cap = sizeof(struct decoder_done) +
		     dc->info.max_batch * (sizeof(struct decoder_result) + sizeof(struct decoder_err));
	if (h->msg_cap < sizeof(struct decoder_job) + dc->info.max_batch * sizeof(struct decoder_image))
		h->msg_cap = sizeof(struct decoder_job) + dc->info.max_batch * sizeof(struct decoder_image);
	free(h->msg);
	h->msg = malloc(h->msg_cap);
	struct decoder_setup setup = {.magic = DECODER_MAGIC, .sets = dc->info.n_sets,
				      .buf_bytes = dc->info.buf_bytes};
	cudaError_t e = cudaSuccess;
	for (uint32_t k = 0; k < dc->info.n_sets && e == cudaSuccess; k++) {
		h->set_buf[k] = dc->info.set_buf[k];
		e = cudaIpcGetMemHandle(&setup.buf[k], dc->info.set_buf[k]);
	}
	const char *fail = NULL;
	struct decoder_ready ready = {0};
	if (!h->msg || e != cudaSuccess)
		fail = e != cudaSuccess ? cudaGetErrorString(e) : "out of memory";
	else if (send(h->sock, &setup, sizeof(setup), MSG_NOSIGNAL) != (ssize_t)sizeof(setup))
		fail = "it took no setup";
	else if (proc_recv(h, &ready, sizeof(ready), (int)h->timeout_ms, &fail) !=
			 (ssize_t)sizeof(ready) && !fail)
		fail = "a malformed answer";
	ready.why[sizeof(ready.why) - 1] = '\0';
	if (!fail && (ready.magic != DECODER_MAGIC || ready.rc != 0))
		fail = ready.magic != DECODER_MAGIC ? "a malformed answer" : ready.why;
	for (uint32_t k = 0; !fail && k < dc->info.n_sets; k++)
		if (cudaIpcOpenEventHandle(&h->queued[k], ready.event[k]) != cudaSuccess)
			fail = "cudaIpcOpenEventHandle failed";
	if (fail) {
		snprintf(why, cap, "decoder process %d: %.*s", (int)h->pid, (int)(cap / 2), fail);
		return false;
	}
	h->born_ns = clock_mono_ns();
	h->counted = true;
	atomic_fetch_add(&h->gpu->decoders, 1);
	return true;
}

/* The events h's last decoder process gave (they outlive it: the GPU
 * work that waits on them keeps them until it ran). */
static void proc_events_close(struct decode_helper *h)
{
	for (uint32_t s = 0; s < GD_SETS_MAX; s++) {
		if (h->queued[s])
			cudaEventDestroy(h->queued[s]);
		h->queued[s] = NULL;
	}
}

/* On h's thread, with h dead and its restart_ns passed: another decoder
 * process in place of the last. true once it answered its setup. */
static bool proc_restart(struct decode_helper *h)
{
	char why[TEXT_MAX];
	proc_events_close(h);
	if (proc_start(h, why, sizeof(why))) {
		log_notice("GPU %s: JPEG decoder process %d started in place of the one that ended",
			   h->gpu->uuid, (int)h->pid);
		return true;
	}
	proc_end(h, NULL);
	proc_events_close(h);
	h->born_ns = clock_mono_ns(); /* it died at its start: the wait grows */
	log_warning("GPU %s: no JPEG decoder process could be started in place of the one that "
		    "ended (%s): trying again in %u ms", h->gpu->uuid, why, proc_schedule(h));
	return false;
}

/* Whether h takes a share of the next part: not while its decoder
 * process is dead (on the lane's thread; h is idle). */
static bool helper_live(struct decode_helper *h)
{
	pthread_mutex_lock(&h->mu);
	bool live = !h->dead;
	pthread_mutex_unlock(&h->mu);
	return live;
}

static void *helper_main(void *arg)
{
	struct decode_helper *h = arg;
	cudaSetDevice(h->dev);
	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (!h->busy && !h->quit) {
			if (!h->dead) {
				pthread_cond_wait(&h->cv, &h->mu);
				continue;
			}
			/* Idle with a dead decoder process: another at restart_ns */
			struct timespec at = {.tv_sec = (time_t)(h->restart_ns / 1000000000),
					      .tv_nsec = (long)(h->restart_ns % 1000000000)};
			if (pthread_cond_timedwait(&h->cv, &h->mu, &at) != ETIMEDOUT || h->quit)
				continue;
			pthread_mutex_unlock(&h->mu);
			bool started = proc_restart(h);
			pthread_mutex_lock(&h->mu);
			h->dead = !started;
		}
		if (h->quit)
			break;
		pthread_mutex_unlock(&h->mu);
		uint32_t s = h->set;
		int rc;
		if (h->proc) {
			rc = proc_decode(h, s);
		} else {
			rc = nvjd_decode(h->nvjd[s], h->imgs, h->n, h->stream[s]);
			if (rc == 0 && cudaEventRecord(h->queued[s], h->stream[s]) != cudaSuccess)
				rc = -EIO;
		}
		pthread_mutex_lock(&h->mu);
		h->rc = rc;
		h->busy = false;
		pthread_cond_broadcast(&h->cv);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* h's decoders, streams and events, and its decoder process (the thread
 * is stopped or never ran). */
static void helper_close(struct decode_helper *h)
{
	proc_end(h, NULL);
	free(h->msg);
	proc_events_close(h);
	for (uint32_t s = 0; s < GD_SETS_MAX; s++) {
		nvjd_close(h->nvjd[s]);
		if (h->stream[s])
			cudaStreamDestroy(h->stream[s]);
	}
	*h = (struct decode_helper){0};
}
/* gd_share's give: imgs split over the live helpers and the lane's
 * thread: helper i takes the i-th of n_helpers + 1 equal parts, the
 * lane's thread the last (with decoder processes too: left to them alone,
 * the part went no faster beside training and slower alone,
 * bench/RESULTS.md). */
static uint32_t share_give(void *ctx, struct nvjd_image *imgs, uint32_t n, uint32_t set)
{
	struct lane_decode *dc = ctx;
	uint32_t live = 0;
	for (uint32_t i = 0; i < dc->n_helpers; i++) {
		dc->helpers[i].assigned = helper_live(&dc->helpers[i]);
		live += dc->helpers[i].assigned;
	}
	uint32_t parts = live + 1, per = (n + parts - 1) / parts, given = 0;
	for (uint32_t i = 0; i < dc->n_helpers; i++) {
		struct decode_helper *h = &dc->helpers[i];
		if (!h->assigned || given + per >= n) {
			h->assigned = false;
			continue;
		}
		pthread_mutex_lock(&h->mu);
		h->imgs = imgs + given;
		h->n = per;
		h->set = set;
		h->busy = true;
		pthread_cond_broadcast(&h->cv);
		pthread_mutex_unlock(&h->mu);
		given += h->n;
	}
	return given;
}

/* gd_share's join: waits for every helper given a share; the set's stream
 * waits for their work. */
static void share_join(void *ctx, cudaStream_t stream, int *rc, const char **err)
{
	struct lane_decode *dc = ctx;
	for (uint32_t i = 0; i < dc->n_helpers; i++) {
		struct decode_helper *h = &dc->helpers[i];
		if (!h->assigned)
			continue;
		h->assigned = false;
		pthread_mutex_lock(&h->mu);
		while (h->busy)
			pthread_cond_wait(&h->cv, &h->mu);
		pthread_mutex_unlock(&h->mu);
		if (h->rc == -ECHILD)
			continue; /* its process failed: its images go to the CPU */
		if (h->rc < 0 && *rc == 0) {
			*rc = h->rc;
			*err = h->imgs[0].err;
		}
		if (h->rc == 0 && cudaStreamWaitEvent(stream, h->queued[h->set], 0) != cudaSuccess &&
		    *rc == 0) {
			*rc = -EIO;
			*err = "cudaStreamWaitEvent on a decoding thread's stream";
		}
	}
}

/* gd_share's quiesce: nothing of the helpers' threads left queued. */
static void share_quiesce(void *ctx)
{
	struct lane_decode *dc = ctx;
	for (uint32_t i = 0; i < dc->n_helpers; i++)
		for (uint32_t s = 0; s < dc->info.n_sets; s++)
			cudaStreamSynchronize(dc->helpers[i].stream[s]);
}

void dechelp_stop(struct lane_decode *dc)
{
	for (uint32_t i = 0; i < dc->n_helpers; i++) {
		struct decode_helper *h = &dc->helpers[i];
		if (h->started) {
			pthread_mutex_lock(&h->mu);
			h->quit = true;
			pthread_cond_broadcast(&h->cv);
			pthread_mutex_unlock(&h->mu);
			pthread_join(h->thread, NULL);
			pthread_mutex_destroy(&h->mu);
			pthread_cond_destroy(&h->cv);
		}
		helper_close(h);
	}
	free(dc->helpers);
	dc->helpers = NULL;
	dc->n_helpers = 0;
}

/* dc->threads - 1 helpers, as many as can be made (at least none). A
 * decoder process that cannot be started here is reported and its helper
 * not made: that is the program or the GPU, not a passing fault; one that
 * dies later is started again (helper_main). */
void dechelp_start(struct lane *l, struct lane_decode *dc, unsigned flags)
{
	const struct config *cfg = l->p->cfg;
	uint32_t want = dc->threads - 1;
	bool procs = dc->procs;
	dc->share = (struct gd_share){.ctx = dc, .give = share_give, .join = share_join,
				      .quiesce = share_quiesce};
	dc->helpers = calloc(want, sizeof(*dc->helpers));
	for (uint32_t i = 0; dc->helpers && i < want; i++) {
		struct decode_helper *h = &dc->helpers[dc->n_helpers];
		char why[TEXT_MAX] = "a CUDA stream or event";
		h->dev = l->dev;
		h->sock = -1;
		h->lane = l;
		h->dc = dc;
		h->flags = flags;
		h->gpu = &l->p->gpus[l->dev];
		h->timeout_ms = cfg->worker_timeout_ms;
		snprintf(h->lib, sizeof(h->lib), "%s", cfg->nvjpeg_library);
		bool opened = true;
		if (procs)
			opened = proc_start(h, why, sizeof(why));
		for (uint32_t s = 0; s < dc->info.n_sets && opened && !procs; s++)
			opened = nvjd_open(l->dev, dc->info.max_batch, flags, &h->nvjd[s], why,
					   sizeof(why)) == 0 &&
				 cudaStreamCreateWithFlags(&h->stream[s], cudaStreamNonBlocking) ==
					 cudaSuccess &&
				 cudaEventCreateWithFlags(&h->queued[s], cudaEventDisableTiming) ==
					 cudaSuccess;
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* restart_ns's clock */
		if (!opened) {
			log_warning("GPU %s: a JPEG decoding %s could not be set up (%s): %u of %u",
				    h->gpu->uuid, procs ? "process" : "thread", why, dc->n_helpers + 1,
				    dc->threads);
		} else {
			pthread_mutex_init(&h->mu, NULL);
			pthread_cond_init(&h->cv, &ca);
		}
		pthread_condattr_destroy(&ca);
		if (opened && pthread_create(&h->thread, NULL, helper_main, h) != 0) {
			pthread_mutex_destroy(&h->mu);
			pthread_cond_destroy(&h->cv);
			opened = false;
		}
		if (!opened) {
			helper_close(h);
			break;
		}
		char name[32]; /* at most 15 bytes: loaderd-dec15.7 */
		snprintf(name, sizeof(name), "loaderd-dec%d.%u", l->dev, i + 1);
		pthread_setname_np(h->thread, name);
		h->started = true;
		dc->n_helpers++;
	}
}

#endif
