/*
 * pinner_decode: GPU decoding of image batches, on the GPU thread of the
 * batch's client (pinner.h). The workers left the images the GPU takes as
 * JPEG bytes in the staging slot, each with its transform plan (struct
 * arena_gpu_image, worker/image_rows.c); here, behind the copy of the
 * batch's tensors into the client's device slot and on the client's
 * stream:
 *
 *   the GPU's hardware JPEG engines decode the images (gpudecode/nvjd.h,
 *   whole images: a region of interest was no faster on the engines, and
 *   nvJPEG 13.0 decodes one differently from a whole image at the image's
 *   right and bottom edges) into a buffer set of the lane -> images the
 *   workers would have decoded at a reduced DCT scale (jd_pick_scale) are
 *   made as small by block means (imgk_shrink_launch; not under
 *   decode_scale = full), so that both paths resample nearly the same
 *   pixels -> one imgkernel launch per batch
 *   (gpudecode/imgkernel.h) crops, resizes, flips and converts them into their
 *   rows of the device slot, as the workers would have -> the client's
 *   stream waits for that work, then the batch's ready event, as for any
 *   batch.
 *
 * Submission: each image goes to nvJPEG with the size the worker's
 * header reader found (nvjd.h, given_w), so nvJPEG's host work per image
 * is its submission alone, about 40 us: one thread feeds the engines
 * alone on the GPU (beside training under MPS each submission takes
 * several times as long, and nvJPEG takes one process's one at a time).
 * A batch's images may be split over gpu_decode_threads host threads: the
 * lane's own and helpers, each with its own nvJPEG state and stream per
 * set; the set's stream waits (on the GPU) for the helpers' streams
 * before the resize. The time the lane spends queueing a part (with its
 * helpers) and waiting for a set is counted per pipeline and GPU
 * (submit_us and wait_us in status).
 *
 * Memory: per lane, gpu_decode_memory of device memory in sets (one per
 * 512 MiB, 2 to 4), each a third for the decoded images and the rest for
 * the kernel's scratch, allocated with the lane's decoder at the first
 * decoding client. A batch's images are decoded in parts, as many as fit
 * one set, and the parts take the sets in turn.
 *
 * Several sets, so that the host's submission of a part (about 40 us an
 * image, above) overlaps the engines' work on the one before: nvJPEG's
 * hardware path may write its output before work queued earlier on the
 * stream has run (nvjd.h), so before a part reuses a set's buffer the lane
 * waits on the host for the kernel of the part that used it last; with one
 * set, that wait came between every two parts. Every thread has a decoder
 * (nvJPEG state) per set, since a decoder takes a new batch only once its
 * last one is done.
 *
 * Streams: each set has its own. A part's decode, shrink and resize are
 * queued on its set's stream, which first waits (on the GPU) for the
 * batch's copy into the device slot, since the resize writes rows of it;
 * the client's stream then waits for every set the batch used before its
 * ready event. So the parts of one batch, and the batches of one client,
 * run on the GPU side by side, as many as there are sets: beside a
 * training process, whose kernels take turns with the daemon's on the
 * GPU, each turn advances all of them, where on the client's one stream
 * a batch's GPU work waited for the whole of the one before. Measured
 * beside training, that shortened a batch's GPU work but did not raise
 * the client's rate (bench/RESULTS.md, "a CUDA stream per buffer set"):
 * there, queueing a part of 128 images (nvJPEG's checks and submission)
 * takes the lane about 15 ms, with 1 to 16 threads alike, so it is not
 * the checks' CPU time, while it waits for a set only microseconds
 * ("submit_us beside training"). The cause, measured: nvJPEG's
 * submission waits on the GPU several times a batch, and without MPS
 * each such wait beside a busy training process lasts one of its time
 * slices (2.4 ms on an H100, against 7 us alone); under MPS the waits
 * are short, but one process's submissions still go one at a time
 * (more threads do not help, more processes do: "GPU decoding beside
 * training", bench/RESULTS.md). Status shows whether a GPU is under MPS
 * (`mps` on its line), and the log says so when a decoder opens without.
 *
 * Decoder processes (gpu_decode_helpers = processes, or auto on a GPU
 * under MPS, where gpu_decode_threads' default of 0 gives 2 threads: one
 * helper): each helper thread then hands its share to a loaderd-decoder
 * process of its own (daemon/gpu/decoder_proto.h) and waits for its answer,
 * instead of calling nvjd: the process decodes into the set's buffer
 * (opened by CUDA IPC) and records an interprocess event behind its work,
 * which the set's stream waits for as for a helper thread's. A process
 * that fails or does not answer within worker_timeout_ms is killed; the
 * images it held get -EIO and so are decoded on this thread's CPU like any
 * the engines refused, the share of the next parts goes to the helpers
 * left, and the helper's thread starts another process once its wait has
 * passed (proc_schedule). One that cannot be set up at the lane's start is
 * not retried: that is the program or the GPU, said once in the log.
 *
 * An image the engines refuse or fail (nvjd's per-image status) is decoded
 * here on the CPU from the same bytes, as a worker would have, and copied
 * into its row. The workers check every image they leave to the GPU
 * (header, structure of the scan) and decode on the CPU whatever fails,
 * with on_error, so one that the CPU decoder refuses here too is a file
 * whose damage neither check saw (a bad Huffman code, say). on_error
 * applies to it here: with `fail` the client's batch fails naming the
 * file; with `substitute` its row (every tensor's) becomes a copy of
 * another row of the same batch, chosen from (seed, epoch, sample) among
 * the rows that are not bad, so the batch stays full and deterministic.
 * Such an image is counted (images_bad in status) and logged once.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "daemon/gpu/pinner_impl.h"

#if LOADERD_HAVE_NVJPEG && LOADERD_HAVE_IMGKERNEL

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/paths.h"
#include "daemon/gpu/decoder_proto.h"
#include "gpudecode/imgkernel.h"
#include "image/jpeg.h"
#include "image/jpeghdr.h"
#include "image/image_sample.h"

#define DECODE_ALIGN 256u /* each decoded image's start in the buffer */

