"""Whether a path is a file an export can be: a regular file on a disk, not one of the
kernel's interfaces (procfs, sysfs: `/proc/kmsg` is a regular file to stat whose read waits
for the next kernel message, and takes it from the system log), and not a FIFO, socket or
device, whose open or read can wait forever. Checked before a byte is read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

# File systems whose files are the kernel's (or a driver's) interfaces, not stored bytes.
KERNEL_FILE_SYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "debugfs",
        "tracefs",
        "securityfs",
        "configfs",
        "cgroup",
        "cgroup2",
        "pstore",
        "efivarfs",
        "bpf",
        "devpts",
        "fusectl",
        "binfmt_misc",
        "mqueue",
        "selinuxfs",
        "nsfs",
        "rpc_pipefs",
    }
)
MOUNT_TABLE = Path("/proc/self/mountinfo")


def kernel_file_system(found: os.stat_result) -> str | None:
    """The name of the kernel interface file system the stat's file is on (`proc`, `sysfs`),
    or None for any other (or where the mount table cannot be read)."""
    device = f"{os.major(found.st_dev)}:{os.minor(found.st_dev)}"
    try:
        lines = MOUNT_TABLE.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        # id parent major:minor root mount-point options [tags] - type source super-options
        fields = line.split()
        if len(fields) > 2 and fields[2] == device and " - " in line:
            kind = line.split(" - ", 1)[1].split()[:1]
            if kind and kind[0] in KERNEL_FILE_SYSTEMS:
                return kind[0]
    return None


def not_a_plain_file(path: Path) -> str | None:
    """Why the path's target cannot be an export without reading it (a FIFO, socket or
    device; a file of procfs or sysfs), as the words after `path: is`, or None. A path that
    does not exist or cannot be stat'ed is None: the read that follows names it."""
    try:
        found = path.stat()
    except (OSError, ValueError):
        return None
    return _kind_problem(found)


def _kind_problem(found: os.stat_result) -> str | None:
    if stat.S_ISDIR(found.st_mode):
        return None  # named by the caller, with the exports inside
    if not stat.S_ISREG(found.st_mode):
        return "not a regular file (a FIFO, socket or device)"
    kernel = kernel_file_system(found)
    if kernel is not None:
        return f"a file of the kernel's {kernel} interface, not a file on a disk"
    return None


class NotAPlainFile(Exception):
    """The file opened is not a plain one (its words as not_a_plain_file gives them)."""


def read_head(path: Path, size: int) -> bytes:
    """The file's first `size` bytes, opened without waiting (O_NONBLOCK: a FIFO put in the
    path's place after it was checked neither blocks the open nor is read). Raises OSError,
    or NotAPlainFile when what was opened is no plain file."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        problem = _kind_problem(os.fstat(descriptor))
        if problem is not None:
            raise NotAPlainFile(problem)
        return os.read(descriptor, size)
    finally:
        os.close(descriptor)
