/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group: clients that see the same batches from one read (sched_impl.h),
 * e.g. the tensor-parallel ranks of one data-parallel rank. The rules:
 *
 *  - Members attach with the same group key and group size, and agree on
 *    pipeline, split, rank, world, depth, delivery and resume token; a
 *    member that disagrees is refused, naming the group and the field. A
 *    group that has all its members refuses another.
 *  - The group is one consumer of the sampler: its leader (the first
 *    member to attach) takes the slots and the batches of the data-parallel
 *    rank; nothing starts before every member has attached (and, device
 *    delivery, has its ring), so every member sees the same sequence from
 *    the group's start position.
 *  - Host delivery: every member gets READY for the one staging slot, which
 *    is free again once every member released it. Device delivery: the GPU
 *    thread copies the staging slot into each member's ring (devpath.c).
 *  - A member that leaves or fails ends the group: tensor-parallel ranks
 *    cannot go on without one of theirs; they restart together from their
 *    last position token. A member that dies or fails: every other member
 *    gets ERROR at once, naming the group and the member. A member that
 *    says BYE (it has finished): no batch is started any more, and every
 *    other member gets ERROR once it has released all the batches started
 *    for the group, so members that stop at the same batch all finish
 *    cleanly, and one that would wait for more is told why. The key is
 *    free at once: the next member to attach with it starts a new group.
 *
 * Runs on the loop thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "common/log.h"
#include "daemon/core/status.h"
#include "daemon/sched/sched_impl.h"

/* The group a new member with this key joins. An ended group whose
 * members have not all detached yet is not found: the key starts a new
 * group at once (its members restarting from their position token). */
static struct sched_group *group_find(const struct sched *s, const char *key)
{
	for (struct sched_group *g = s->groups; g; g = g->next)
		if (!g->failed && !g->ending && strcmp(g->key, key) == 0)
			return g;
	return NULL;
}

static const char *delivery_name(uint32_t delivery)
{
	return delivery == PROTO_DELIVERY_DEVICE ? "device" : "host";
}

/* The first field in which new member c (HELLO h) differs from group g:
 * 0, or -EINVAL with err naming both values. */
static int group_agree(const struct sched *s, const struct sched_group *g,
		       const struct sched_client *c, const struct proto_hello *h, char *err,
		       size_t cap)
{
	char what[64], mine[300], theirs[300];
	const struct sched_client *first = NULL;
	for (uint32_t i = 0; i < g->size && !first; i++)
		first = g->members[i];
	if (h->group_size != g->size) {
		snprintf(what, sizeof(what), "group_size");
		snprintf(mine, sizeof(mine), "%u", h->group_size);
		snprintf(theirs, sizeof(theirs), "%u", g->size);
	} else if (c->pipeline != g->pipeline) {
		snprintf(what, sizeof(what), "pipeline");
		snprintf(mine, sizeof(mine), "%s", s->sources[c->pipeline].cfg->name);
		snprintf(theirs, sizeof(theirs), "%s", s->sources[g->pipeline].cfg->name);
	} else if (c->split != g->split) {
		snprintf(what, sizeof(what), "split");
		snprintf(mine, sizeof(mine), "%s", split_name(c->split));
		snprintf(theirs, sizeof(theirs), "%s", split_name(g->split));
	} else if (h->rank != g->rank || h->world != g->world) {
		snprintf(what, sizeof(what), "%s", h->rank != g->rank ? "rank" : "world");
		snprintf(mine, sizeof(mine), "%u of %u", h->rank, h->world);
		snprintf(theirs, sizeof(theirs), "%u of %u", g->rank, g->world);
	} else if (c->depth != g->depth) {
		snprintf(what, sizeof(what), "depth");
		snprintf(mine, sizeof(mine), "%u", c->depth);
		snprintf(theirs, sizeof(theirs), "%u", g->depth);
	} else if (h->delivery != g->delivery) {
		snprintf(what, sizeof(what), "delivery");
		snprintf(mine, sizeof(mine), "%s", delivery_name(h->delivery));
		snprintf(theirs, sizeof(theirs), "%s", delivery_name(g->delivery));
	} else if (strcmp(h->resume, g->resume) != 0) {
		char a[ESCAPE_SIZE(PROTO_TOKEN_MAX - 1)], b[ESCAPE_SIZE(PROTO_TOKEN_MAX - 1)];
		snprintf(what, sizeof(what), "resume token");
		snprintf(mine, sizeof(mine), "\"%.290s\"", escape_str(h->resume, a, sizeof(a)));
		snprintf(theirs, sizeof(theirs), "\"%.290s\"", escape_str(g->resume, b, sizeof(b)));
	} else {
		return 0;
	}
	return errtext(err, cap, -EINVAL, "group \"%s\": this member's %s is %s, the group's is %s "
		       "(as its first member, pid %d, attached): every member of a group must agree "
		       "on pipeline, split, rank, world, depth, delivery and resume token", g->shown,
		       what, mine, theirs, first ? (int)first->pid : 0);
}