/* Buffer sets, taken by the parts in turn: one per DECODE_SET_BYTES of
 * gpu_decode_memory, at least 2 and at most DECODE_SETS_MAX. */
#define DECODE_SETS_MIN 2u
#define DECODE_SETS_MAX 4u
#define DECODE_SET_BYTES (512ull << 20)
_Static_assert(DECODE_SETS_MAX <= DECODER_SETS_MAX, "a decoder process takes every set");

/* decode_on_cpu's verdict on an image both decoders refused */
#define DECODE_BAD 1
/* on_error = substitute: rows of the batch tried as a bad row's replacement */
#define SUBSTITUTE_ATTEMPTS 8

/* A helper thread of a lane's decoder: its own nvJPEG state and stream
 * per set (a stream shared by the sets would queue each part's decode
 * behind the one before, whichever set it used); under mu, `busy` hands
 * it imgs[0..n) for set `set` and is cleared when they are queued (rc:
 * nvjd_decode's). */
struct decode_helper {
	pthread_t thread;
	bool started;
	int dev;
	struct nvjd *nvjd[DECODE_SETS_MAX];
	cudaStream_t stream[DECODE_SETS_MAX];
	cudaEvent_t queued[DECODE_SETS_MAX]; /* behind its decode, for the set's stream to wait on */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool busy, quit;
	struct nvjd_image *imgs;
	uint32_t n;
	uint32_t set;            /* whose decoder takes imgs */
	int rc;
	bool assigned;           /* given a share of the part being decoded */
	/* gpu_decode_helpers = processes: the helper hands its share to its
	 * decoder process (loaderd-decoder) instead of nvjd; queued[] are
	 * that process's events, opened here. */
	bool proc;               /* it has (or had) a decoder process */
	pid_t pid;               /* 0: none (or it ended) */
	int sock;                /* -1: none */
	bool dead;               /* its process failed: no shares until one is started again */
	bool counted;            /* pid is in the GPU's `decoders` */
	uint64_t born_ns;        /* when pid answered its setup */
	uint64_t restart_ns;     /* when to start another, while dead */
	uint32_t backoff_ms;     /* the wait before the next start after a failure */
	uint32_t timeout_ms;     /* for any answer: worker_timeout_ms */
	struct lane *lane;       /* what a start needs, for the helper thread's restarts */
	struct lane_decode *dc;
	unsigned flags;
	char lib[PATH_MAX];      /* nvjpeg_library, taken at the start */
	struct gpu *gpu;         /* its uuid for the log, and its count of decoders */
	const uint8_t *arena_base;
	uint8_t *set_buf[DECODE_SETS_MAX];
	uint8_t *msg;
	size_t msg_cap;
};

/* What one part in flight uses; free again once `done` has passed. */
struct decode_set {
	struct nvjd *nvjd;        /* the lane thread's decoder for this set */
	uint8_t *buf;             /* decoded images, device, buf_bytes */
	uint8_t *scratch;         /* the kernel's, device, scratch_bytes */
	struct imgk_item *items;  /* page-locked, max_batch */
	struct imgk_item *items_dev;
	struct imgk_shrink *shrink; /* page-locked, max_batch */
	struct imgk_shrink *shrink_dev;
	cudaStream_t stream;      /* the part's decode, shrink and resize */
	cudaEvent_t done;         /* behind all of the part's work on stream */
	bool pending;             /* done recorded and not yet waited for */
};

struct lane_decode {
	struct decode_set sets[DECODE_SETS_MAX];
	uint32_t n_sets;
	uint32_t cur;             /* the set the next part takes */
	uint32_t used;            /* the sets the batch being decoded used, a bit each */
	cudaEvent_t copied;       /* on the client's stream, behind the batch's copy */
	struct decode_helper *helpers;
	uint32_t n_helpers;
	uint32_t threads;         /* wanted: gpu_decode_threads, or its default for the GPU */
	bool procs;               /* the helpers are decoder processes */
	uint32_t max_batch;
	uint32_t max_rows;        /* the largest batch_size of a decoding pipeline */
	uint32_t *bad_rows;       /* the batch's rows both decoders refused (substitute) */
	uint32_t n_bad;
	uint64_t device_bytes;    /* allocated in all, counted in the GPU's decode_bytes */
	uint64_t buf_bytes;       /* of each set */
	uint64_t scratch_bytes;   /* of each set */
	struct nvjd_image *imgs;
	uint32_t *rows;           /* each of imgs' batch row */
	uint32_t *factor;         /* each of imgs' shrink factor, 1 for none */
	uint32_t *chroma;         /* each of imgs' chroma subsampling when factor > 1:
				   * across | down << 16, each 1 or 2 */
	uint8_t **small;          /* each of imgs' shrunk image in buf, when factor > 1 */
	uint8_t *row_host;        /* the CPU fallback's row, page-locked */
	uint64_t row_host_bytes;
	struct image_sampler *samplers[ARENA_PIPELINES_MAX]; /* the CPU fallback's */
};

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* Sets when h's next decoder process starts, its wait doubling from
 * DECODER_RESTART_MIN_MS to DECODER_RESTART_MAX_MS while they die young;
 * that wait. */
