"""loader: Loader (one attachment to a pipeline) and Batch (one delivered
batch, a mapping of tensor name -> tensor).

A Loader attaches when it is made, so a wrong pipeline name, a GPU the
daemon cannot deliver to or a refused resume state fail there, as
exceptions carrying the daemon's message. Iterating it walks one epoch of
the pipeline's stream; the next `for` continues with the next epoch. Each
batch stays valid until the next one is requested (or batch.release()).

The position (state_dict()) is the token taken when the last batch was
handed out, so it stays exact when the daemon fails the loader (see
Loader.failed): a training script checkpoints it and resumes with
Loader(state=...) on a restarted daemon, no batch lost or repeated.

GPU delivery: a batch's tensors are zero-copy views of the daemon's device
ring, made with torch.from_dlpack. Each tensor's __dlpack__(stream) makes
that stream wait (on the GPU, never the host) for the daemon's copy; the
batch's release records the slot's "released" event on every stream its
tensors were exported to, so the daemon's next copy into the slot waits for
the work enqueued there. Host delivery: views of the daemon's shared
memory, read-only.
"""

import collections.abc
import ctypes
import errno
import os
import sys

from . import _dlpack, _lib
from .errors import (BatchReleasedError, DaemonUnavailableError, DeviceUnavailableError,
                     LoaderdError, PipelineNotFoundError)

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


def _parse_position(token):
    """(seed, n_samples, epoch, offset) of a position token."""
    parts = token.split(":")
    if len(parts) != 5 or parts[0] != "ldr1":
        raise LoaderdError(errno.EPROTO, "unexpected position token %r" % token)
    return tuple(int(p) for p in parts[1:])


def _stream_pointer(stream):
    """A DLPack stream value as the cudaStream_t the C library takes."""
    if stream is None or stream == 0 or stream == _dlpack.STREAM_LEGACY:
        return None  # NULL: the legacy default stream
    return stream  # STREAM_PER_THREAD (2) is the driver's CU_STREAM_PER_THREAD too


class _Exporter:
    """One tensor of one batch, as a DLPack producer (for torch, CuPy, JAX,
    numpy: anything with from_dlpack)."""

    __slots__ = ("_batch", "_i")

    def __init__(self, batch, i):
        self._batch = batch
        self._i = i

    def __dlpack_device__(self):
        ordinal = self._batch._loader._ordinal
        return (_dlpack.KDL_CPU, 0) if ordinal is None else (_dlpack.KDL_CUDA, ordinal)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        b = self._batch
        b._check_live("export tensor %r" % b._names[self._i])
        if copy:
            raise BufferError("loaderd: tensors are exported as views of the daemon's memory; "
                              "copy=True is not supported (copy after import)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("loaderd: batch is on device %r, asked for %r" %
                              (self.__dlpack_device__(), tuple(dl_device)))
        t = b._c.tensors[self._i]
        if b._loader._ordinal is not None and stream != _dlpack.STREAM_NO_SYNC:
            b._loader._check(b._lib.ldr_stream_wait(b._loader._client, ctypes.byref(b._c),
                                                    _stream_pointer(stream)), "ldr_stream_wait")
            b._streams.setdefault(_stream_pointer(stream), None)
        _, itemsize, code = _lib.DTYPES[t.dtype]
        device_type, device_id = self.__dlpack_device__()
        shape = [t.shape[d] for d in range(t.ndim)]
        return _dlpack.capsule(t.data, shape, code, itemsize * 8, device_type, device_id)


