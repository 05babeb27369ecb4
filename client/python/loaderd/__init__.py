# SPDX-License-Identifier: Apache-2.0
"""loaderd: batches from the loaderd daemon as framework tensors.

    import loaderd
    loader = loaderd.Loader("train")            # rank, world size, GPU: from the job
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for image, label in loader:             # or batch["image"], batch["label"]
            step(image, label)

Pure Python over the C client library (libloaderd_client.so, through
ctypes). See loader.py for the lifetime and stream rules.
"""

from .errors import (AttachTimeoutError, BatchReleasedError, DaemonUnavailableError,
                     DeviceUnavailableError, LoaderdError, PipelineNotFoundError)
from .batch import Batch
from .loader import Loader, default_rank_world, status

__version__ = "0.1.0"
__all__ = ["AttachTimeoutError", "Batch", "BatchReleasedError", "DaemonUnavailableError",
           "DeviceUnavailableError", "Loader", "LoaderdError", "PipelineNotFoundError",
           "default_rank_world", "status"]