static uint32_t proc_schedule(struct decode_helper *h)
{
	uint64_t now = pinner_now_ns();
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
	paths_program("loaderd-decoder", LOADERD_LIBEXECDIR, prog, sizeof(prog));
	snprintf(dev, sizeof(dev), "%d", h->dev);
	snprintf(batch, sizeof(batch), "%u", dc->max_batch);
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
		     dc->max_batch * (sizeof(struct decoder_result) + sizeof(struct decoder_err));
	if (h->msg_cap < sizeof(struct decoder_job) + dc->max_batch * sizeof(struct decoder_image))
		h->msg_cap = sizeof(struct decoder_job) + dc->max_batch * sizeof(struct decoder_image);
	free(h->msg);
	h->msg = malloc(h->msg_cap);
	struct decoder_setup setup = {.magic = DECODER_MAGIC, .sets = dc->n_sets,
				      .buf_bytes = dc->buf_bytes};
	cudaError_t e = cudaSuccess;
	for (uint32_t k = 0; k < dc->n_sets && e == cudaSuccess; k++) {
		h->set_buf[k] = dc->sets[k].buf;
		e = cudaIpcGetMemHandle(&setup.buf[k], dc->sets[k].buf);
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
	for (uint32_t k = 0; !fail && k < dc->n_sets; k++)
		if (cudaIpcOpenEventHandle(&h->queued[k], ready.event[k]) != cudaSuccess)
			fail = "cudaIpcOpenEventHandle failed";
	if (fail) {
		snprintf(why, cap, "decoder process %d: %.*s", (int)h->pid, (int)(cap / 2), fail);
		return false;
	}
	h->born_ns = pinner_now_ns();
	h->counted = true;
	atomic_fetch_add(&h->gpu->decoders, 1);
	return true;
}

/* The events h's last decoder process gave (they outlive it: the GPU
 * work that waits on them keeps them until it ran). */
static void proc_events_close(struct decode_helper *h)
{
	for (uint32_t s = 0; s < DECODE_SETS_MAX; s++) {
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
	h->born_ns = pinner_now_ns(); /* it died at its start: the wait grows */
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
	for (uint32_t s = 0; s < DECODE_SETS_MAX; s++) {
		nvjd_close(h->nvjd[s]);
		if (h->stream[s])
			cudaStreamDestroy(h->stream[s]);
	}
	*h = (struct decode_helper){0};
}

static void helpers_stop(struct lane_decode *dc)
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
static void helpers_start(struct lane *l, struct lane_decode *dc, unsigned flags)
{
	const struct config *cfg = l->p->cfg;
	uint32_t want = dc->threads - 1;
	bool procs = dc->procs;
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
		for (uint32_t s = 0; s < dc->n_sets && opened && !procs; s++)
			opened = nvjd_open(l->dev, dc->max_batch, flags, &h->nvjd[s], why,
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

static void decode_free(struct lane_decode *dc)
{
	helpers_stop(dc);
	for (uint32_t s = 0; s < DECODE_SETS_MAX; s++) {
		struct decode_set *set = &dc->sets[s];
		if (set->pending)
			cudaEventSynchronize(set->done);
		nvjd_close(set->nvjd);
		cudaFree(set->buf);
		cudaFree(set->scratch);
		cudaFree(set->items_dev);
		cudaFreeHost(set->items);
		cudaFree(set->shrink_dev);
		cudaFreeHost(set->shrink);
		if (set->done)
			cudaEventDestroy(set->done);
		if (set->stream)
			cudaStreamDestroy(set->stream);
	}
	if (dc->copied)
		cudaEventDestroy(dc->copied);
	free(dc->factor);
	free(dc->chroma);
	free(dc->small);
	free(dc->bad_rows);
	cudaFreeHost(dc->row_host);
	free(dc->imgs);
	free(dc->rows);
	for (size_t i = 0; i < ARENA_PIPELINES_MAX; i++)
		if (dc->samplers[i]) {
			image_sampler_free(dc->samplers[i]);
			free(dc->samplers[i]);
		}
	free(dc);
}

/* The lane's decoder and buffers; 0, or -errno with why. */
static int decode_open(struct lane *l, char *why, size_t cap)
{
	struct pinner *p = l->p;
	if (l->decode)
		return 0;
	if (!p->nvjd_loaded) {
		snprintf(why, cap, "%s", p->nvjd_why);
		return -ENOTSUP;
	}
	struct lane_decode *dc = calloc(1, sizeof(*dc));
	if (!dc) {
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	uint32_t max_batch = 1;
	for (size_t i = 0; i < p->n_sources; i++)
		if (p->sources[i].cfg->decode != DECODE_CPU && p->sources[i].cfg->batch_size > max_batch)
			max_batch = p->sources[i].cfg->batch_size;
	dc->max_rows = max_batch;
	dc->max_batch = max_batch < NVJD_MAX_BATCH ? max_batch : NVJD_MAX_BATCH;
	struct decode_set *set0 = &dc->sets[0];
	int rc = nvjd_open(l->dev, dc->max_batch, NVJD_SMOOTH_UPSAMPLING, &set0->nvjd, why, cap);
	if (rc == -ENOTSUP && strstr(why, "upsampling"))
		rc = nvjd_open(l->dev, dc->max_batch, 0, &set0->nvjd, why, cap);
	struct nvjd_info info;
	if (rc == 0)
		nvjd_info(set0->nvjd, &info);
	uint64_t budget = p->cfg->gpu_decode_memory;
	dc->n_sets = (uint32_t)(budget / DECODE_SET_BYTES);
	if (dc->n_sets < DECODE_SETS_MIN)
		dc->n_sets = DECODE_SETS_MIN;
	if (dc->n_sets > DECODE_SETS_MAX)
		dc->n_sets = DECODE_SETS_MAX;
	for (uint32_t s = 1; s < dc->n_sets && rc == 0; s++)
		rc = nvjd_open(l->dev, dc->max_batch, info.flags, &dc->sets[s].nvjd, why, cap);
	if (rc < 0) {
		decode_free(dc);
		return rc;
	}
	size_t free_bytes = 0, total_bytes = 0;
	cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
	if (e == cudaSuccess && budget + DEVICE_RESERVE_BYTES > free_bytes) {
		snprintf(why, cap, "gpu_decode_memory (%" PRIu64 " bytes, plus %llu MiB kept free) is "
			 "more than the %zu bytes free on the GPU", budget, DEVICE_RESERVE_BYTES >> 20,
			 free_bytes);
		decode_free(dc);
		return -ENOMEM;
	}
	uint64_t per_set = budget / dc->n_sets;
	dc->buf_bytes = align_up(per_set / 3, DECODE_ALIGN);
	dc->scratch_bytes = align_up(per_set - dc->buf_bytes, DECODE_ALIGN) - DECODE_ALIGN;
	for (uint32_t s = 0; s < dc->n_sets && e == cudaSuccess; s++) {
		struct decode_set *set = &dc->sets[s];
		e = cudaMalloc((void **)&set->buf, dc->buf_bytes);
		if (e == cudaSuccess)
			e = cudaMemset(set->buf, 0, dc->buf_bytes); /* and after every part */
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&set->scratch, dc->scratch_bytes);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&set->items_dev, sizeof(*set->items_dev) * dc->max_batch);
		if (e == cudaSuccess)
			e = cudaHostAlloc((void **)&set->items, sizeof(*set->items) * dc->max_batch, 0);
		if (e == cudaSuccess)
			e = cudaMalloc((void **)&set->shrink_dev,
				       sizeof(*set->shrink_dev) * dc->max_batch);
		if (e == cudaSuccess)
			e = cudaHostAlloc((void **)&set->shrink, sizeof(*set->shrink) * dc->max_batch, 0);
		if (e == cudaSuccess)
			e = cudaEventCreateWithFlags(&set->done, cudaEventDisableTiming);
		if (e == cudaSuccess)
			e = cudaStreamCreateWithFlags(&set->stream, cudaStreamNonBlocking);
	}
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&dc->copied, cudaEventDisableTiming);
	dc->imgs = calloc(dc->max_batch, sizeof(*dc->imgs));
	dc->rows = calloc(dc->max_batch, sizeof(*dc->rows));
	dc->factor = calloc(dc->max_batch, sizeof(*dc->factor));
	dc->chroma = calloc(dc->max_batch, sizeof(*dc->chroma));
	dc->small = calloc(dc->max_batch, sizeof(*dc->small));
	dc->bad_rows = calloc(dc->max_rows, sizeof(*dc->bad_rows));
	if (cudaerr_failed(e, why, cap, "allocating the GPU decoder's buffers") || !dc->imgs ||
	    !dc->rows || !dc->factor || !dc->chroma || !dc->small || !dc->bad_rows) {
		if (e == cudaSuccess)
			snprintf(why, cap, "out of memory");
		decode_free(dc);
		return e != cudaSuccess ? cudaerr_errno(e) : -ENOMEM;
	}
	/* The defaults follow MPS: beside a training process under MPS one
	 * process's submissions go one at a time, and a second process doubles
	 * them (bench/RESULTS.md); alone, one thread feeds the engines. */
	const bool mps = p->gpus[l->dev].mps;
	const struct config *cfg = p->cfg;
	dc->threads = cfg->gpu_decode_threads > 0 ? cfg->gpu_decode_threads : mps ? 2 : 1;
	dc->procs = cfg->gpu_decode_helpers == GPU_DECODE_HELPERS_PROCESSES ||
		    (cfg->gpu_decode_helpers == GPU_DECODE_HELPERS_AUTO && mps);
	helpers_start(l, dc, info.flags);
	dc->device_bytes = dc->n_sets * (dc->buf_bytes + dc->scratch_bytes);
	atomic_fetch_add(&p->gpus[l->dev].decode_bytes, dc->device_bytes);
	log_notice("GPU %s: JPEG decoding on %u hardware engines (nvJPEG %d.%d.%d%s), %" PRIu64
		   " bytes of device memory in %u sets, parts of up to %u images, thread %s and %u "
		   "helper%s%s", p->gpus[l->dev].uuid, info.engines, info.version[0], info.version[1],
		   info.version[2], info.flags & NVJD_SMOOTH_UPSAMPLING ? ", smooth upsampling" : "",
		   budget, dc->n_sets, dc->max_batch, l->name, dc->n_helpers,
		   dc->n_helpers == 1 ? "" : "s",
		   dc->n_helpers == 0 ? "" : dc->procs ? " (decoder processes)" : " (threads)");
	if (!p->gpus[l->dev].mps)
		log_notice("GPU %s: not under MPS: beside a training process on this GPU, the "
			   "daemon's GPU work and the training's take turns in time slices, which "
			   "slows JPEG decoding; run loaderd and the training processes under one MPS "
			   "control daemon (docs/config.md, \"GPU decoding beside training: MPS\")",
			   p->gpus[l->dev].uuid);
	atomic_store(&p->gpus[l->dev].decode_engines, info.engines);
	l->decode = dc;
	return 0;
}

bool pinner_decode_attach(struct lane *l, struct pinner_client *pc, struct msg *m)
{
	struct pinner *p = l->p;
	const struct pipeline_cfg *cfg = p->sources[pc->pipeline].cfg;
	if (!pinner_decodes(cfg))
		return true;
	char why[TEXT_MAX];
	int rc = decode_open(l, why, sizeof(why));
	if (rc == 0) {
		pc->decode = true;
		return true;
	}
	struct gpu *g = &p->gpus[l->dev];
	if (cfg->decode == DECODE_GPU) {
		m->rc = -ENOTSUP;
		snprintf(m->text, sizeof(m->text), "decode = gpu, but GPU %s cannot decode JPEGs: "
			 "%.400s", g->uuid, why);
		return false;
	}
	/* auto: the workers decode; said once per GPU thread */
	if (!l->decode_refused) {
		l->decode_refused = true;
		log_notice("GPU %s: JPEGs of its clients (pipeline \"%s\", decode = auto) are decoded "
			   "by the workers: %s", g->uuid, cfg->name, why);
		pthread_mutex_lock(&p->lanes_mu);
		snprintf(g->decode_why, sizeof(g->decode_why), "%s", why);
		pthread_mutex_unlock(&p->lanes_mu);
	}
	return true;
}

/* Logs a bad image at most once per sample of its pipeline. */
static void bad_log_once(struct pinner *p, uint32_t pipeline, uint64_t sample, const char *text)
{
	const struct source *src = &p->sources[pipeline];
	bool first = sample >= src->n_samples; /* no such sample: logged, not remembered */
	pthread_mutex_lock(&p->lanes_mu);
	uint8_t **seen = &p->decode_bad_seen[pipeline];
	if (!first && !*seen)
		*seen = calloc(src->n_samples / 8 + 1, 1);
	if (!first && *seen && !((*seen)[sample / 8] & (1u << (sample % 8)))) {
		(*seen)[sample / 8] |= (uint8_t)(1u << (sample % 8));
		first = true;
	}
	pthread_mutex_unlock(&p->lanes_mu);
	if (first)
		log_warning("%s", text);
}

/* Row r of m's batch decoded here on the CPU, as a worker would, into its
 * row of the device slot: 0; DECODE_BAD when the CPU decoder refuses it
 * too and on_error = substitute (the row is then dc's to replace); -1 on
 * any other failure and on a bad image under on_error = fail, with text
 * naming the file. */
static int decode_on_cpu(struct lane *l, struct msg *m, const struct arena_gpu_image *im,
			 uint32_t r, const uint8_t *jpeg, uint8_t *dst, const char *gpu_err,
			 char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	const struct source *src = &p->sources[pc->pipeline];
	const struct arena_pipeline *ap = arena_pipeline(p->arena, pc->pipeline);
	char where[1200];
	source_sample_where(src, p->arena, pc->pipeline, SPLIT_TRAIN, im->sample, where,
			    sizeof(where));
	struct image_sampler **s = &dc->samplers[pc->pipeline];
	uint64_t row_bytes = 0;
	if (!*s) {
		*s = calloc(1, sizeof(**s));
		if (!*s || image_sampler_init(*s, &ap->image, &row_bytes) < 0) {
			free(*s);
			*s = NULL;
			snprintf(text, cap, "%.600s: the GPU did not decode it (%.160s), and the CPU "
				 "decoder could not be set up", where, gpu_err);
			return -1;
		}
	}
	row_bytes = src->row_bytes[0];
	if (dc->row_host_bytes < row_bytes) {
		cudaFreeHost(dc->row_host);
		dc->row_host_bytes = 0;
		if (cudaHostAlloc((void **)&dc->row_host, row_bytes, 0) != cudaSuccess) {
			dc->row_host = NULL;
			snprintf(text, cap, "%.600s: out of page-locked memory for its CPU decode", where);
			return -1;
		}
		dc->row_host_bytes = row_bytes;
	}
	int rc = image_sample(*s, jpeg, im->len, im->epoch, im->sample, dc->row_host);
	if (rc < 0) {
		bool fail = src->cfg->on_error == ON_ERROR_FAIL;
		snprintf(text, cap, "pipeline \"%s\": %.600s: bad image: the GPU's decoder refused it "
			 "(%.160s), and so did the CPU's (%s)%s", src->cfg->name, where, gpu_err,
			 source_image_why(rc), fail ? " (on_error = fail)" :
			 "; replaced by another image of its batch (on_error = substitute)");
		atomic_fetch_add(&p->decode_counts[pc->pipeline][l->dev].bad, 1);
		bad_log_once(p, pc->pipeline, im->sample, text);
		if (fail)
			return -1;
		dc->bad_rows[dc->n_bad++] = r;
		return DECODE_BAD;
	}
	cudaError_t e = cudaMemcpyAsync(dst + src->tensors[0].offset + (uint64_t)r * row_bytes,
					dc->row_host, row_bytes, cudaMemcpyHostToDevice, pc->stream);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(pc->stream); /* row_host is reused */
	if (cudaerr_failed(e, text, cap, "copying a CPU-decoded image"))
		return -1;
	atomic_fetch_add(&p->decode_counts[pc->pipeline][l->dev].fallback, 1);
	log_info("%s: decoded on the CPU for GPU %s: %s", where, p->gpus[l->dev].uuid, gpu_err);
	return true;
}

/* Decodes the n images queued in dc (imgs, rows) into the current set and
 * resizes them into dst; the failed ones on the CPU. The next part takes
 * the next set. */
static bool decode_part(struct lane *l, struct msg *m, uint32_t n, uint64_t buf_used,
			const struct arena_gpu_image *desc, const uint8_t *slot, uint8_t *dst,
			char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	struct decode_set *set = &dc->sets[dc->cur];
	struct decode_count *count = &p->decode_counts[pc->pipeline][l->dev];
	uint64_t t0 = pinner_now_ns();
	dc->cur = (dc->cur + 1) % dc->n_sets;
	const struct source *src = &p->sources[pc->pipeline];
	const struct arena_image_params *ip = &arena_pipeline(p->arena, pc->pipeline)->image;
	/* imgs split over the helpers and this thread: helper i takes the
	 * i-th of n_helpers + 1 equal parts, this thread the last (with
	 * decoder processes too: left to them alone, the part went no faster
	 * beside training and slower alone, bench/RESULTS.md). */
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
		h->imgs = dc->imgs + given;
		h->n = per;
		h->set = (uint32_t)(set - dc->sets);
		h->busy = true;
		pthread_cond_broadcast(&h->cv);
		pthread_mutex_unlock(&h->mu);
		given += h->n;
	}
	dc->used |= 1u << (set - dc->sets);
	int rc = nvjd_decode(set->nvjd, dc->imgs + given, n - given, set->stream);
	const char *err = dc->imgs[given].err;
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
		if (h->rc < 0 && rc == 0) {
			rc = h->rc;
			err = h->imgs[0].err;
		}
		if (h->rc == 0 && cudaStreamWaitEvent(set->stream, h->queued[h->set], 0) != cudaSuccess &&
		    rc == 0) {
			rc = -EIO;
			err = "cudaStreamWaitEvent on a decoding thread's stream";
		}
	}
	atomic_fetch_add(&count->parts, 1);
	atomic_fetch_add(&count->submit_ns, pinner_now_ns() - t0);
	if (rc < 0) {
		snprintf(text, cap, "JPEG decoding on the GPU failed: %s", err);
		return false;
	}
	uint32_t k = 0, n_shrink = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct nvjd_image *im = &dc->imgs[i];
		const struct arena_gpu_image *g = &desc[dc->rows[i]];
		if (im->status != 0)
			continue;
		uint32_t f = dc->factor[i];
		uint32_t w = (im->out_w + f - 1) / f, h = (im->out_h + f - 1) / f;
		if (f > 1)
			set->shrink[n_shrink++] = (struct imgk_shrink){
				.src = im->dst, .src_pitch = im->pitch, .src_w = im->out_w,
				.src_h = im->out_h, .dst = dc->small[i], .dst_pitch = (uint64_t)w * 3, .f = f,
				.sh = (uint16_t)(dc->chroma[i] & 0xffff), .sv = (uint16_t)(dc->chroma[i] >> 16)};
		set->items[k++] = (struct imgk_item){
			.src = f > 1 ? dc->small[i] : im->dst, .src_pitch = f > 1 ? (uint64_t)w * 3 : im->pitch,
			.src_w = w, .src_h = h, .img_w = w, .img_h = h, .sx = 1.0 / f, .sy = 1.0 / f,
			.x = g->x, .y = g->y, .w = g->w, .h = g->h, .flip = g->flip != 0,
			.dst_offset = src->tensors[0].offset + (uint64_t)dc->rows[i] * src->row_bytes[0]};
	}
	struct imgk_format fmt = {.out_w = ip->out_w, .out_h = ip->out_h, .layout = ip->layout,
				  .dtype = ip->dtype};
	memcpy(fmt.mean, ip->mean, sizeof(fmt.mean));
	memcpy(fmt.std, ip->std, sizeof(fmt.std));
	uint64_t scratch = 0;
	/* The resize writes rows of the device slot: after the batch's copy */
	cudaError_t e = cudaStreamWaitEvent(set->stream, dc->copied, 0);
	if (k > 0 && e == cudaSuccess) {
		if (imgk_plan(set->items, k, &fmt, pc->slot_bytes, &scratch) < 0 ||
		    scratch > dc->scratch_bytes) {
			snprintf(text, cap, "the GPU resize refused a batch's images");
			return false;
		}
		e = cudaMemcpyAsync(set->items_dev, set->items, sizeof(*set->items) * k,
				    cudaMemcpyHostToDevice, set->stream);
		if (e == cudaSuccess && n_shrink > 0)
			e = cudaMemcpyAsync(set->shrink_dev, set->shrink,
					    sizeof(*set->shrink) * n_shrink, cudaMemcpyHostToDevice,
					    set->stream);
		if (e == cudaSuccess && n_shrink > 0 &&
		    imgk_shrink_launch(set->shrink_dev, n_shrink, set->stream, &e) < 0 && e == cudaSuccess)
			e = cudaErrorInvalidValue;
		if (e == cudaSuccess &&
		    imgk_launch(set->items_dev, k, &fmt, set->scratch, dc->scratch_bytes, dst,
				pc->slot_bytes, set->stream, &e) < 0 && e == cudaSuccess)
			e = cudaErrorInvalidValue;
	}
	/* The buffer zeroed again behind the resize, for the next part: an
	 * image the engines decode "successfully" from damaged data that runs
	 * out leaves the rest of its pixels unwritten, and those must not be
	 * what an earlier part left there. (Not before the next decode: the
	 * hardware path may write before work queued ahead of it has run.) */
	if (e == cudaSuccess)
		e = cudaMemsetAsync(set->buf, 0, buf_used, set->stream);
	/* Recorded even when the engines decoded nothing: the client's stream
	 * waits for it, and with it for whatever the part queued. */
	if (e == cudaSuccess)
		e = cudaEventRecord(set->done, set->stream);
	if (cudaerr_failed(e, text, cap, "the GPU resize of decoded images"))
		return false;
	set->pending = true;
	atomic_fetch_add(&count->gpu, k);
	for (uint32_t i = 0; i < n; i++) {
		const struct nvjd_image *im = &dc->imgs[i];
		uint32_t r = dc->rows[i];
		if (im->status != 0 &&
		    decode_on_cpu(l, m, &desc[r], r, slot + ip->gpu_data_offset +
				  (uint64_t)r * ip->gpu_data_stride, dst, im->err, text, cap) < 0)
			return false;
	}
	return true;
}

