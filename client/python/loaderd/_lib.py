# SPDX-License-Identifier: Apache-2.0
"""_lib: the C client library (client/loaderd.h) through ctypes.

The structs below mirror loaderd.h field for field; load() checks their
layout against the library's own sizeof(struct ldr_batch) and
sizeof(struct ldr_position) before anything else is called, so a
package and a library that disagree fail at import with a message, not
with corrupted batches or positions.

Where the library is looked for, first match wins:
  1. $LOADERD_CLIENT_LIB (a path to libloaderd_client.so);
  2. libloaderd_client.so next to this file (the build tree's staged
     package and an installed wheel carry it there);
  3. the dynamic linker's search path (libloaderd_client.so.0, as
     `cmake --install` puts it in the system's library directory).
"""

import ctypes
import os
import threading

TENSORS_MAX = 8
NDIM_MAX = 4
POSITION_MAX = 192
LIBRARY_NAME = "libloaderd_client.so"
ATTACH_WRITABLE = 0x1  # LDR_ATTACH_WRITABLE

_u64, _uint, _int, _str = ctypes.c_uint64, ctypes.c_uint, ctypes.c_int, ctypes.c_char_p


class AttachOpts(ctypes.Structure):
    _fields_ = [("pipeline", _str), ("rank", _uint), ("world", _uint), ("depth", _uint),
                ("resume", _str), ("client_name", _str), ("device", _str), ("split", _str),
                ("group", _str), ("group_size", _uint), ("flags", _uint), ("declaration", _str),
                ("job", _str)]


class CTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 32), ("dtype", _int), ("ndim", _uint),
                ("shape", ctypes.c_int64 * NDIM_MAX), ("data", ctypes.c_void_p),
                ("bytes", ctypes.c_size_t)]


class CBatch(ctypes.Structure):
    _fields_ = [("seq", _u64), ("epoch", _u64), ("index", _u64),
                ("rows", _uint), ("last_in_epoch", _int), ("on_device", _int), ("n_tensors", _uint),
                ("tensors", CTensor * TENSORS_MAX),
                ("priv_first", _u64), ("priv_epoch_offset", _u64),
                ("priv_slot", ctypes.c_uint32), ("priv_generation", ctypes.c_uint32)]


class CPosition(ctypes.Structure):
    _fields_ = [("seed", _u64), ("n_samples", _u64), ("epoch", _u64), ("offset", _u64),
                ("split", ctypes.c_uint32), ("reserved", ctypes.c_uint32), ("data", _u64),
                ("pipeline", ctypes.c_char * 64)]


class CStats(ctypes.Structure):
    _fields_ = [("batches", _u64), ("wait_ns", _u64), ("decoding", _int),
                ("decode_why_not", ctypes.c_char * 256), ("decoded_batches", _u64),
                ("images_gpu", _u64), ("images_cpu", _u64), ("images_bad", _u64),
                ("submit_ns", _u64), ("thread_cpu_ns", _u64), ("decode_wait_ns", _u64),
                ("decode_late_ns", _u64)]


# enum ldr_dtype -> (name, itemsize, DLPack type code: 0 int, 1 uint, 2 float)
DTYPES = {
    1: ("uint8", 1, 1),
    2: ("uint16", 2, 1),
    3: ("uint32", 4, 1),
    4: ("int32", 4, 0),
    5: ("int64", 8, 0),
    6: ("float16", 2, 2),
    7: ("float32", 4, 2),
}

