# SPDX-License-Identifier: Apache-2.0
"""batch: Batch (one delivered batch: its tensors in output order, also
reachable by name) and _Exporter (one of its tensors as a DLPack producer).

A batch belongs to the Loader that handed it out (loader.py states the
stream rules). Its tensors are views of the daemon's memory: the batch's
slot stays held, and its data unchanged, for as long as one of them is
alive. Each export of a tensor is a DLPack capsule whose deleter tells the
batch when the consumer's tensor dies (_dlpack.py); when the loader moves
past a batch (its next batch, a new epoch, close()), the batch is released
at once if no view of it is alive, else kept until the last one dies, and
released then by the loader's next call. The release goes through the
attachment that delivered the batch, which the loader keeps open (after
set_epoch(), load_state_dict() or close()) until its kept batches are
released.
"""

import ctypes
import errno

from . import _dlpack, _lib
from .errors import BatchReleasedError, LoaderdError


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
        b._view_born()
        try:
            return _dlpack.capsule(t.data, shape, code, itemsize * 8, device_type, device_id,
                                   on_delete=b._view_died)
        except BaseException:
            b._view_died()
            raise


class Batch:
    """One delivered batch: its tensors (torch.Tensor, or read-only numpy
    arrays where the loader delivers numpy), in the pipeline's output
    order, also reachable by name.

    Like a tuple, a batch unpacks and iterates over its tensors:
    `image, label = batch`, `for image, label in loader`, batch[0]. Like a
    dict, it is read by name: batch["image"], keys() (the names in output
    order), values(), items(), get(), `"image" in batch`, dict(batch). It
    is not a collections.abc.Mapping: a mapping's iteration yields its
    keys, and code written for mappings would take the tensors for names.

    Attributes: seq (0, 1, ... since attach), epoch, index (batch within the
    epoch), rows, last_in_epoch, device ("cpu" or "cuda:N").

    Lifetime: the tensors are views of the daemon's memory, not copies, and
    never change while alive. A tensor kept past the loader's next batch
    keeps its whole batch's slot held (a batch of the prefetch depth);
    clone() what is kept for long. Host tensors of torch are writable: a
    write changes this process's copy of the page only, dropped when the
    batch is released. release() hands the slot back at once, views or not;
    a released batch raises BatchReleasedError.
    """

    def __init__(self, loader, cbatch):
        self._loader = loader
        self._lib = loader._lib
        self._client = loader._client  # the attachment that delivered it, which releases it
        self._c = cbatch
        self._names = [cbatch.tensors[i].name.decode() for i in range(cbatch.n_tensors)]
        self._tensors = {}
        self._streams = {}  # streams the tensors were exported to (ordered set)
        self._released = False
        self._views = 0      # exported tensors alive (under loader._views_lock)
        self._kept = False   # the loader moved past it while views were alive
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

    # -- views (the DLPack deleter's side: any thread, no C call) -----------

    def _view_born(self):
        with self._loader._views_lock:
            self._views += 1

    def _view_died(self):
        loader = self._loader
        with loader._views_lock:
            self._views -= 1
            gone = self._views == 0 and self._kept and not self._released
        if gone:
            loader._view_gone(self)

    # -- a tuple of tensors, read by name ----------------------------------

    def __getitem__(self, key):
        if isinstance(key, str):
            self._check_live("read tensor %r" % (key,))
            t = self._tensors.get(key)
            if t is None:
                try:
                    i = self._names.index(key)
                except ValueError:
                    raise KeyError("loaderd: batch has no tensor %r (it has %s)" %
                                   (key, ", ".join(self._names))) from None
                t = self._convert(i)
                self._tensors[key] = t
            return t
        if isinstance(key, int) and not isinstance(key, bool):
            n = len(self._names)
            if not -n <= key < n:
                raise IndexError("loaderd: tensor %d: the batch has %d (%s)" %
                                 (key, n, ", ".join(self._names)))
            return self[self._names[key]]
        raise TypeError("loaderd: a batch is read by tensor name or position, not %s" %
                        type(key).__name__)

    def __iter__(self):
        """The tensors in output order (keys() gives the names)."""
        return iter([self[name] for name in self._names])

    def __len__(self):
        return len(self._names)

    def __contains__(self, name):
        return name in self._names

    def keys(self):
        """The tensor names in output order."""
        return dict.fromkeys(self._names).keys()

    def values(self):
        return [self[name] for name in self._names]

    def items(self):
        return [(name, self[name]) for name in self._names]

    def get(self, name, default=None):
        return self[name] if name in self._names else default

    def __repr__(self):
        state = "released" if self._released else self.device
        return "<loaderd.Batch seq=%d epoch=%d index=%d rows=%d tensors=%s %s>" % (
            self.seq, self.epoch, self.index, self.rows, ",".join(self._names), state)

    def _convert(self, i):
        """Tensor i in the loader's framework, through DLPack: a torch
        tensor, or a read-only numpy array."""
        torch, t = self._loader._torch, self._c.tensors[i]
        if torch is not None:
            try:
                return torch.utils.dlpack.from_dlpack(_Exporter(self, i))
            except (RuntimeError, TypeError, BufferError) as e:
                raise LoaderdError(errno.EINVAL, "loaderd: torch %s cannot take tensor %r (%s): %s" % (
                    torch.__version__, self._names[i], _lib.DTYPES[t.dtype][0], e)) from e
        array = self._loader._np.from_dlpack(_Exporter(self, i))
        array.flags.writeable = False  # the arena is mapped read-only for numpy
        return array

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
        client = self._client
        return [self._lib.ldr_sample_index(client, ctypes.byref(self._c), r) for r in range(self.rows)]

    def release(self, stream=None):
        """Hands the slot back to the daemon now, whether or not tensors of
        the batch are still alive (they then show other data: clone() first
        what must outlive it). GPU delivery: the slot is reused once the
        work enqueued so far on every stream the tensors were exported to
        (or on `stream`, a cudaStream_t handle, when given) is done.
        Releasing twice does nothing. A failed release fails the loader
        (raised once); the batch counts as consumed either way."""
        if self._released:
            return
        self._released = True
        self._tensors.clear()
        loader = self._loader
        if loader._current is self:
            loader._current = None
        loader._forget_kept(self)
        client = self._client
        if client is not loader._client and all(client is not h for h in loader._retired):
            return  # closed: the daemon took the slot back with the connection
        if stream is not None:
            streams = [_stream_pointer(stream)]
        else:
            streams = list(self._streams) or [None]
        array = (ctypes.c_void_p * len(streams))(*streams)
        rc = self._lib.ldr_release_streams(client, ctypes.byref(self._c), array, len(streams))
        if rc < 0 and client is loader._client and loader._failure is None:
            loader._fail(rc, "release of batch %d of pipeline %r" % (self.seq, loader.pipeline))
