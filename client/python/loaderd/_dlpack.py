# SPDX-License-Identifier: Apache-2.0
"""_dlpack: DLPack capsules for memory loaderd owns, built with ctypes.

A capsule named "dltensor" holds a DLManagedTensor (dlpack.h, the
unversioned ABI every consumer reads). The consumer (torch.from_dlpack,
cupy.from_dlpack, jax.dlpack.from_dlpack) renames the capsule to
"used_dltensor" and calls the tensor's deleter when its own tensor dies; a
capsule nobody consumed calls the deleter from its destructor. Either way
the deleter drops the Python objects that hold the struct and calls the
capsule's on_delete: that is how a batch learns that the last tensor
viewing its slot is gone (batch.py), and only then hands the slot back.

The deleter runs wherever the consumer's tensor dies: in the consumer's
destructor, on any thread, during garbage collection. on_delete must
therefore be quick and must not call into the C library (its handle is
used by one thread at a time): batch.py only counts and queues there.
"""

import ctypes

KDL_CPU = 1
KDL_CUDA = 2

# The stream values DLPack reserves for CUDA (the array API's __dlpack__).
STREAM_LEGACY = 1       # the legacy default stream
STREAM_PER_THREAD = 2   # the per-thread default stream
STREAM_NO_SYNC = -1     # the consumer orders the work itself


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

_NAME = b"dltensor"
_live = {}  # address of a DLManagedTensor -> (the ctypes objects behind it, on_delete)


def _forget(address):
    entry = _live.pop(address, None)
    if entry is not None and entry[2] is not None:
        entry[2]()


@_DELETER
def _delete(managed):
    _forget(ctypes.addressof(managed.contents))


_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # Still named "dltensor": never consumed, so the deleter is ours to call.
    if _api.PyCapsule_IsValid(capsule, _NAME):
        _forget(_api.PyCapsule_GetPointer(capsule, _NAME))


def capsule(data, shape, dtype_code, bits, device_type, device_id, on_delete=None):
    """A "dltensor" capsule describing the compact row-major array of the
    given shape at address `data`; on_delete() is called once, when the
    consumer's tensor dies (or the capsule, never consumed, does)."""
    managed = DLManagedTensor()
    dims = (ctypes.c_int64 * len(shape))(*shape)
    t = managed.dl_tensor
    t.data = data
    t.device = DLDevice(device_type, device_id)
    t.ndim = len(shape)
    t.dtype = DLDataType(dtype_code, bits, 1)
    t.shape = dims
    t.strides = None  # compact, row-major
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _delete
    address = ctypes.addressof(managed)
    _live[address] = (managed, dims, on_delete)
    return _api.PyCapsule_New(address, _NAME, _capsule_destructor)