_P = ctypes.POINTER
_CLIENT = ctypes.c_void_p  # struct ldr_client *, opaque
_SIGNATURES = {
    # name: (restype, argtypes)
    "ldr_connect": (ctypes.c_int, [ctypes.c_char_p, _P(_CLIENT)]),
    "ldr_set_attach_timeout": (ctypes.c_int, [_CLIENT, ctypes.c_int]),
    "ldr_attach": (ctypes.c_int, [_CLIENT, _P(AttachOpts)]),
    "ldr_dataset_size": (ctypes.c_uint64, [_CLIENT]),
    "ldr_batch_size": (ctypes.c_uint, [_CLIENT]),
    "ldr_batches_in_epoch": (ctypes.c_uint64, [_CLIENT, ctypes.c_uint64]),
    "ldr_next": (ctypes.c_int, [_CLIENT, _P(CBatch), ctypes.c_int]),
    "ldr_release": (ctypes.c_int, [_CLIENT, _P(CBatch)]),
    "ldr_stream_wait": (ctypes.c_int, [_CLIENT, _P(CBatch), ctypes.c_void_p]),
    "ldr_release_streams": (ctypes.c_int, [_CLIENT, _P(CBatch), _P(ctypes.c_void_p), ctypes.c_uint]),
    "ldr_copy_to_host": (ctypes.c_int, [_CLIENT, _P(CBatch), ctypes.c_uint, ctypes.c_void_p]),
    "ldr_synchronize": (ctypes.c_int, [_CLIENT]),
    "ldr_device_uuid": (ctypes.c_char_p, [_CLIENT]),
    "ldr_sample_index": (ctypes.c_uint64, [_CLIENT, _P(CBatch), ctypes.c_uint]),
    "ldr_position": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.c_size_t]),
    "ldr_position_after": (ctypes.c_int, [_CLIENT, _P(CBatch), ctypes.c_char_p, ctypes.c_size_t]),
    "ldr_position_parse": (ctypes.c_int, [ctypes.c_char_p, _P(CPosition), ctypes.c_char_p, ctypes.c_size_t]),
    "ldr_position_format": (ctypes.c_int, [_P(CPosition), ctypes.c_char_p, ctypes.c_size_t]),
    "ldr_sizeof_batch": (ctypes.c_size_t, []),
    "ldr_sizeof_position": (ctypes.c_size_t, []),
    "ldr_get_stats": (ctypes.c_int, [_CLIENT, _P(CStats)]),
    "ldr_sizeof_stats": (ctypes.c_size_t, []),
    "ldr_error": (ctypes.c_char_p, [_CLIENT]),
    "ldr_close": (None, [_CLIENT]),
    "ldr_status": (ctypes.c_int, [ctypes.c_char_p, _P(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]),
    "ldr_status_json": (ctypes.c_int, [ctypes.c_char_p, _P(ctypes.c_void_p), ctypes.c_char_p,
                                       ctypes.c_size_t]),
}

_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("LOADERD_CLIENT_LIB")
    if env:
        return [("$LOADERD_CLIENT_LIB", env)]
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)
    found = [("next to the package", here)] if os.path.exists(here) else []
    return found + [("the library path", LIBRARY_NAME + ".0")]


def _open():
    tried = []
    for where, path in _candidates():
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s): %s" % (path, where, e))
    raise ImportError("loaderd: cannot load the client library; tried " + "; ".join(tried) +
                      ". Set LOADERD_CLIENT_LIB to the path of " + LIBRARY_NAME)


def load():
    """The library, loaded and checked once per process."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        lib = _open()
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                f = getattr(lib, name)
            except AttributeError:
                raise ImportError("loaderd: %s has no %s: it is older than this package" %
                                  (lib._name, name)) from None
            f.restype, f.argtypes = restype, argtypes
        for struct, ours, theirs in (("ldr_batch", CBatch, lib.ldr_sizeof_batch()),
                                     ("ldr_position", CPosition, lib.ldr_sizeof_position()),
                                     ("ldr_stats", CStats, lib.ldr_sizeof_stats())):
            if theirs != ctypes.sizeof(ours):
                raise ImportError("loaderd: %s lays out struct %s in %d bytes, this package in %d:"
                                  " they come from different versions" %
                                  (lib._name, struct, theirs, ctypes.sizeof(ours)))
        lib.free = ctypes.CDLL(None).free
        lib.free.argtypes, lib.free.restype = [ctypes.c_void_p], None
        _lib = lib
        return lib