/* Waits for the kernel of the part that used the current set last: its
 * buffers are free again. The time waited is counted to m's pipeline. */
static bool decode_wait(struct lane *l, struct msg *m, char *text, size_t cap)
{
	struct decode_set *set = &l->decode->sets[l->decode->cur];
	if (!set->pending)
		return true;
	set->pending = false;
	uint64_t t0 = pinner_now_ns();
	cudaError_t e = cudaEventSynchronize(set->done);
	atomic_fetch_add(&l->p->decode_counts[m->pc->pipeline][l->dev].wait_ns, pinner_now_ns() - t0);
	return !cudaerr_failed(e, text, cap, "waiting for the GPU resize");
}

/* The batch's images into its parts, each decoded and resized on its set's
 * stream; the images the GPU cannot take on the CPU. */
/*
 * The factor the workers' fast decode would shrink the image of *g by
 * (8 / jd_fast_scale, from the JPEG's header: 4:2:2 and 4:4:0 one DCT
 * scale up), and into *chroma the subsampling the shrink kernel models
 * (imgk_shrink's sh, sv) as across | down << 16. A header that does not
 * read here is the engines' to refuse; it is taken as 4:4:4.
 */
static uint32_t shrink_factor(const struct arena_gpu_image *g, const struct arena_image_params *ip,
			      const uint8_t *jpeg, uint32_t *chroma)
{
	int m0 = jd_pick_scale(g->w, g->h, ip->out_w, ip->out_h);
	*chroma = 1u | 1u << 16;
	if (m0 == 8)
		return 1;
	struct jh_info info;
	char why[8];
	if (jh_parse(jpeg, g->len, &info, why, sizeof(why)) != 0 || info.components != 3)
		return 8 / (uint32_t)m0;
	*chroma = (info.h[0] == 2 ? 2u : 1u) | (info.v[0] == 2 ? 2u : 1u) << 16;
	return 8 / (uint32_t)jd_fast_scale(m0, info.h[0], info.v[0]);
}

