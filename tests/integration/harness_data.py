# SPDX-License-Identifier: Apache-2.0
"""harness_data: the part of the integration tests' harness (harness.py,
which re-exports all of it) that runs nothing: a failed check, the
expected content of samples, config files, and the readers of what
loaderd and loaderctl write (dumps, consume summaries, status).

The expected content of a sample is computed here, independently of the
daemon: a pure-Python CRC-32C over the sample's bytes read from the data file
(raw: the record; tokens: the seq_len+1 window, zero-extended to the
delivered width, little-endian).
"""

import re


class TestFailure(Exception):
    """A check failed; the message says which and with what."""


class TestSkip(Exception):
    """The test cannot run here."""


def check(cond, message):
    if not cond:
        raise TestFailure(message)


# ---------------------------------------------------------------- CRC-32C

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli, reflected, init/xorout 0xFFFFFFFF); chainable
    like common/crc32c.h: crc32c(b, crc32c(a)) == crc32c(a + b)."""
    table = _CRC_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the published check value


def raw_sample_crcs(path, record_bytes):
    """CRC of every record of a raw file, by sample index."""
    with open(path, "rb") as f:
        data = f.read()
    return [crc32c(data[i:i + record_bytes]) for i in range(0, len(data), record_bytes)]


def token_sample_crcs(path, in_bytes, out_bytes, seq_len):
    """CRC of every seq_len+1 window of a token file, each token widened
    (zero-extended) from in_bytes to out_bytes, little-endian."""
    with open(path, "rb") as f:
        data = f.read()
    n_tokens = len(data) // in_bytes
    pad = bytes(out_bytes - in_bytes)
    widened = b"".join(data[i:i + in_bytes] + pad for i in range(0, n_tokens * in_bytes, in_bytes))
    n_samples = (n_tokens - 1) // seq_len
    row = (seq_len + 1) * out_bytes
    step = seq_len * out_bytes
    return [crc32c(widened[i * step:i * step + row]) for i in range(n_samples)]


# ---------------------------------------------------------------- files

def write_config(path, daemon, pipelines):
    """Writes an INI config: daemon is a dict of [daemon] keys, pipelines a
    dict name -> dict of keys (values are written as str())."""
    lines = ["[daemon]"]
    lines += ["%s = %s" % (k, v) for k, v in daemon.items()]
    for name, keys in pipelines.items():
        lines += ["", "[pipeline.%s]" % name]
        lines += ["%s = %s" % (k, v) for k, v in keys.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def read_text(path):
    with open(path) as f:
        return f.read()


def parse_dump_lines(lines, path):
    """`consume --dump` lines (of the file at path) as a list of (epoch,
    batch, sample, crc)."""
    rows = []
    for n, line in enumerate(lines, 1):
        fields = line.split()
        check(len(fields) == 4 and all(x.isdigit() for x in fields),
              "%s:%d: not 'epoch batch sample crc': %r" % (path, n, line))
        rows.append(tuple(int(x) for x in fields))
    return rows


def read_dump(path):
    """`consume --dump` lines as a list of (epoch, batch, sample, crc)."""
    with open(path) as f:
        return parse_dump_lines(f, path)


def check_dump_crcs(rows, expected_crcs, what):
    """Every dumped sample's CRC must be the CRC of its bytes in the file."""
    for epoch, batch, sample, crc in rows:
        check(sample < len(expected_crcs),
              "%s: epoch %d batch %d: sample index %d out of range (n = %d)"
              % (what, epoch, batch, sample, len(expected_crcs)))
        check(crc == expected_crcs[sample],
              "%s: epoch %d batch %d sample %d: crc %d, the file's bytes give %d"
              % (what, epoch, batch, sample, crc, expected_crcs[sample]))


def epoch_rows(rows, epoch):
    """(batch, sample) of one epoch's dump lines, in delivery order."""
    return [(b, s) for e, b, s, _ in rows if e == epoch]