class Batch(collections.abc.Mapping):
    """One delivered batch: tensor name -> tensor (torch.Tensor, or a
    read-only numpy array where the loader delivers numpy).

    Attributes: seq (0, 1, ... since attach), epoch, index (batch within the
    epoch), rows, last_in_epoch, device ("cpu" or "cuda:N").

    Valid until released: when the loader is asked for the next batch, or
    by release(). The tensors are views, not copies; clone what must
    outlive the step. A released batch raises BatchReleasedError.
    """

    def __init__(self, loader, cbatch):
        self._loader = loader
        self._lib = loader._lib
        self._c = cbatch
        self._names = [cbatch.tensors[i].name.decode() for i in range(cbatch.n_tensors)]
        self._tensors = {}
        self._streams = {}  # streams the tensors were exported to (ordered set)
        self._released = False
        self.seq, self.epoch, self.index = cbatch.seq, cbatch.epoch, cbatch.index
        self.rows = cbatch.rows
        self.last_in_epoch = bool(cbatch.last_in_epoch)
        ordinal = loader._ordinal
        self.device = "cpu" if ordinal is None else "cuda:%d" % ordinal

    def _check_live(self, what):
        if self._released:
            raise BatchReleasedError(
                "loaderd: cannot %s: batch %d (epoch %d, index %d) was released, and its slot "
                "now holds other data" % (what, self.seq, self.epoch, self.index))

    @property
    def released(self):
        return self._released

    # Mapping
    def __getitem__(self, name):
        self._check_live("read tensor %r" % (name,))
        t = self._tensors.get(name)
        if t is None:
            try:
                i = self._names.index(name)
            except ValueError:
                raise KeyError("loaderd: batch has no tensor %r (it has %s)" %
                               (name, ", ".join(self._names))) from None
            t = self._loader._convert(self, i)
            self._tensors[name] = t
        return t

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def __repr__(self):
        state = "released" if self._released else self.device
        return "<loaderd.Batch seq=%d epoch=%d index=%d rows=%d tensors=%s %s>" % (
            self.seq, self.epoch, self.index, self.rows, ",".join(self._names), state)

    def dlpack(self, name):
        """The DLPack producer of one tensor, for frameworks other than
        torch: cupy.from_dlpack(batch.dlpack("image"))."""
        self._check_live("export tensor %r" % (name,))
        if name not in self._names:
            raise KeyError("loaderd: batch has no tensor %r (it has %s)" %
                           (name, ", ".join(self._names)))
        return _Exporter(self, self._names.index(name))

    def _single(self):
        if len(self._names) != 1:
            raise TypeError("loaderd: the batch has %d tensors (%s): export one with "
                            "batch.dlpack(name)" % (len(self._names), ", ".join(self._names)))
        return _Exporter(self, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A batch of one tensor is itself a DLPack producer."""
        return self._single().__dlpack__(stream=stream, max_version=max_version,
                                         dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self._single().__dlpack_device__()

    def sample_indices(self):
        """Dataset index of each row."""
        self._check_live("read sample indices")
        client = self._loader._client
        return [self._lib.ldr_sample_index(client, ctypes.byref(self._c), r) for r in range(self.rows)]

    def release(self, stream=None):
        """Hands the slot back to the daemon. GPU delivery: the slot is
        reused once the work enqueued so far on every stream the tensors
        were exported to (or on `stream`, a cudaStream_t handle, when
        given) is done. Releasing twice does nothing. A failed release fails
        the loader (raised once); the batch counts as consumed either way."""
        if self._released:
            return
        self._released = True
        self._tensors.clear()
        loader = self._loader
        if loader._current is self:
            loader._current = None
        if loader._client is None:
            return  # closed: the daemon took the slot back with the connection
        if stream is not None:
            streams = [_stream_pointer(stream)]
        else:
            streams = list(self._streams) or [None]
        array = (ctypes.c_void_p * len(streams))(*streams)
        rc = self._lib.ldr_release_streams(loader._client, ctypes.byref(self._c), array, len(streams))
        if rc < 0 and loader._failure is None:
            loader._fail(rc, "release of batch %d of pipeline %r" % (self.seq, loader.pipeline))


class _EpochIterator:
    """Batches until the end of the epoch the stream is in."""

    def __init__(self, loader):
        self._loader = loader
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        loader = self._loader
        if loader._current is not None:
            last = loader._current.last_in_epoch
            loader._current.release()
            if last:
                self._done = True
        if self._done:
            raise StopIteration
        return loader._next_batch()


class Loader:
    """One attachment to a loaderd pipeline.

    Loader(pipeline, *, socket=None, device=None, rank=None, world_size=None,
           state=None, depth=0, timeout=None, framework=None, name=None)

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
    - framework: "torch" or "numpy" (host delivery only); default torch when
      it can be imported.
    - name: how `loaderctl status` shows this client (escaped there: any
      text, up to 63 bytes of UTF-8).
    """

    def __init__(self, pipeline, *, socket=None, device=None, rank=None, world_size=None,
                 state=None, depth=0, timeout=None, framework=None, name=None):
        self._lib = _lib.load()
        self._client = None
        self._current = None
        self._failure = None   # the error that failed the attachment, raised again by next()
        self._position = None  # token of the position after the last batch handed out
        if framework not in (None, "torch", "numpy"):
            raise ValueError("loaderd: framework %r: expected \"torch\" or \"numpy\"" % (framework,))
        self._torch = _torch() if framework != "numpy" else None
        if framework == "torch" and self._torch is None:
            raise ImportError("loaderd: framework=\"torch\" but torch cannot be imported")
        self.pipeline = pipeline
        self._socket = socket
        self.rank, self.world_size = default_rank_world(rank, world_size)
        self._ordinal = _device_ordinal(device, self._torch)
        if self._ordinal is not None and self._torch is None and framework == "numpy":
            raise ValueError("loaderd: numpy arrays cannot hold GPU memory: use device=\"cpu\", "
                             "or batch.dlpack(name) with a GPU framework")
        self._np = None
        if self._torch is None:
            import numpy
            self._np = numpy
        self._depth = depth
        self._timeout_ms = -1 if timeout is None else max(0, int(timeout * 1000))
        self._name = name or "python:%d" % os.getpid()
        resume = None
        if state is not None:
            resume = self._state_position(state)
        self._client = self._attach(resume)
        self._position = self._token(self._lib.ldr_position, self._client)

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
            pipeline=self.pipeline.encode(), rank=self.rank, world=self.world_size,
            depth=self._depth, resume=resume.encode() if resume else None,
            client_name=self._name.encode(),
            device=None if self._ordinal is None else str(self._ordinal).encode())
        rc = lib.ldr_attach(handle, ctypes.byref(opts))
        if rc < 0:
            message = "loaderd: " + (lib.ldr_error(handle) or b"").decode(errors="replace")
            lib.ldr_close(handle)
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
        failed one too); a refused position leaves the loader as it was."""
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

    def _drop(self):
        """Releases the current batch and detaches; raises nothing (the
        daemon takes back what it held when the connection goes)."""
        if self._current is not None:
            try:
                self._current.release()
            except LoaderdError:
                pass
        if self._client is not None:
            self._lib.ldr_close(self._client)
            self._client = None

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
        return _parse_position(self._position)[2]

    def __len__(self):
        """Batches this rank gets in the epoch the stream is in (the first
        epoch after a mid-epoch resume has fewer)."""
        return self._lib.ldr_batches_in_epoch(self._live(), self.epoch)

    # -- iteration ---------------------------------------------------------

    def __iter__(self):
        """Batches to the end of the current epoch; the next iter()
        continues with the next epoch."""
        self._live()
        return _EpochIterator(self)

    def _next_batch(self):
        client = self._live()
        self._raise_failure()
        if self._current is not None:
            self._current.release()
        cbatch = _lib.CBatch()
        waited_ms = 0
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
            self._fail(rc, "next batch of pipeline %r" % self.pipeline)
        # Taken now, while the batch is held: exact whatever becomes of the daemon.
        self._position = self._token(self._lib.ldr_position_after, client, ctypes.byref(cbatch))
        self._current = Batch(self, cbatch)
        return self._current

    def _convert(self, batch, i):
        """Tensor i of the batch in the loader's framework."""
        exporter = _Exporter(batch, i)
        if self._torch is not None:
            try:
                return self._torch.utils.dlpack.from_dlpack(exporter)
            except (RuntimeError, TypeError, BufferError) as e:
                t = batch._c.tensors[i]
                raise LoaderdError(errno.EINVAL, "loaderd: torch %s cannot take tensor %r (%s): %s" % (
                    self._torch.__version__, batch._names[i], _lib.DTYPES[t.dtype][0], e)) from e
        t = batch._c.tensors[i]
        dtype = self._np.dtype(_lib.DTYPES[t.dtype][0])
        raw = (ctypes.c_char * t.bytes).from_address(t.data)
        array = self._np.frombuffer(raw, dtype=dtype).reshape([t.shape[d] for d in range(t.ndim)])
        array.flags.writeable = False
        return array

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
        seed, n, current, _ = _parse_position(self._position)
        if epoch == current:
            return
        if epoch < 0:
            raise ValueError("loaderd: epoch %d: epochs count from 0" % epoch)
        self._reattach("ldr1:%d:%d:%d:0" % (seed, n, epoch))

    def state_dict(self):
        """The position after the last batch handed out (the current one
        counts as consumed), for load_state_dict() or Loader(state=...).
        Exact also after the daemon failed the loader, and after close()."""
        return {"version": STATE_VERSION, "pipeline": self.pipeline, "position": self._position,
                "rank": self.rank, "world_size": self.world_size}

    def _state_position(self, state):
        if not isinstance(state, collections.abc.Mapping) or "position" not in state:
            raise ValueError("loaderd: a loader state is the dict state_dict() returns; got %r" %
                             (state,))
        if state.get("version", STATE_VERSION) != STATE_VERSION:
            raise ValueError("loaderd: loader state version %r; this package reads version %d" %
                             (state.get("version"), STATE_VERSION))
        if state.get("pipeline", self.pipeline) != self.pipeline:
            raise ValueError("loaderd: the state was saved from pipeline %r, this loader reads %r" %
                             (state["pipeline"], self.pipeline))
        return str(state["position"])

    def load_state_dict(self, state):
        """Resumes after the last batch of a saved state. A state saved by a
        job of another world size resumes the rest of its epoch re-sharded
        over this job's ranks. A refused state leaves the loader as it was."""
        self._reattach(self._state_position(state))


def status(socket=None):
    """The daemon's status text (what `loaderctl status` prints)."""
    lib = _lib.load()
    text = ctypes.c_void_p()
    err = ctypes.create_string_buffer(512)
    rc = lib.ldr_status(None if socket is None else os.fsencode(socket), ctypes.byref(text), err,
                        len(err))
    if rc < 0:
        raise DaemonUnavailableError(-rc, "loaderd: " + (err.value.decode(errors="replace") or
                                                         os.strerror(-rc)))
    try:
        return ctypes.string_at(text).decode()
    finally:
        lib.free(text)
