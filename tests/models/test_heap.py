"""keep_freed_memory: a tensor freed stays in the process for the next one, instead of going back to the kernel."""

from __future__ import annotations

import json
import subprocess
import sys

STEP = """
import ctypes, json, sys
from trajkit.models.heap import keep_freed_memory

class Mallinfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Mallinfo2
if sys.argv[1] == "keep":
    assert keep_freed_memory() and keep_freed_memory()
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
a = libc.malloc(8 << 20)  # a step's activation (torch's CPU tensors come from malloc too)
ctypes.memset(a, 1, 8 << 20)
during = libc.mallinfo2()
libc.free(a)
after = libc.mallinfo2()
print(json.dumps({"mapped": during.hblkhd, "free_kept": after.fordblks + after.keepcost}))
"""


def one_step(mode: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", STEP, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_a_freed_tensor_stays_in_the_process_for_the_next():
    default, kept = one_step("default"), one_step("keep")
    mib8 = 8 << 20
    # glibc's default: an 8 MiB block is mapped anew, and unmapped (its pages zeroed again next time) once freed
    assert default["mapped"] >= mib8 and default["free_kept"] < mib8, default
    assert kept["mapped"] < mib8 and kept["free_kept"] >= mib8, kept