int group_join(struct sched *s, struct sched_client *c, const struct proto_hello *h, char *err,
	       size_t cap)
{
	if (h->group_size <= 1)
		return 0;
	struct sched_group *g = group_find(s, h->group);
	if (g && g->joined >= g->size) {
		char pids[PROTO_GROUP_SIZE_MAX * 12] = "";
		size_t n = 0;
		for (uint32_t i = 0; i < g->size && n < sizeof(pids); i++)
			if (g->members[i])
				n += (size_t)snprintf(pids + n, sizeof(pids) - n, "%s%d", n ? ", " : "",
						      (int)g->members[i]->pid);
		return errtext(err, cap, -EBUSY, "group \"%s\" already has its %u members (pids %s)",
			       g->shown, g->size, pids);
	}
	if (g) {
		int rc = group_agree(s, g, c, h, err, cap);
		if (rc < 0)
			return rc;
	} else {
		g = calloc(1, sizeof(*g));
		if (!g)
			return errtext(err, cap, -ENOMEM, "out of memory");
		snprintf(g->key, sizeof(g->key), "%s", h->group);
		escape_str(h->group, g->shown, sizeof(g->shown));
		g->size = h->group_size;
		g->pipeline = c->pipeline;
		g->split = c->split;
		g->rank = h->rank;
		g->world = h->world;
		g->depth = c->depth;
		g->delivery = h->delivery;
		g->born_ns = sched_now_ns();
		snprintf(g->resume, sizeof(g->resume), "%s", h->resume);
		g->next = s->groups;
		s->groups = g;
	}
	c->group = g;
	c->member = g->joined++;
	g->members[c->member] = c;
	g->present++;
	return 0;
}

bool group_follower(const struct sched_client *c)
{
	return c->group && c->group->members[0] != c;
}

bool group_may_start(const struct sched_client *c)
{
	const struct sched_group *g = c->group;
	if (!g)
		return true;
	if (g->failed || g->ending || g->joined < g->size || g->members[0] != c)
		return false;
	for (uint32_t i = 0; i < g->size; i++) {
		const struct sched_client *m = g->members[i];
		if (!m || m->failed || m->attaching || m->in_flight >= m->depth)
			return false;
	}
	return true;
}

void group_started(struct sched_client *c)
{
	struct sched_group *g = c->group;
	for (uint32_t i = 0; g && i < g->size; i++)
		if (g->members[i] && g->members[i] != c)
			g->members[i]->in_flight++;
}

void group_deliver(struct sched *s, struct sched_client *c, struct slot *sl,
		   const struct proto_ready *r)
{
	struct sched_group *g = c->group;
	sl->group = g;
	sl->holders = 0;
	for (uint32_t i = 0; i < g->size; i++) {
		struct sched_client *m = g->members[i];
		if (!m || m->failed)
			continue;
		sl->holders |= 1ull << i;
		m->send_seq++;
		if (m != c) /* the leader's epoch is that of the batches it starts */
			m->epoch = sl->pos.epoch;
		s->ops.ready(m->conn, r);
	}
}

bool group_release(struct sched *s, struct sched_client *c, const struct proto_release *r)
{
	struct slot *sl = r->slot < s->n_slots ? &s->slots[r->slot] : NULL;
	uint64_t bit = 1ull << c->member;
	if (!sl || sl->state != SLOT_HELD || sl->group != c->group || !(sl->holders & bit) ||
	    sl->generation != r->generation || sl->pos.seq != r->seq)
		return false;
	sched_released(c, &sl->pos);
	sl->holders &= ~bit;
	c->in_flight--;
	c->released++;
	if (!sl->holders)
		sched_slot_free(s, sl);
	return true;
}

/* Fails every member of g but c with code and text. */
static void fail_members(struct sched *s, struct sched_group *g, const struct sched_client *c,
			 int code, const char *text)
{
	g->failed = true;
	for (uint32_t i = 0; i < g->size; i++) {
		struct sched_client *m = g->members[i];
		if (!m || m == c || m->failed || !m->conn)
			continue;
		m->failed = true;
		if (m->attaching)
			continue; /* devpath refuses it once its ring exists */
		s->ops.fail(m->conn, code, text);
	}
}

void group_fail_others(struct sched *s, struct sched_client *c, int code, const char *text)
{
	struct sched_group *g = c->group;
	if (!g || g->failed)
		return;
	char why[PROTO_ERROR_TEXT_MAX];
	snprintf(why, sizeof(why), "group \"%s\": member pid %d (client %" PRIu64 ") failed, and a "
		 "group cannot go on without every member: %s", g->shown, (int)c->pid, c->session,
		 text);
	log_notice("%s; its other members are failed too", why);
	fail_members(s, g, c, code, why);
}

void group_drain(struct sched *s, struct sched_client *c)
{
	struct sched_group *g = c->group;
	if (!g || !g->ending || g->failed || c->failed || c->attaching || c->in_flight > 0 || !c->conn)
		return;
	log_notice("client %" PRIu64 " (pid %d): %s", c->session, (int)c->pid, g->why);
	c->failed = true;
	s->ops.fail(c->conn, ENOLINK, g->why);
}