static bool decode_parts(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	const struct source *src = &p->sources[pc->pipeline];
	const struct arena_image_params *ip = &arena_pipeline(p->arena, pc->pipeline)->image;
	const uint8_t *slot = p->arena->base + arena_slot_offset(p->arena, m->slot);
	const struct arena_gpu_image *desc = (const void *)(slot + ip->gpu_desc_offset);
	struct imgk_format fmt = {.out_w = ip->out_w, .out_h = ip->out_h, .layout = ip->layout,
				  .dtype = ip->dtype, .mean = {0, 0, 0}, .std = {1, 1, 1}};
	uint32_t n = 0, cpu = 0;
	uint64_t buf_used = 0, scratch_used = 0;
	for (uint32_t r = 0; r < m->rows; r++) {
		struct arena_gpu_image g = desc[r];
		if (g.route != ARENA_ROUTE_GPU) {
			cpu += g.route == ARENA_ROUTE_CPU;
			continue;
		}
		const uint8_t *jpeg = slot + ip->gpu_data_offset + (uint64_t)r * ip->gpu_data_stride;
		/* The workers' DCT scale for this box: the image shrunk as much
		 * (none under decode_scale = full) */
		uint32_t chroma = 0;
		uint32_t f = ip->decode_scale == JD_SCALE_FULL ? 1 : shrink_factor(&g, ip, jpeg, &chroma);
		uint32_t sw = (g.width + f - 1) / f, sh = (g.height + f - 1) / f;
		uint64_t full = align_up((uint64_t)g.width * g.height * 3, DECODE_ALIGN);
		uint64_t bytes = full + (f > 1 ? align_up((uint64_t)sw * sh * 3, DECODE_ALIGN) : 0);
		uint8_t *buf = dc->sets[dc->cur].buf;
		struct imgk_item one = {.src = buf, .src_pitch = (uint64_t)sw * 3,
					.src_w = sw, .src_h = sh, .img_w = sw, .img_h = sh,
					.sx = 1.0 / f, .sy = 1.0 / f, .x = g.x, .y = g.y,
					.w = g.w, .h = g.h, .dst_offset = 0};
		uint64_t scratch = 0;
		if (g.len == 0 || g.len > ip->gpu_data_stride || g.width == 0 || g.height == 0 ||
		    imgk_plan(&one, 1, &fmt, src->row_bytes[0], &scratch) < 0) {
			snprintf(text, cap, "row %u of a batch of pipeline \"%s\" has a bad GPU decoding "
				 "descriptor", r, src->cfg->name);
			return false;
		}
		if (bytes > dc->buf_bytes || scratch > dc->scratch_bytes) { /* too big for the GPU */
			if (decode_on_cpu(l, m, &desc[r], r, jpeg, dst, "larger than gpu_decode_memory "
					  "allows", text, cap) < 0)
				return false;
			continue;
		}
		if (n == dc->max_batch || buf_used + bytes > dc->buf_bytes ||
		    scratch_used + scratch > dc->scratch_bytes) {
			if (!decode_part(l, m, n, buf_used, desc, slot, dst, text, cap))
				return false;
			n = 0;
			buf_used = scratch_used = 0;
		}
		if (n == 0 && !decode_wait(l, m, text, cap))
			return false;
		buf = dc->sets[dc->cur].buf; /* decode_part may have moved on */
		dc->rows[n] = r;
		dc->factor[n] = f;
		dc->chroma[n] = chroma;
		dc->small[n] = buf + buf_used + full;
		dc->imgs[n] = (struct nvjd_image){.data = jpeg, .len = g.len, .scan_checked = true,
						  .given_w = g.width, .given_h = g.height,
						  .dst = buf + buf_used, .pitch = (size_t)g.width * 3,
						  .dst_bytes = (size_t)g.width * g.height * 3};
		n++;
		buf_used += bytes;
		scratch_used += align_up(scratch, DECODE_ALIGN);
	}
	atomic_fetch_add(&p->decode_counts[pc->pipeline][l->dev].cpu, cpu);
	return n == 0 || decode_part(l, m, n, buf_used, desc, slot, dst, text, cap);
}

