# SPDX-License-Identifier: Apache-2.0
"""loader: Loader (one attachment to a pipeline); the batches it hands out
are Batch objects (batch.py): their tensors in output order, also read by
name (`image, label = batch`, `batch["image"]`).

A Loader attaches when it is made, so a wrong pipeline name, a GPU the
daemon cannot deliver to or a refused resume state fail there, as
exceptions carrying the daemon's message. Iterating it walks one epoch of
the pipeline's stream, as a DataLoader's iterator does: a loop run to the
end of the epoch is followed by the next epoch, and so is a loop left with
break (a new iter() starts the next epoch); the first iter() after attach,
Loader(state=...), load_state_dict() or set_epoch() continues where the
stream is.

Lifetime (batch.py): a batch's tensors are views of the daemon's memory
that never change while alive. When the loader moves past a batch, the
batch is released if none of its tensors is alive, else kept until the
last one dies (the DLPack deleter queues it; the loader's next call
releases it). A batch kept while the next one is let go is warned about,
once. A client holds at most its depth of batches: when all are held,
next() collects garbage once, then raises LoaderdError (EBUSY) saying how
many are held and what to do. The deleter may run on any thread: it only
counts and queues (Batch._view_died); every call into the C library is
made by the loader's own calls, except that of a closed loader's last
kept batch, which the deleter releases itself, under _drain_lock.

The position (state_dict()) is the token taken when the last batch was
handed out, so it stays exact when the daemon fails the loader (see
Loader.failed): a training script checkpoints it and resumes with
Loader(state=...) on a restarted daemon, no batch lost or repeated.

GPU delivery: a batch's tensors are zero-copy views of the daemon's device
ring, made with torch.from_dlpack. Each tensor's __dlpack__(stream) makes
that stream wait (on the GPU, never the host) for the daemon's copy; the
batch's release records the slot's "released" event on every stream its
tensors were exported to, so the daemon's next copy into the slot waits for
the work enqueued there (a kept batch's release, later, covers the work
enqueued until then). Host delivery: views of the daemon's shared memory;
with torch, mapped private and writable (LDR_ATTACH_WRITABLE: a write
stays in this process and is dropped at release), with numpy read-only.
"""

import collections
import collections.abc
import ctypes
import errno
import gc
import json as _json
import os
import sys
import threading
import warnings

from . import _lib
from .batch import Batch
from .errors import (AttachTimeoutError, DaemonUnavailableError, DeviceUnavailableError, LoaderdError,
                     PipelineNotFoundError)

STATE_VERSION = 1
_WAIT_SLICE_MS = 1000  # ldr_next waits this long between checks for signals


def _torch():
    """The torch module if it can be imported, else None."""
    try:
        import torch
        return torch
    except ImportError:
        return None


def _env_int(names):
    for name in names:
        value = os.environ.get(name)
        if value is not None and value != "":
            try:
                return int(value), "%s=%s" % (name, value)
            except ValueError:
                raise ValueError("loaderd: %s=%r in the environment is not an integer" %
                                 (name, value)) from None
    return None, None


