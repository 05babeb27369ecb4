/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpuanswer: the GPU thread's answers on the loop (daemon/gpu/gpuseam.h,
 * sched_gpu_answers): a device client's ring made or refused, a copy
 * landed (READY goes out), a staging slot read, a client's copy failed,
 * a ring freed. An entry point of the scheduler, as session.c is: it
 * calls the engine (fill.c) and the layers below it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "daemon/sched/sched_impl.h"

static void gpu_retired(struct sched *s, struct sched_client *c)
{
	for (struct sched_client **pp = &s->retiring; *pp; pp = &(*pp)->retiring_next) {
		if (*pp == c) {
			*pp = c->retiring_next;
			break;
		}
	}
	if (c->pc)
		log_info("client %" PRIu64 " (pid %d): GPU ring freed", c->session, (int)c->pid);
	free(c);
}

static void gpu_attached(struct sched *s, struct sched_client *c, struct pinner_client *pc, int rc,
			 const char *text, const struct proto_device *dev, bool direct, bool decode)
{
	c->attaching = false;
	c->pc = pc;
	c->direct = direct;
	c->gpu_decode = decode || c->client_decode;
	char group_why[PROTO_ERROR_TEXT_MAX];
	if (rc == 0 && direct && c->group) {
		snprintf(group_why, sizeof(group_why), "group \"%s\": the pipeline's file is "
			 "page-locked (direct): each batch is copied from it to one client's GPU, with "
			 "no staging slot a group could share; attach without a group", c->group->shown);
		rc = -EOPNOTSUPP;
		text = group_why;
	} else if (rc == 0 && c->failed) { /* its group ended while the ring was made */
		rc = -ENOLINK;
		text = "its group ended (another member left or failed) while this member's GPU "
		       "ring was made";
	}
	if (c->gone) { /* never saw WELCOME: it holds no handle */
		if (pc)
			s->gpu.retire(s->gpu.gpu, pc);
		else
			gpu_retired(s, c);
		return;
	}
	if (rc < 0) {
		char why[PROTO_ERROR_TEXT_MAX];
		snprintf(why, sizeof(why), "pipeline \"%s\": %.900s", s->sources[c->pipeline].cfg->name, text);
		log_notice("client %" PRIu64 " (pid %d) refused: %s", c->session, (int)c->pid, why);
		c->failed = true; /* the server closes; sched_detach frees it */
		s->ops.attached(c->conn, rc, NULL, why);
		group_fail_others(s, c, -rc, why);
		return;
	}
	if (!direct && s->unable[0]) {
		c->failed = true;
		s->ops.attached(c->conn, -EAGAIN, NULL, s->unable);
		group_fail_others(s, c, EAGAIN, s->unable);
		return;
	}
	c->welcome.device = *dev;
	s->ops.attached(c->conn, 0, &c->welcome, NULL);
	sched_fill(s);
}

static void gpu_landed(struct sched *s, struct sched_client *c, uint32_t d)
{
	if (!c->conn || c->failed || d >= c->depth || c->dev[d].state != DEV_COPYING)
		return;
	struct dev_slot *ds = &c->dev[d];
	ds->state = DEV_HELD;
	ds->pos.t_ready = sched_now_ns();
	sched_stage(c, STAGE_GPU, ds->pos.t_handed, ds->pos.t_ready);
	struct proto_ready r = sched_ready_of(&ds->pos, d, ds->generation,
					      (uint64_t)d * c->dev_slot_bytes);
	if (ds->decode) {
		r.flags |= PROTO_READY_DECODE;
		r.staging_slot = ds->staging;
		r.staging_generation = ds->staging_generation;
		r.staging_offset = arena_slot_offset(s->arena, ds->staging);
	}
	c->send_seq++;
	s->ops.ready(c->conn, &r);
}

static void gpu_staging_free(struct sched *s, uint32_t slot, uint32_t generation)
{
	struct slot *sl = slot < s->n_slots ? &s->slots[slot] : NULL;
	if (!sl || sl->state != SLOT_PINNING || sl->generation != generation) {
		log_warning("the GPU thread returned staging slot %u generation %u, which it does not "
			    "hold; ignored", slot, generation);
		return;
	}
	if (sl->pins > 1) { /* a group's batch: other members' copies still read it */
		sl->pins--;
		return;
	}
	if (!devpath_staging_read(sl)) /* the client decodes from it */
		return;
	sched_slot_free(s, sl);
	sched_fill(s);
}

static void gpu_failed(struct sched *s, struct sched_client *c, const char *text)
{
	if (!c->conn || c->failed)
		return;
	log_error("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, text);
	c->failed = true;
	s->ops.fail(c->conn, EIO, text);
	group_fail_others(s, c, EIO, text);
}

struct gpu_answers sched_gpu_answers(struct sched *s)
{
	return (struct gpu_answers){
		.sched = s, .attached = gpu_attached, .landed = gpu_landed,
		.staging_free = gpu_staging_free, .failed = gpu_failed, .retired = gpu_retired,
	};
}