def shard_expected(perm, g, rank, world, batch_size, drop_last):
    """(batch, sample) that `rank` of `world` must receive, in order, from
    the segment of an epoch that starts at global offset g, given that
    epoch's permutation perm (position -> sample index): DistributedSampler
    semantics as common/sampler.h states them, written out independently."""
    n = len(perm)
    remaining = n - g
    if drop_last:
        k = remaining // world
        k -= k % batch_size  # an incomplete last batch is dropped
    else:
        k = -(-remaining // world)
    out = []
    for j in range(k):
        p = g + rank + j * world
        if p >= n:  # padding wraps to the segment's start
            p = g + (p - n) % remaining
        out.append((j // batch_size, perm[p]))
    return out


def first_difference(a, b):
    """Index of the first element where two sequences differ (or where the
    shorter one ends); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def check_permutation(order, n, what):
    check(sorted(order) == list(range(n)),
          "%s: the %d samples are not a permutation of 0..%d" % (what, len(order), n - 1))


_SUMMARY_RE = re.compile(
    r"^consume: pipeline=(\S+) rank=(\d+) world=(\d+) epochs=(\d+) batches=(\d+) "
    r"samples=(\d+) bytes=(\d+) seconds=(\d+\.\d{3}) batches_per_s=(\S+) "
    r"samples_per_s=(\S+) MB_per_s=(\S+) device=(host|GPU-[0-9a-f-]{36}) call_us=(\S+)$")


def positions_of(window, seq_len, eod):
    """The `positions` output of a window of seq_len + 1 tokens: 0, 1, ...
    over its inputs, restarting after each input equal to eod."""
    out, pos = [], 0
    for t in window[:seq_len]:
        out.append(pos)
        pos = 0 if t == eod else pos + 1
    return out


def parse_consume_output(stdout):
    """The two stdout lines of `loaderctl consume`: (summary dict, token)."""
    lines = stdout.splitlines()
    check(len(lines) == 2, "consume printed %d lines on stdout, expected 2:\n%s" % (len(lines), stdout))
    m = _SUMMARY_RE.match(lines[0])
    check(m is not None, "consume summary line does not match the contract: %r" % lines[0])
    keys = ["pipeline", "rank", "world", "epochs", "batches", "samples", "bytes", "seconds",
            "batches_per_s", "samples_per_s", "MB_per_s", "device", "call_us"]
    summary = dict(zip(keys, m.groups()))
    for k in ("rank", "world", "epochs", "batches", "samples", "bytes"):
        summary[k] = int(summary[k])
    for k in ("seconds", "batches_per_s", "samples_per_s", "MB_per_s", "call_us"):
        summary[k] = float(summary[k])
    check(lines[1].startswith("position: "), "second stdout line is not 'position: TOKEN': %r" % lines[1])
    token = lines[1][len("position: "):]
    check(TOKEN_RE.fullmatch(token) is not None, "malformed position token %r" % token)
    return summary, token


# A position token (common/position.h): ldr2:PIPELINE:DATA:SEED:N:EPOCH:OFFSET[:SPLIT].
TOKEN_RE = re.compile(r"ldr2:([A-Za-z0-9_.-]{1,63}):([0-9a-f]{16}):(\d+):(\d+):(\d+):(\d+)"
                      r"(?::(valid|test))?")


def token_stream(token):
    """The "ldr2:PIPELINE:DATA:" that names a token's stream; the rest,
    SEED:N:EPOCH:OFFSET[:SPLIT], follows it."""
    m = TOKEN_RE.fullmatch(token)
    check(m is not None, "malformed position token %r" % token)
    return "ldr2:%s:%s:" % (m.group(1), m.group(2))


def token_data(token):
    """A token's DATA: the data identity of the pipeline it was saved on."""
    return token_stream(token).split(":")[2]


_STATUS_HEAD_RE = re.compile(r"^loaderd (\S+) pid (\d+) uptime (\d+(?:\.\d+)?)s$")
_ARENA_RE = re.compile(r"^arena: (\d+) bytes, (\d+) staging slots of (\d+) bytes, (\d+) in use, "
                       r"share (\d+)$")
# "workers: N", and with workers = auto its bounds, last change and what holds a raise back
_WORKERS_RE = re.compile(r"^workers: (\d+)(?: auto count (\d+) min (\d+) max (\d+) cpu_budget ([\d.]+)"
                         r"(?: last_change ([\d.]+)s ago \"([^\"]*)\")?(?: held \"([^\"]*)\")?)? "
                         r"busy (\d\.\d\d)$")
_WORKER_RE = re.compile(r"^  worker (\d+) pid (\d+) state (\S+) items (\d+) inflight (\d+) restarts (\d+)"
                        r"(?: last_exit \"([^\"]*)\")?(?: retry_in_ms (\d+))? busy (\d\.\d\d) "
                        r"io_wait (\d\.\d\d)$")
# a pipeline's stages, after its line: "    stages: read 10 p50 0.1ms p99 2ms decode ..."
_STAGES_RE = re.compile(r"^    stages:((?: \w+ \d+ p50 \S+ms p99 \S+ms)+| none yet)$")
_STAGE_RE = re.compile(r" (\w+) (\d+) p50 (\S+)ms p99 (\S+)ms")
STAGE_NAMES = ("read", "decode", "transform", "gpu_decode", "staging", "copy", "h2d")
_PIPELINE_RE = re.compile(r"^  pipeline (\S+) source (\S+) samples (\d+) batch_size (\d+) "
                          r"shuffle ([01]) drop_last ([01])((?: split \w+ sequences \d+\.\.\d+ "
                          r"samples \d+)*)$")
_SPLIT_RE = re.compile(r" split (\w+) sequences (\d+)\.\.(\d+) samples (\d+)")
# a blend's member, after its pipeline's line
_MEMBER_RE = re.compile(r"^    member (\d+) source (\S+) weight (\d+\.\d+)((?: \w+ samples \d+ taken \d+)+)$")
_MEMBER_SPLIT_RE = re.compile(r" (\w+) samples (\d+) taken (\d+)")
# A client's name is shown escaped (common/escape.h): between the quotes, a
# backslash starts an escape and a quote is always escaped.
_US = r"(\d+\.\d)"  # a stage's mean, in microseconds
_CLIENT_RE = re.compile(r"^  client (\d+) pid (\d+) name \"((?:[^\"\\]|\\.)*)\" pipeline (\S+)"
                        r"(?: split \w+)? rank (\d+) "
                        r"world (\d+) depth (\d+) epoch (\d+) sent (\d+) released (\d+) in_flight (\d+) "
                        r"staging (\d+) gpu_share (\d\.\d\d) wait_ms (\d+) wait_pct (\d+\.\d)"
                        r"(?: group \"((?:[^\"\\]|\\.)*)\" group_size (\d+) joined (\d+)(?: (waiting|ended))?)?"
                        r" fill_us " + _US + " order_us " + _US + " gpu_us " + _US +
                        " held_us " + _US +
                        r"(?: gpu (GPU-[0-9a-f-]{36}) thread (loaderd-(?:gpu|dec)[0-9.]+) stream_depth (\d+) bytes_moved (\d+) "
                        r"path (direct|staging) queue_us " + _US + " copy_us " + _US + ")?"
                        r"(?: client_decode batches (\d+) gpu (\d+) cpu (\d+) bad (\d+) submit_us (\d+))?"
                        r" bytes (\d+) data_wait (\d+\.\d{3})s ready_wait (\d+\.\d{3})s$")
_CONNECTIONS_RE = re.compile(
    r"^connections: handshaking (?P<handshaking>\d+) max_handshakes (?P<max_handshakes>\d+) "
    r"timed_out (?P<timed_out>\d+) evicted (?P<evicted>\d+) unidentified (?P<unidentified>\d+) "
    r"shed (?P<shed>\d+) accept_pauses (?P<accept_pauses>\d+) accepting (?P<accepting>yes|paused) "
    r"socket (?P<socket>systemd|bound)$")
_GPU_RE = re.compile(r"^  gpu (\d+) uuid (GPU-[0-9a-f-]{36}) name \"([^\"]*)\" clients (\d+) "
                     r"device_bytes (\d+) decode_bytes (\d+) mps ([01]) decoders (\d+)$")
_DECODE_RE = re.compile(r"^  decode pipeline (\S+) gpu (\d+) engines (\d+) images_gpu (\d+) "
                        r"images_cpu (\d+) images_fallback (\d+) images_bad (\d+) parts (\d+) "
                        r"submit_us " + _US + " wait_us " + _US + r"(?: unavailable \"(.*)\")?$")


_MORE_RE = re.compile(r"^  \.\.\. (\d+) more (workers|pipelines|clients) "
                      r"\(the status text holds at most (\d+) bytes\)$")


def parse_status(text):
    """The status text of the contract, as a dict; fails on a line that
    does not match it."""
    lines, members = [], {}  # a blend's member lines, by the line of their pipeline
    declared = {}  # a declared pipeline's job and pid, by the line of its pipeline
    stages = {}  # a pipeline's stages, by the line of its pipeline
    for line in text.splitlines():
        if line.startswith("    stages:"):
            m = _STAGES_RE.match(line)
            check(m is not None and lines, "status line %r is not a pipeline's stages line\n%s"
                  % (line, text))
            stages[len(lines)] = {name: {"count": int(n), "p50_ms": float(a), "p99_ms": float(b)}
                                  for name, n, a, b in _STAGE_RE.findall(m.group(1))}
        elif line.startswith("    declared job "):
            d = re.match(r'^    declared job "((?:[^"\\]|\\.)*)" pid (\d+)$', line)
            check(d is not None and lines, "status line %r is not a declared pipeline's line\n%s"
                  % (line, text))
            declared[len(lines)] = {"job": d.group(1), "declared_pid": int(d.group(2))}
        elif line.startswith("    member "):
            b = _MEMBER_RE.match(line)
            check(b is not None and lines, "status line %r is not a blend member's line\n%s"
                  % (line, text))
            members.setdefault(lines[-1], []).append({
                "source": b.group(2), "weight": float(b.group(3)),
                "splits": {s: (int(a), int(t)) for s, a, t in _MEMBER_SPLIT_RE.findall(b.group(4))}})
        else:
            lines.append(line)
    st = {"workers": [], "pipelines": [], "clients": [], "omitted": {},
          "stages": {}}  # each pipeline's stages, by its name
    it = iter(enumerate(lines, 1))
    pending = []  # a line read ahead by left_out

    last = [0]  # the number of the line read last

    def next_line():
        n, line = pending.pop() if pending else next(it, (None, None))
        last[0] = n
        return n, line

    def left_out(what, listed, total):
        """0, or the count of a cut list's "  ... N more WHAT" line, which
        must account for every item not listed."""
        n, line = next_line()
        m = _MORE_RE.match(line or "")
        if m is None or m.group(2) != what:
            pending.append((n, line))
            return 0
        check(listed + int(m.group(1)) == total,
              "status line %d: %d %s listed and %s more, but the heading says %d\n%s"
              % (n, listed, what, m.group(1), total, text))
        st["omitted"][what] = int(m.group(1))
        return int(m.group(1))

    def expect(regex, what):
        n, line = next_line()
        check(line is not None, "status ended before the %s line:\n%s" % (what, text))
        m = regex.match(line)
        check(m is not None, "status line %d is not the %s line: %r\n%s" % (n, what, line, text))
        return m

    m = expect(_STATUS_HEAD_RE, "version")
    st["version"], st["pid"], st["uptime"] = m.group(1), int(m.group(2)), float(m.group(3))
    st["state"] = "running"
    n, line = next_line()
    if line is not None and line.startswith("state: "):  # starting: no arena, workers, pipelines yet
        m = _STATE_RE.match(line)
        check(m is not None, "status line %d is not the state line: %r\n%s" % (n, line, text))
        st["state"] = m.group(1)
        st["starting"] = {"seconds": float(m.group(2)), "clients_waiting": int(m.group(3))}
        st["scans"] = _parse_scans(next_line, pending)
        n, line = _parse_config(st, next_line, expect, text)
        _parse_connections(st, n, line, text)
        _parse_metrics(st, next_line, text)
        return st
    pending.append((n, line))
    st["delivery"] = expect(re.compile(r"^delivery: (host.*)$"), "delivery").group(1)
    st["gpus"] = []
    n_gpus = int(expect(re.compile(r"^gpus: (\d+)$"), "gpus").group(1))
    for _ in range(n_gpus):
        m = expect(_GPU_RE, "gpu")
        st["gpus"].append({"index": int(m.group(1)), "uuid": m.group(2), "name": m.group(3),
                           "clients": int(m.group(4)), "device_bytes": int(m.group(5)),
                           "decode_bytes": int(m.group(6)), "mps": m.group(7) == "1",
                           "decoders": int(m.group(8))})
    m = expect(re.compile(r"^decode: (\d+)(?: \((.*)\))?$"), "decode")
    st["decode_library"] = m.group(2)
    st["decode"] = []
    for _ in range(int(m.group(1))):
        m = expect(_DECODE_RE, "decode pipeline")
        st["decode"].append({"pipeline": m.group(1), "gpu": int(m.group(2)),
                             "engines": int(m.group(3)), "images_gpu": int(m.group(4)),
                             "images_cpu": int(m.group(5)), "images_fallback": int(m.group(6)),
                             "images_bad": int(m.group(7)), "parts": int(m.group(8)),
                             "submit_us": float(m.group(9)), "wait_us": float(m.group(10)),
                             "unavailable": m.group(11)})
    m = expect(_ARENA_RE, "arena")
    st["arena_bytes"], st["slots"], st["slot_bytes"], st["in_use"], st["share"] = (
        int(x) for x in m.groups())
    m = expect(_WORKERS_RE, "workers")
    n_workers = int(m.group(1))
    st["workers_auto"] = None if m.group(2) is None else {
        "count": int(m.group(2)), "min": int(m.group(3)), "max": int(m.group(4)),
        "cpu_budget": float(m.group(5)),
        "last_change_ago_s": None if m.group(6) is None else float(m.group(6)),
        "last_change": m.group(7), "held": m.group(8)}
    st["workers_busy"] = float(m.group(9))
    for k in range(n_workers):
        if left_out("workers", k, n_workers):
            break
        m = expect(_WORKER_RE, "worker")
        st["workers"].append({
            "index": int(m.group(1)), "pid": int(m.group(2)), "state": m.group(3),
            "items": int(m.group(4)), "inflight": int(m.group(5)), "restarts": int(m.group(6)),
            "last_exit": m.group(7), "retry_in_ms": None if m.group(8) is None else int(m.group(8)),
            "busy": float(m.group(9)), "io_wait": float(m.group(10))})
    n_pipelines = int(expect(re.compile(r"^pipelines: (\d+)$"), "pipelines").group(1))
    for k in range(n_pipelines):
        if left_out("pipelines", k, n_pipelines):
            break
        m = expect(_PIPELINE_RE, "pipeline")
        st["pipelines"].append({
            "name": m.group(1), "source": m.group(2), "samples": int(m.group(3)),
            "batch_size": int(m.group(4)), "shuffle": int(m.group(5)), "drop_last": int(m.group(6))})
        if m.group(0) in members:  # a blend: its members
            st["pipelines"][-1]["members"] = members[m.group(0)]
        if last[0] in declared:  # declared by a client: its job and pid
            st["pipelines"][-1].update(declared[last[0]])
        st["stages"][m.group(1)] = stages.get(last[0], {})
        if m.group(7):  # a megatron pipeline with split: each split's sequences and samples
            st["pipelines"][-1]["splits"] = {s: (int(a), int(b), int(n))
                                             for s, a, b, n in _SPLIT_RE.findall(m.group(7))}
    n_clients = int(expect(re.compile(r"^clients: (\d+)$"), "clients").group(1))
    for k in range(n_clients):
        if left_out("clients", k, n_clients):
            break
        m = expect(_CLIENT_RE, "client")
        g = list(m.groups())
        share = g[12:15]  # gpu_share, wait_ms, wait_pct: after staging
        del g[12:15]
        st["clients"].append({
            "id": int(g[0]), "pid": int(g[1]), "name": g[2], "pipeline": g[3], "rank": int(g[4]),
            "world": int(g[5]), "depth": int(g[6]), "epoch": int(g[7]), "sent": int(g[8]),
            "released": int(g[9]), "in_flight": int(g[10]), "staging": int(g[11]),
            "group": g[12], "group_size": 1 if g[13] is None else int(g[13]),
            "group_joined": None if g[14] is None else int(g[14]),
            "group_state": None if g[12] is None else (g[15] or "running"),
            "stages_us": {"fill": float(g[16]), "order": float(g[17]), "gpu": float(g[18]),
                          "held": float(g[19]),
                          "queue": None if g[25] is None else float(g[25]),
                          "copy": None if g[26] is None else float(g[26])},
            "gpu": g[20], "thread": g[21], "stream_depth": None if g[22] is None else int(g[22]),
            "bytes_moved": None if g[23] is None else int(g[23]), "path": g[24],
            "gpu_share": float(share[0]), "wait_ms": int(share[1]), "wait_pct": float(share[2]),
            # a client that decodes its GPU's JPEGs itself: what its DECODEDs said
            "client_decode": None if g[27] is None else dict(zip(
                ("batches", "gpu", "cpu", "bad", "submit_us"), (int(x) for x in g[27:32]))),
            # its traffic: bytes released, its data wait as the client measured it,
            # and its batches' wait in staging before they were handed on
            "bytes": int(g[32]), "data_wait_s": float(g[33]), "ready_wait_s": float(g[34])})
    m = expect(re.compile(r"^errors: read (\d+) bad_images (\d+) substituted (\d+)$"), "errors")
    st["read_errors"], st["bad_images"], st["substituted"] = (int(x) for x in m.groups())
    st["scans"] = _parse_scans(next_line, pending)
    n, line = _parse_config(st, next_line, expect, text)
    m = re.match(r"^runtime_index: (\d+) of (\d+) bytes taken, (\d+) removed pipelines? draining$",
                 line or "")
    check(m is not None, "status line %s is not the runtime_index line: %r\n%s" % (n, line, text))
    st["runtime_index"] = {"taken": int(m.group(1)), "bytes": int(m.group(2)), "draining": int(m.group(3))}
    n, line = next_line()
    _parse_connections(st, n, line, text)
    _parse_metrics(st, next_line, text)
    return st


_STATE_RE = re.compile(r"^state: (starting|stopping) for ([\d.]+) s, (\d+) clients? waiting$")
_SCAN_RE = re.compile(r"^scan: (?:pipeline (.+?): )?(.+): ([\d,]+) (\S+) so far, ([\d.]+) s$")


def _parse_scans(next_line, pending):
    """The "scan:" lines (scans running: start-up's, or of pipelines being
    added), as the JSON's "scans" has them."""
    scans = []
    while True:
        n, line = next_line()
        m = _SCAN_RE.match(line or "")
        if m is None:
            pending.append((n, line))
            return scans
        scans.append({"pipeline": m.group(1) or "", "what": m.group(2),
                      "count": int(m.group(3).replace(",", "")), "unit": m.group(4),
                      "seconds": float(m.group(5))})


def _parse_config(st, next_line, expect, text):
    """The config line (and its last_reload line) into st["config"]; the
    line after them."""
    m = expect(re.compile(r"^config: (.+) workers (\d+) max_workers (\d+) reloads (\d+) refused (\d+)$"),
               "config")
    st["config"] = {"file": m.group(1), "workers": int(m.group(2)), "max_workers": int(m.group(3)),
                    "reloads": int(m.group(4)), "refused": int(m.group(5)), "last": None}
    n, line = next_line()
    if line is not None and line.startswith("  last_reload "):
        m = re.match(r"^  last_reload ([\d.]+)s ago: (applied|refused): (.*)$", line)
        check(m is not None, "status line %d is not the last_reload line: %r\n%s" % (n, line, text))
        st["config"]["last"] = (m.group(2), m.group(3))
        n, line = next_line()
    return n, line


def _parse_connections(st, n, line, text):
    m = _CONNECTIONS_RE.match(line or "")
    check(m is not None, "status line %s is not the connections line: %r\n%s" % (n, line, text))
    st["connections"] = {k: (v if k in ("accepting", "socket") else int(v)) for k, v in m.groupdict().items()}


def _parse_metrics(st, next_line, text):
    n, line = next_line()
    m = re.match(r"^metrics: (.+) scrapes (\d+) refused (\d+)$", line or "")
    check(m is not None, "status line %s is not the metrics line: %r\n%s" % (n, line, text))
    st["metrics"] = {"listen": m.group(1), "scrapes": int(m.group(2)), "refused": int(m.group(3))}


STATUS_SCHEMA = "loaderd.status/1"


def _json_config(st, doc):
    cf = doc["config"]
    last = cf.get("last_reload")
    st["config"] = {"file": cf["file"], "workers": cf["workers"], "max_workers": cf["max_workers"],
                    "reloads": cf["reloads"], "refused": cf["refused"],
                    "last": None if last is None else tuple(last["result"].split(": ", 1))}


def parse_status_json(doc):
    """`loaderctl status --json` (already json.loads'ed), as the dict
    parse_status makes of the text, so tests read either alike. Fields the
    text does not have are the JSON's own (doc is kept as st["json"])."""
    check(doc.get("schema") == STATUS_SCHEMA, "status JSON schema is %r, expected %r"
          % (doc.get("schema"), STATUS_SCHEMA))
    if doc["state"] in ("starting", "stopping") and "starting" in doc:  # not up yet
        st = {"json": doc, "version": doc["daemon"]["version"], "pid": doc["daemon"]["pid"],
              "uptime": doc["daemon"]["uptime_s"], "state": doc["state"],
              "starting": dict(doc["starting"]), "scans": [dict(x) for x in doc["scans"]],
              "connections": dict(doc["connections"])}
        _json_config(st, doc)
        return st
    dv = doc["delivery"]
    if dv["device"]:
        threads = dv["gpu_threads"]
        delivery = "host, device (%s%s, %d thread%s per GPU)" % (
            dv["gpu"], ", %d free" % dv["pinned_free"] if "pinned_free" in dv else "", threads,
            "" if threads == 1 else "s")
    else:
        delivery = "host (GPU %s%s)" % (dv["gpu"], ": " + dv["unavailable"] if "unavailable" in dv else "")
    arena = doc["arena"]
    st = {"json": doc, "version": doc["daemon"]["version"], "pid": doc["daemon"]["pid"],
          "uptime": doc["daemon"]["uptime_s"], "delivery": delivery, "omitted": {},
          "gpus": [dict(g, mps=g["mps"] == 1) for g in doc["gpus"]],
          "decode_library": doc["decode"].get("library"),
          "decode": [dict(x, unavailable=x.get("unavailable")) for x in doc["decode"]["pipelines"]],
          "arena_bytes": arena["bytes"], "slots": arena["staging_slots"],
          "slot_bytes": arena["slot_bytes"], "in_use": arena["in_use"], "share": arena["share"]}
    st["workers"] = [{"index": w["index"], "pid": w["pid"], "state": w["state"], "items": w["items"],
                      "inflight": w["inflight"], "restarts": w["restarts"],
                      "last_exit": w.get("last_exit"), "retry_in_ms": w.get("retry_in_ms"),
                      "busy": w["busy_ratio"], "io_wait": w["io_wait_ratio"]}
                     for w in doc["workers"]]
    st["workers_busy"] = doc["workers_busy_ratio"]
    wa = doc.get("workers_auto")
    st["workers_auto"] = None if wa is None else {
        "count": wa["count"], "min": wa["min"], "max": wa["max"], "cpu_budget": wa["cpu_budget"],
        "last_change_ago_s": wa.get("last_change_ago_s"), "last_change": wa.get("last_change"),
        "held": wa.get("held")}
    st["pipelines"], st["stages"] = [], {}
    for p in doc["pipelines"]:
        q = {"name": p["name"], "source": p["source"] + (":" + p["path"] if "path" in p else ""),
             "samples": p["samples"], "batch_size": p["batch_size"], "shuffle": int(p["shuffle"]),
             "drop_last": int(p["drop_last"])}
        if "members" in p:
            q["members"] = [{"source": m["source"] + ":" + m["path"], "weight": round(m["weight"], 6),
                             "splits": {x["split"]: (x["samples"], x["taken"]) for x in m["splits"]}}
                            for m in p["members"]]
        if "declared" in p:
            q.update({"job": p["declared"]["job"], "declared_pid": p["declared"]["pid"]})
        if "splits" in p:
            q["splits"] = {x["split"]: (x["first_sequence"], x["end_sequence"], x["samples"])
                           for x in p["splits"]}
        st.setdefault("stages", {})[p["name"]] = {
            name: {"count": s["count"], "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}
            for name, s in p["stages"].items() if s["count"] > 0}
        st["pipelines"].append(q)
    st["clients"] = []
    for c in doc["clients"]:
        g, dev, dec = c.get("group"), c.get("device") or {}, c.get("client_decode")
        st["clients"].append({
            "id": c["id"], "pid": c["pid"], "name": c["name"], "pipeline": c["pipeline"],
            "rank": c["rank"], "world": c["world"], "depth": c["depth"], "epoch": c["epoch"],
            "sent": c["sent"], "released": c["released"], "in_flight": c["in_flight"],
            "staging": c["staging"], "group": None if g is None else g["key"],
            "group_size": 1 if g is None else g["size"],
            "group_joined": None if g is None else g["joined"],
            "group_state": None if g is None else
            "ended" if g["ended"] else "waiting" if g["waiting"] else "running",
            "stages_us": {"fill": c["fill_us"], "order": c["order_us"], "gpu": c["gpu_us"],
                          "held": c["held_us"], "queue": dev.get("queue_us"), "copy": dev.get("copy_us")},
            "gpu": dev.get("gpu"), "thread": dev.get("thread"), "stream_depth": dev.get("stream_depth"),
            "bytes_moved": dev.get("bytes_moved"), "path": dev.get("path"),
            "gpu_share": c["gpu_share"], "wait_ms": c["wait_ms"], "wait_pct": c["wait_pct"],
            "client_decode": None if dec is None else dict(dec),
            "bytes": c["bytes"], "data_wait_s": c["data_wait_s"], "ready_wait_s": c["ready_wait_s"]})
    e = doc["errors"]
    st["read_errors"], st["bad_images"], st["substituted"] = e["read"], e["bad_images"], e["substituted"]
    st["state"] = doc["state"]
    st["scans"] = [dict(x) for x in doc["scans"]]
    _json_config(st, doc)
    ri = doc["runtime_index"]
    st["runtime_index"] = {"taken": ri["taken_bytes"], "bytes": ri["bytes"], "draining": ri["draining"]}
    st["connections"] = dict(doc["connections"])
    st["metrics"] = dict(doc["metrics"])
    return st