def default_rank_world(rank=None, world_size=None):
    """(rank, world_size, where they came from): torch.distributed when it
    is initialised, else $RANK (or $LOCAL_RANK) and $WORLD_SIZE (or
    $LOCAL_WORLD_SIZE), else 0 and 1. Explicit values win."""
    where = "arguments"
    if rank is None or world_size is None:
        dist = None
        if "torch" in sys.modules:
            dist = getattr(sys.modules["torch"], "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            d_rank, d_world, where = dist.get_rank(), dist.get_world_size(), "torch.distributed"
        else:
            d_rank, r_where = _env_int(("RANK", "LOCAL_RANK"))
            d_world, w_where = _env_int(("WORLD_SIZE", "LOCAL_WORLD_SIZE"))
            where = " and ".join(w for w in (r_where, w_where) if w) or "defaults"
            d_rank = 0 if d_rank is None else d_rank
            d_world = 1 if d_world is None else d_world
        rank = d_rank if rank is None else rank
        world_size = d_world if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("loaderd: rank %d and world size %d (from %s): need 0 <= rank < world size"
                         % (rank, world_size, where))
    return rank, world_size


def _device_ordinal(device, torch):
    """None for host delivery, else the CUDA ordinal (as this process sees
    it) batches go to."""
    if device is None:
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.current_device()
        return None
    if torch is not None and isinstance(device, torch.device):
        device = str(device)
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError("loaderd: device %d: a CUDA ordinal is >= 0" % device)
        return device
    if isinstance(device, str):
        if device in ("cpu", "host"):
            return None
        if device == "cuda":
            if torch is None:
                return 0
            return torch.cuda.current_device()
        if device.startswith("cuda:") and device[5:].isdigit():
            return int(device[5:])
    raise ValueError("loaderd: device %r: expected \"cpu\", \"cuda\", \"cuda:N\", an ordinal or a "
                     "torch.device" % (device,))


class _EpochIterator:
    """Batches until the end of the epoch the stream is in."""

    def __init__(self, loader):
        self._loader = loader
        self._done = False
        self._last = None  # the batch this iterator handed out last

    def __iter__(self):
        return self

    def __next__(self):
        loader = self._loader
        if self._done:
            raise StopIteration
        if self._last is not None and self._last.last_in_epoch:
            self._done = True
            if loader._current is self._last:
                loader._let_go(self._last)
            self._last = None
            raise StopIteration
        self._last = loader._next_batch()
        return self._last


class Loader:
    """One attachment to a loaderd pipeline.

    Loader(pipeline=None, *, socket=None, device=None, rank=None, world_size=None,
           state=None, depth=0, timeout=None, framework=None, name=None, split=None,
           tp_group=None, tp_size=None, source=None, transform=None, batch_size=None,
           shuffle=None, seed=None, outputs=None, options=None, job=None,
           attach_timeout=None)

    - pipeline: a pipeline the daemon's configuration defines. Or, instead,
      the job declares its own (docs/clients.md, "Declaring a pipeline"):
      source, transform, batch_size, shuffle, seed, outputs and any other
      key of a [pipeline.NAME] section in options (a dict), with the same
      values as the configuration file takes; exactly one of pipeline and
      source. The daemon must allow it (job_roots in its [daemon]).
    - job: the key of the job a declared pipeline is for: its ranks share
      the pipeline and its sampler. Default $TORCHELASTIC_RUN_ID, else
      $SLURM_JOB_ID, else (world_size 1) one unique to this process; with
      world_size > 1 and none of these, attaching asks for it.

    - socket: the daemon's socket path (default $LOADERD_SOCKET, else the
      daemon's default path).
    - device: "cuda:N", N, torch.device, "cuda" (the current device) or
      "cpu" (host delivery). Default: the current CUDA device when CUDA is
      available, else host delivery.
    - rank, world_size: default from torch.distributed when initialised,
      else $RANK/$WORLD_SIZE ($LOCAL_RANK/$LOCAL_WORLD_SIZE), else 0 and 1.
    - state: a state_dict() saved earlier: resume after its last batch.
    - depth: batches the daemon prepares ahead (0: the daemon's default).
    - timeout: seconds to wait for a batch before TimeoutError (None:
      forever).
    - attach_timeout: seconds to wait for the daemon to answer the attach
      (None: 60). A daemon still starting (listing a large dataset) holds
      the attach until it is up; when this runs out first,
      AttachTimeoutError (a TimeoutError) says what it is doing.
    - framework: "torch" or "numpy" (host delivery only); default torch when
      it can be imported.
    - name: how `loaderctl status` shows this client (escaped there: any
      text, up to 63 bytes of UTF-8).
    - split: "train" (the default), "valid" or "test": the split of a
      megatron pipeline with `split = A,B,C` to stream, each a dataset of
      its own (size, epochs, state); a pipeline without `split` has only
      "train".
    - tp_group, tp_size: a group of tp_size loaders that all receive the
      same batches, read once (the tensor-parallel ranks of one
      data-parallel rank): tp_group is a key they share, unique to the job
      and the group (printable ASCII without spaces, at most 63 bytes; e.g.
      "job42-dp%d" % dp_rank). rank and world_size are then the
      data-parallel rank and world size and must be given (with
      Megatron-LM: mpu.get_data_parallel_rank() and
      mpu.get_data_parallel_world_size(); tp_size is
      mpu.get_tensor_model_parallel_world_size()): no default is taken from
      torch.distributed, whose rank is the global one. Every member must
      pass the same pipeline, split, rank, world_size, depth, device kind
      and state. Batches start once all tp_size members have attached; when
      one member leaves or fails, the others' next() raises LoaderdError.
      load_state_dict() and set_epoch() of a member leave the group and join
      a new one of the same key: every member must call them at the same
      step (as training does when it restores a checkpoint).
      tp_size None or 1: no group.
    """

    def __init__(self, pipeline=None, *, socket=None, device=None, rank=None, world_size=None,
                 state=None, depth=0, timeout=None, framework=None, name=None, split=None,
                 tp_group=None, tp_size=None, source=None, transform=None, batch_size=None,
                 shuffle=None, seed=None, outputs=None, options=None, job=None,
                 attach_timeout=None):
        self._attach_timeout_ms = 0 if attach_timeout is None else max(1, int(attach_timeout * 1000))
        self._declaration = _declaration(pipeline, source=source, transform=transform,
                                         batch_size=batch_size, shuffle=shuffle, seed=seed,
                                         outputs=outputs, options=options)
        self._job = None if job is None else str(job)
        self._lib = _lib.load()
        self._client = None
        self._current = None
        self._init_lifetimes()
        self._failure = None   # the error that failed the attachment, raised again by next()
        self._position = None  # token of the position after the last batch handed out
        if framework not in (None, "torch", "numpy"):
            raise ValueError("loaderd: framework %r: expected \"torch\" or \"numpy\"" % (framework,))
        self._torch = _torch() if framework != "numpy" else None
        if framework == "torch" and self._torch is None:
            raise ImportError("loaderd: framework=\"torch\" but torch cannot be imported")
        self.pipeline = pipeline
        self.split = "train" if split is None else str(split)
        self._socket = socket
        self.tp_size = 1 if tp_size is None else int(tp_size)
        self.tp_group = None if self.tp_size <= 1 else tp_group
        if self.tp_size < 1:
            raise ValueError("loaderd: tp_size %r: expected 1 or more" % (tp_size,))
        if self.tp_size > 1 and not tp_group:
            raise ValueError("loaderd: tp_size %d needs tp_group, the key the group's members "
                             "share" % self.tp_size)
        if self.tp_size > 1 and (rank is None or world_size is None):
            raise ValueError("loaderd: tp_group %r: pass rank and world_size, the data-parallel "
                             "ones (torch.distributed's are the global rank and world size)"
                             % (tp_group,))
        self.rank, self.world_size = default_rank_world(rank, world_size)
        self._ordinal = _device_ordinal(device, self._torch)
        if self._ordinal is not None and self._torch is None and framework == "numpy":
            raise ValueError("loaderd: numpy arrays cannot hold GPU memory: use device=\"cpu\", "
                             "or batch.dlpack(name) with a GPU framework")
        self._np = None
        if self._torch is None:
            try:
                import numpy
            except ImportError:
                raise ImportError("loaderd: %s: install torch, or numpy (pip install \"loaderd[numpy]\")"
                                  % ("framework=\"numpy\" but numpy cannot be imported" if framework
                                     else "neither torch nor numpy can be imported")) from None
            self._np = numpy
        self._depth = depth
        self._timeout_ms = -1 if timeout is None else max(0, int(timeout * 1000))
        self._name = name or "python:%d" % os.getpid()
        resume = None
        if state is not None:
            resume = self._state_position(state)
        self._client = self._attach(resume)
        self._position = self._token(self._lib.ldr_position, self._client)
        if self._declaration:  # the name the daemon gave it, as its tokens carry it
            self.pipeline = self._position.split(":")[1]

    # -- attachment --------------------------------------------------------

    def _attach(self, resume):
        """A new attached client handle (the current one is left alone)."""
        lib = self._lib
        handle = ctypes.c_void_p()
        socket = None if self._socket is None else os.fsencode(self._socket)
        rc = lib.ldr_connect(socket, ctypes.byref(handle))
        if rc < 0:
            message = (lib.ldr_error(handle) or b"").decode(errors="replace")
            lib.ldr_close(handle)
            raise DaemonUnavailableError(-rc, "loaderd: %s" % (message or os.strerror(-rc)))
        opts = _lib.AttachOpts(
            pipeline=None if self._declaration else self.pipeline.encode(),
            declaration=self._declaration.encode() if self._declaration else None,
            job=self._job.encode() if self._job else None,
            rank=self.rank, world=self.world_size,
            depth=self._depth, resume=resume.encode() if resume else None,
            client_name=self._name.encode(),
            device=None if self._ordinal is None else str(self._ordinal).encode(),
            split=self.split.encode(),
            group=self.tp_group.encode() if self.tp_group else None, group_size=self.tp_size,
            flags=_lib.ATTACH_WRITABLE if self._ordinal is None and self._torch else 0)
        lib.ldr_set_attach_timeout(handle, self._attach_timeout_ms)
        rc = lib.ldr_attach(handle, ctypes.byref(opts))
        if rc < 0:
            message = "loaderd: " + (lib.ldr_error(handle) or b"").decode(errors="replace")
            lib.ldr_close(handle)
            if rc == -errno.ETIMEDOUT:
                raise AttachTimeoutError(-rc, message)
            if rc == -errno.ENOENT:
                raise PipelineNotFoundError(-rc, message)
            if rc in (-errno.EOPNOTSUPP, -errno.ENODEV):
                raise DeviceUnavailableError(-rc, message)
            if rc in (-errno.ECONNRESET, -errno.EPIPE, -errno.ESHUTDOWN):
                raise DaemonUnavailableError(-rc, message)
            raise LoaderdError(-rc, message)
        return handle

    def _reattach(self, resume):
        """Attaches anew at `resume`, then lets the old attachment go (a
        failed one too); a refused position leaves the loader as it was.
        A group's member leaves first (attached twice, it would find its
        group full), which ends the group for the other members, and joins
        a new group of the same key, which they join as they do the same:
        a refused position leaves it detached, failed with that error."""
        if self.tp_group:
            self._handed = False
            self._drop(force=True)
            try:
                handle = self._attach(resume)
            except LoaderdError as e:
                self._failure = e
                raise
            self._client = handle
            self._position = self._token(self._lib.ldr_position, handle)
            self._failure = None
            return
        handle = self._attach(resume)
        try:
            position = self._token(self._lib.ldr_position, handle)
        except BaseException:
            self._lib.ldr_close(handle)
            raise
        self._drop()
        self._client = handle
        self._position = position
        self._failure = None
        self._handed = False

    def _drop(self, force=False):
        """Lets the current batch go and detaches; raises nothing (the
        daemon takes back what it held when the connection goes). Batches
        whose tensors are still alive keep the attachment open until they
        are released (_drain), unless force: a group's member must leave
        its group now, and those tensors then show other data."""
        if self._current is not None:
            try:
                self._let_go(self._current)
            except LoaderdError:
                pass
        self._drain()
        handle = self._client
        if handle is None:
            return
        kept = [b for b in self._kept if b._client is handle]
        if kept and force:
            for b in kept:
                try:
                    b.release()
                except LoaderdError:
                    pass
            kept = []
        self._client = None
        if kept:
            self._retired.append(handle)
        else:
            self._lib.ldr_close(handle)

    # -- batches kept past next() ------------------------------------------

    def _init_lifetimes(self):
        self._views_lock = threading.RLock()  # Batch._views and ._kept
        # Batches whose last view died while kept: appended by the DLPack
        # deleter (any thread), released by the loader's next call (_drain).
        self._dead = collections.deque()
        self._drain_lock = threading.Lock()
        self._kept = []      # batches let go while viewed, not released yet
        self._retired = []   # attachments let go with kept batches left
        self._warned_kept = False
        self._handed = False  # next() handed out a batch since the last (re)attach

    def _let_go(self, batch):
        """The loader moves past `batch`: released now when no tensor of it
        is alive, else kept until the last one dies. A batch still kept
        when the one after it is let go is held by the user's own
        references (not the loop's variables, which the next batch
        replaces): warned about once."""
        if self._current is batch:
            self._current = None
        self._drain()  # what died since is not held by the user any more
        batch._tensors.clear()  # the batch's own references are not the user's
        with self._views_lock:
            viewed = batch._views > 0 and not batch._released
            batch._kept = viewed
        if viewed:
            self._kept.append(batch)
        older = self._kept[0] if self._kept and self._kept[0] is not batch else None
        if older is not None and not self._warned_kept:
            self._warned_kept = True
            warnings.warn(
                "loaderd: pipeline %r: tensors of batch %d are still alive %d batches later, so "
                "its slot stays held (%d of the depth's batches held now); clone() the tensors "
                "you keep to let the slot go" % (self.pipeline, older.seq, batch.seq + 1 - older.seq,
                                                 len(self._kept)), stacklevel=4)
        if not viewed:
            batch.release()

    def _forget_kept(self, batch):
        """batch was released: no longer kept."""
        if batch._kept:
            try:
                self._kept.remove(batch)
            except ValueError:
                pass

    def _view_gone(self, batch):
        """The last tensor of kept `batch` died (the DLPack deleter: any
        thread, maybe during garbage collection)."""
        self._dead.append(batch)
        if self._client is None and self._retired:
            self._drain(wait=False)  # closed: no call of the loader will come

    def _drain(self, wait=True):
        """Releases the kept batches whose tensors are all gone, and closes
        the let-go attachments that hold none any more."""
        if not self._drain_lock.acquire(blocking=wait):
            return  # another thread drains; what it misses waits for the next call
        try:
            while self._dead:
                batch = self._dead.popleft()
                with self._views_lock:
                    viewed = batch._views > 0  # read again since: queued again when those die
                if viewed:
                    continue
                try:
                    batch.release()
                except LoaderdError:
                    pass  # the loader failed with it: next() raises it
            for handle in list(self._retired):
                if all(b._client is not handle for b in self._kept):
                    self._retired.remove(handle)
                    self._lib.ldr_close(handle)
        finally:
            self._drain_lock.release()

    def _live(self):
        if self._client is None:
            raise LoaderdError(errno.EBADF, "loaderd: the loader of pipeline %r is closed" %
                               self.pipeline)
        return self._client

    def _error(self, rc, call):
        """The exception for the C library's failure rc in `call`."""
        message = "loaderd: %s: %s" % (call, (self._lib.ldr_error(self._client) or b"").decode(
            errors="replace") or os.strerror(-rc))
        if rc in (-errno.ECONNRESET, -errno.EPIPE, -errno.ESHUTDOWN):
            return DaemonUnavailableError(-rc, message)
        return LoaderdError(-rc, message)

    def _check(self, rc, call):
        if rc >= 0:
            return rc
        raise self._error(rc, call)

    def _fail(self, rc, call):
        """Fails the loader with the error of rc, and raises it."""
        self._failure = self._error(rc, call)
        raise self._failure

    def _raise_failure(self):
        """Raises the error the loader failed with, if it has."""
        f = self._failure
        if f is not None:
            raise type(f)(f.errno, f.message)

    def _token(self, fn, *args):
        """The position token fn(*args, buf, cap) writes."""
        buf = ctypes.create_string_buffer(_lib.POSITION_MAX)
        rc = fn(*args, buf, len(buf))
        if rc < 0:
            raise LoaderdError(-rc, "loaderd: no position token: %s" % os.strerror(-rc))
        return buf.value.decode()

    def _position_fields(self):
        """The fields of the position token (a _lib.CPosition)."""
        p = _lib.CPosition()
        if self._lib.ldr_position_parse(self._position.encode(), ctypes.byref(p), None, 0) < 0:
            raise LoaderdError(errno.EPROTO, "unexpected position token %r" % self._position)
        return p

    @property
    def failed(self):
        """None; or, once the daemon failed the loader (it went away, sent
        an ERROR, a release failed), that error, raised again by every later
        next(). state_dict(), len() and epoch still answer; load_state_dict()
        or set_epoch() attach anew."""
        return self._failure

    def close(self):
        """Releases the current batch and detaches. GPU delivery: waits for
        the work enqueued on the batches released so far."""
        self._drop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- facts -------------------------------------------------------------

    @property
    def dataset_size(self):
        return self._lib.ldr_dataset_size(self._live())

    @property
    def batch_size(self):
        return self._lib.ldr_batch_size(self._live())

    @property
    def device(self):
        """"cpu" or "cuda:N"."""
        return "cpu" if self._ordinal is None else "cuda:%d" % self._ordinal

    @property
    def device_uuid(self):
        """The UUID of the GPU batches go to ("GPU-..."), "" in host mode."""
        return self._lib.ldr_device_uuid(self._live()).decode()

    @property
    def epoch(self):
        """The epoch the next batch belongs to."""
        return self._position_fields().epoch

    def __len__(self):
        """Batches this rank gets in the epoch the stream is in (the first
        epoch after a mid-epoch resume has fewer)."""
        return self._lib.ldr_batches_in_epoch(self._live(), self.epoch)

    # -- iteration ---------------------------------------------------------

    def __iter__(self):
        """Batches to the end of the epoch, as a DataLoader's iterator: when
        a batch was handed out since the last attach (Loader(),
        load_state_dict(), set_epoch()) and the stream is inside an epoch (a
        loop left with break), the iterator starts the next epoch; else it
        continues where the stream is (the rest of a resumed epoch, or the
        epoch after one run to its end)."""
        self._live()
        if self._handed and self._failure is None and self._position_fields().offset != 0:
            self.set_epoch(self.epoch + 1)
        return _EpochIterator(self)

    def _next_batch(self):
        client = self._live()
        self._raise_failure()
        self._drain()
        if self._current is not None:
            self._let_go(self._current)
        cbatch = _lib.CBatch()
        waited_ms = 0
        collected = False
        while True:
            slice_ms = _WAIT_SLICE_MS
            if self._timeout_ms >= 0:
                slice_ms = min(slice_ms, self._timeout_ms - waited_ms)
            rc = self._lib.ldr_next(client, ctypes.byref(cbatch), slice_ms)
            if rc == 0:
                break
            if rc in (-errno.ETIMEDOUT, -errno.EINTR):  # Python runs signal handlers here
                waited_ms += slice_ms if rc == -errno.ETIMEDOUT else 0
                if self._timeout_ms >= 0 and waited_ms >= self._timeout_ms:
                    raise TimeoutError("loaderd: no batch of pipeline %r within %.3g s" %
                                       (self.pipeline, self._timeout_ms / 1000))
                continue
            if rc == -errno.EBUSY:  # every batch of the depth is held by tensors still alive
                if not collected:
                    collected = True
                    gc.collect()  # views in reference cycles die now
                    self._drain()
                    continue
                raise LoaderdError(errno.EBUSY, (
                    "loaderd: pipeline %r: no next batch while this process holds %d earlier "
                    "batches (batches %s), the most its depth lets it hold: tensors of them are "
                    "still alive (kept past next(), in a list, a closure, a traceback). clone() "
                    "the tensors you keep, del them before the next batch, or attach with a "
                    "larger depth= (the daemon's max_depth caps it)") % (
                        self.pipeline, len(self._kept),
                        ", ".join(str(b.seq) for b in self._kept[:8]) +
                        (", ..." if len(self._kept) > 8 else "")))
            self._fail(rc, "next batch of pipeline %r" % self.pipeline)
        # Taken now, while the batch is held: exact whatever becomes of the daemon.
        self._position = self._token(self._lib.ldr_position_after, client, ctypes.byref(cbatch))
        self._current = Batch(self, cbatch)
        self._handed = True
        return self._current

    def stats(self):
        """What this loader has done so far, as a dict: `batches`, `wait_s`
        (the time the training waited for data in next(), summed), and, with
        GPU delivery of JPEGs, whether this process decodes them itself
        (`decoding`, else `decode_why_not`), the images decoded on the GPU's
        engines (`images_gpu`), on this process's CPU because the engines
        refused them (`images_cpu`), bad (`images_bad`), and what the
        decoding thread cost this process (`submit_s`, `decode_thread_cpu_s`:
        never the caller's thread), and the parts of `wait_s` spent waiting
        for that decoding of a batch the daemon had already sent: one read
        by an earlier call (`decode_wait_s`: the engines behind), one sent
        while the caller was away, whose decoding began only at the call
        (`decode_late_s`); the rest of the wait is the workers behind."""
        s = _lib.CStats()
        self._check(self._lib.ldr_get_stats(self._live(), ctypes.byref(s)), "ldr_get_stats")
        return {"batches": s.batches, "wait_s": s.wait_ns / 1e9, "decoding": bool(s.decoding),
                "decode_why_not": s.decode_why_not.decode(errors="replace"),
                "decoded_batches": s.decoded_batches, "images_gpu": s.images_gpu,
                "images_cpu": s.images_cpu, "images_bad": s.images_bad,
                "submit_s": s.submit_ns / 1e9, "decode_thread_cpu_s": s.thread_cpu_ns / 1e9,
                "decode_wait_s": s.decode_wait_ns / 1e9, "decode_late_s": s.decode_late_ns / 1e9}

    def synchronize(self):
        """GPU delivery: blocks until the work ordered before every release
        so far is done."""
        self._check(self._lib.ldr_synchronize(self._live()), "ldr_synchronize")

    # -- epochs and checkpoints ---------------------------------------------

    def set_epoch(self, epoch):
        """Makes the next batch the first of `epoch`, unless the stream is
        already in that epoch (then nothing changes, so a loop that calls
        set_epoch after resuming mid-epoch keeps its place)."""
        self._live()
        p = self._position_fields()
        if epoch == p.epoch:
            return
        if epoch < 0:
            raise ValueError("loaderd: epoch %d: epochs count from 0" % epoch)
        epoch = int(epoch)  # as "%d" would write it
        if epoch >= 1 << 64:  # more than a token holds (the daemon refuses 2^32 and more)
            raise LoaderdError(errno.EINVAL, "loaderd: epoch %d: a stream's epochs are below 2^32" %
                               epoch)
        p.epoch, p.offset = epoch, 0
        self._reattach(self._token(self._lib.ldr_position_format, ctypes.byref(p)))

    def state_dict(self):
        """The position after the last batch handed out (the current one
        counts as consumed), for load_state_dict() or Loader(state=...).
        Exact also after the daemon failed the loader, and after close()."""
        return {"version": STATE_VERSION, "pipeline": self.pipeline, "split": self.split,
                "position": self._position, "rank": self.rank, "world_size": self.world_size}

    def _state_position(self, state):
        if not isinstance(state, collections.abc.Mapping) or "position" not in state:
            raise ValueError("loaderd: a loader state is the dict state_dict() returns; got %r" %
                             (state,))
        if state.get("version", STATE_VERSION) != STATE_VERSION:
            raise ValueError("loaderd: loader state version %r; this package reads version %d" %
                             (state.get("version"), STATE_VERSION))
        if not self._declaration and state.get("pipeline", self.pipeline) != self.pipeline:
            raise ValueError("loaderd: the state was saved from pipeline %r, this loader reads %r" %
                             (state["pipeline"], self.pipeline))
        if state.get("split", self.split) != self.split:
            raise ValueError("loaderd: the state was saved from split %r of pipeline %r, this "
                             "loader reads split %r" % (state["split"], self.pipeline, self.split))
        return str(state["position"])

    def load_state_dict(self, state):
        """Resumes after the last batch of a saved state. A state saved by a
        job of another world size resumes the rest of its epoch re-sharded
        over this job's ranks. A refused state leaves the loader as it was."""
        self._reattach(self._state_position(state))


def _declaration(pipeline, options=None, **keys):
    """The text of a declared pipeline (a [pipeline.NAME] section's lines),
    or None when pipeline names a configured one."""
    declared = {k: v for k, v in keys.items() if v is not None}
    declared.update(options or {})
    if pipeline is not None and declared:
        raise ValueError("loaderd: pipeline %r and a declaration (%s): exactly one of the two"
                         % (pipeline, ", ".join(sorted(declared))))
    if pipeline is not None:
        return None
    if "source" not in declared:
        raise ValueError("loaderd: a Loader needs pipeline= (a configured pipeline) or source= "
                         "(declaring one)")
    lines = []
    for key, value in declared.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = " ".join(str(v) for v in value)
        value = str(value)
        if "\n" in value or "\n" in str(key):
            raise ValueError("loaderd: declared key %r: a value is one line" % (key,))
        lines.append("%s = %s" % (key, value))
    return "\n".join(lines) + "\n"


def status(socket=None, json=False):
    """The daemon's status text (what `loaderctl status` prints), or with
    json=True the same status as a dict (`loaderctl status --json`, schema
    "loaderd.status/1": docs/operations.md, "Status as JSON")."""
    lib = _lib.load()
    text = ctypes.c_void_p()
    err = ctypes.create_string_buffer(4096)  # room for why a connect failed
    call = lib.ldr_status_json if json else lib.ldr_status
    rc = call(None if socket is None else os.fsencode(socket), ctypes.byref(text), err, len(err))
    if rc < 0:
        raise DaemonUnavailableError(-rc, "loaderd: " + (err.value.decode(errors="replace") or
                                                         os.strerror(-rc)))
    try:
        out = ctypes.string_at(text).decode(errors="surrogateescape")
    finally:
        lib.free(text)
    return _json.loads(out) if json else out