/* on_error = substitute: each bad row of the batch becomes a copy of a row
 * that is not bad, chosen from (seed, epoch, sample), on the client's
 * stream behind every part. */
static bool substitute_bad(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap)
{
	struct pinner *p = l->p;
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	const struct source *src = &p->sources[pc->pipeline];
	const struct arena_image_params *ip = &arena_pipeline(p->arena, pc->pipeline)->image;
	const uint8_t *slot = p->arena->base + arena_slot_offset(p->arena, m->slot);
	const struct arena_gpu_image *desc = (const void *)(slot + ip->gpu_desc_offset);
	for (uint32_t b = 0; b < dc->n_bad; b++) {
		uint32_t r = dc->bad_rows[b], from = r;
		for (uint32_t a = 0; a < SUBSTITUTE_ATTEMPTS * m->rows && from == r; a++) {
			uint32_t c = (uint32_t)(hash_mix64(hash_sample(ip->seed, 0x5b57ull, desc[r].epoch,
								       desc[r].sample) ^ a) % m->rows);
			bool bad = false;
			for (uint32_t k = 0; k < dc->n_bad && !bad; k++)
				bad = dc->bad_rows[k] == c;
			if (!bad)
				from = c;
		}
		if (from == r) {
			char where[1200];
			source_sample_where(src, p->arena, pc->pipeline, SPLIT_TRAIN, desc[r].sample,
					    where, sizeof(where));
			snprintf(text, cap, "pipeline \"%s\": %.600s: bad image: neither the GPU's decoder "
				 "nor the CPU's took it (on_error = substitute, and none of the rows of its "
				 "batch tried could replace it: %u of %u are bad)", src->cfg->name, where,
				 dc->n_bad, m->rows);
			return false;
		}
		for (uint32_t t = 0; t < src->n_tensors; t++) {
			uint64_t row = src->row_bytes[t], at = src->tensors[t].offset;
			cudaError_t e = cudaMemcpyAsync(dst + at + (uint64_t)r * row,
							dst + at + (uint64_t)from * row, row,
							cudaMemcpyDeviceToDevice, pc->stream);
			if (cudaerr_failed(e, text, cap, "copying a replacement row"))
				return false;
		}
	}
	return true;
}

