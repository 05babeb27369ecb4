/* SPDX-License-Identifier: Apache-2.0 */
/*
 * notify: the systemd notification protocol (sd_notify(3)): READY=1,
 * STOPPING=1, STATUS=..., WATCHDOG=1 as datagrams to $NOTIFY_SOCKET.
 *
 * Written here rather than linked from libsystemd: the protocol is a
 * documented, stable one-datagram affair, and loaderd then needs no
 * libsystemd at run time (the GPU hosts it runs on often have none).
 */
#ifndef LDR_DAEMON_NOTIFY_H
#define LDR_DAEMON_NOTIFY_H

#include <stdint.h>

/* Sends state ("READY=1\nSTATUS=..."). 0 when sent or when $NOTIFY_SOCKET
 * is unset (not under systemd); -errno when sending failed. */
int notify_send(const char *state);

/* The watchdog interval systemd expects pings within, in microseconds;
 * 0 when the watchdog is off for this process. */
uint64_t notify_watchdog_usec(void);

/* Start-up progress (daemon/core/progress.h) goes to the log and to
 * systemd (STATUS= with EXTEND_TIMEOUT_USEC=), at the interval
 * $LOADERD_PROGRESS_MS asks for (1 to 3600000 ms; else the default). */
void notify_progress_start(void);
/* ... and no more after this. */
void notify_progress_stop(void);

#endif
