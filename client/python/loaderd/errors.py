# SPDX-License-Identifier: Apache-2.0
"""errors: what the loaderd package raises.

Every error from the daemon or the client library is a LoaderdError (a
RuntimeError) whose message is the daemon's own (it names the pipeline,
file, token or limit involved) and whose errno is the C library's.
"""


class LoaderdError(RuntimeError):
    def __init__(self, errno, message):
        super().__init__(message)
        self.errno = errno
        self.message = message


class PipelineNotFoundError(LoaderdError, LookupError):
    """The daemon has no pipeline of that name."""


class DeviceUnavailableError(LoaderdError):
    """GPU delivery was asked for and the daemon or this process cannot do
    it (no GPU, no driver, no such device)."""


class DaemonUnavailableError(LoaderdError, ConnectionError):
    """No daemon at the socket, or it went away."""


class AttachTimeoutError(LoaderdError, TimeoutError):
    """The daemon did not answer the attach within attach_timeout; while
    it is still starting, the message says what it is doing ("daemon is
    starting: pipeline train: listing /data/train: 1,200,000 files so
    far, 12.0 s; ...")."""


class BatchReleasedError(LoaderdError):
    """A batch was used after it was released."""

    def __init__(self, message):
        super().__init__(0, message)