void group_leave(struct sched *s, struct sched_client *c, bool said_bye)
{
	struct sched_group *g = c->group;
	if (!g)
		return;
	if (g->members[0] == c) {
		/* The leader's batches not yet handed on are never delivered:
		 * the others stop counting them (their in_flight drains to 0). */
		uint64_t undelivered = c->next_seq - (c->device ? c->pin_seq : c->send_seq);
		for (uint32_t i = 1; i < g->size; i++) {
			struct sched_client *m = g->members[i];
			if (m)
				m->in_flight -= undelivered < m->in_flight ? (uint32_t)undelivered : m->in_flight;
		}
	}
	if (said_bye && !g->failed && !g->ending && g->present > 1) {
		snprintf(g->why, sizeof(g->why), "group \"%s\": member pid %d (client %" PRIu64 "%s%s) "
			 "left the group (BYE) after %" PRIu64 " batches, and a group cannot go on without "
			 "every member: no batch is started for it any more", g->shown, (int)c->pid,
			 c->session, c->name[0] ? ", " : "", c->name, c->released);
		log_notice("%s", g->why);
		g->ending = true;
	} else if (!said_bye && !g->failed && g->present > 1) {
		char why[PROTO_ERROR_TEXT_MAX];
		snprintf(why, sizeof(why), "group \"%s\": member pid %d (client %" PRIu64 "%s%s) left "
			 "the group (its connection closed without BYE: it died), and a group cannot go "
			 "on without every member; attach the group again, from its last position token",
			 g->shown, (int)c->pid, c->session,
			 c->name[0] ? ", " : "", c->name);
		log_notice("%s; failing its other members", why);
		fail_members(s, g, c, ENOLINK, why);
	}
	if (!g->ending)
		g->failed = true;
	uint64_t bit = 1ull << c->member;
	for (uint32_t i = 0; i < s->n_slots; i++) {
		struct slot *sl = &s->slots[i];
		if (sl->state != SLOT_HELD || sl->group != g)
			continue;
		sl->holders &= ~bit;
		if (!sl->holders) {
			sched_slot_free(s, sl);
		} else if (sl->client == c) {
			/* other members still map it: it stays theirs until they let go */
			c->staging--;
			sl->client = NULL;
		}
	}
	g->members[c->member] = NULL;
	g->present--;
	c->group = NULL;
	if (g->present > 0)
		return;
	for (struct sched_group **pp = &s->groups; *pp; pp = &(*pp)->next) {
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	}
	free(g);
}

uint64_t group_expire(struct sched *s, uint64_t now_ns, uint64_t timeout_ns)
{
	uint64_t next = UINT64_MAX;
	for (struct sched_group *g = s->groups; g; g = g->next) {
		if (g->failed || g->ending || g->joined >= g->size)
			continue;
		if (now_ns - g->born_ns < timeout_ns) {
			uint64_t left = g->born_ns + timeout_ns - now_ns;
			next = left < next ? left : next;
			continue;
		}
		char pids[PROTO_GROUP_SIZE_MAX * 12] = "", why[PROTO_ERROR_TEXT_MAX];
		size_t n = 0;
		for (uint32_t i = 0; i < g->size && n < sizeof(pids); i++)
			if (g->members[i])
				n += (size_t)snprintf(pids + n, sizeof(pids) - n, "%s%d", n ? ", " : "",
						      (int)g->members[i]->pid);
		snprintf(why, sizeof(why), "group \"%s\": %u of its %u members attached (pids %s) and "
			 "the other %u did not within group_timeout_ms (%" PRIu64 " ms) of the first: "
			 "a group starts only with every member; attach the missing ones (the same "
			 "group key and group size), or check that every rank of the job is running",
			 g->shown, g->joined, g->size, pids, g->size - g->joined, timeout_ns / 1000000);
		log_warning("%s; failing the members there", why);
		fail_members(s, g, NULL, ETIME, why);
	}
	return next;
}

void group_describe(const struct sched_client *c, struct status_text *t)
{
	const struct sched_group *g = c->group;
	if (!g)
		return;
	status_object(t, "group");
	status_field(t, "key", " group \"%s\"", g->shown); /* escaped (escape.h) */
	status_field(t, "size", " group_size %u", g->size);
	status_field(t, "joined", " joined %u", g->joined);
	bool ended = g->failed || g->ending, waiting = !ended && g->joined < g->size;
	status_json_bool(t, "ended", ended);
	status_json_bool(t, "waiting", waiting);
	status_printf(t, "%s", ended ? " ended" : waiting ? " waiting" : "");
	status_close(t);
}

int group_status_text(const struct sched_client *c, char *buf, size_t cap)
{
	const struct sched_group *g = c->group;
	if (!g)
		return snprintf(buf, cap, "%s", "");
	return snprintf(buf, cap, " group \"%s\" group_size %u joined %u%s", g->shown, g->size,
			g->joined, g->failed || g->ending ? " ended" : g->joined < g->size ? " waiting" : "");
}