bool pinner_decode_batch(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap)
{
	struct pinner_client *pc = m->pc;
	struct lane_decode *dc = l->decode;
	dc->used = 0;
	dc->n_bad = 0;
	cudaError_t e = cudaEventRecord(dc->copied, pc->stream);
	if (cudaerr_failed(e, text, cap, "cudaEventRecord behind the batch's copy"))
		return false;
	bool ok = decode_parts(l, m, dst, text, cap);
	/* The client's stream (its ready and copied events) after every part */
	for (uint32_t i = 0; i < dc->n_sets && ok; i++) {
		if (!(dc->used & (1u << i)))
			continue;
		e = cudaStreamWaitEvent(pc->stream, dc->sets[i].done, 0);
		ok = !cudaerr_failed(e, text, cap, "cudaStreamWaitEvent on a decoding set's stream");
	}
	if (ok && dc->n_bad > 0)
		ok = substitute_bad(l, m, dst, text, cap);
	if (!ok) { /* nothing may read the batch's source once the caller returns */
		for (uint32_t i = 0; i < dc->n_helpers; i++)
			for (uint32_t s = 0; s < dc->n_sets; s++)
				cudaStreamSynchronize(dc->helpers[i].stream[s]);
		for (uint32_t i = 0; i < dc->n_sets; i++) {
			struct decode_set *set = &dc->sets[i];
			if (!(dc->used & (1u << i)))
				continue;
			cudaStreamSynchronize(set->stream);
			cudaMemset(set->buf, 0, dc->buf_bytes); /* a failed part may not have */
			set->pending = false;
		}
	}
	return ok;
}

void pinner_decode_close(struct lane *l)
{
	if (l->decode) {
		atomic_fetch_sub(&l->p->gpus[l->dev].decode_bytes, l->decode->device_bytes);
		decode_free(l->decode); /* waits for the parts in flight */
		l->decode = NULL;
	}
}

#else /* no nvJPEG header or no CUDA compiler at build time */

bool pinner_decode_attach(struct lane *l, struct pinner_client *pc, struct msg *m)
{
	struct pinner *p = l->p;
	const struct pipeline_cfg *cfg = p->sources[pc->pipeline].cfg;
	if ((cfg->kind != SOURCE_IMAGEFOLDER && cfg->kind != SOURCE_TAR) ||
	    cfg->decode != DECODE_GPU)
		return true;
	m->rc = -ENOTSUP;
	snprintf(m->text, sizeof(m->text), "decode = gpu, but this loaderd was built without GPU JPEG "
		 "decoding (no nvjpeg.h or no CUDA compiler)");
	return false;
}

bool pinner_decode_batch(struct lane *l, struct msg *m, uint8_t *dst, char *text, size_t cap)
{
	snprintf(text, cap, "GPU JPEG decoding is not built in");
	return false;
}

void pinner_decode_close(struct lane *l)
{
}

#endif
