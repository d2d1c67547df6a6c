"""A non-root run keeps the namespaces and seccomp (through a user namespace); what only root can give
(a uid of its own, usually the cgroup) stops the start in one line unless --allow-weaker-sandbox."""

from __future__ import annotations

import json
import os
import uuid

from tests.nonroot import nobody_folder, run_as_nobody

NOBODY_RUN = """
import json, os, socket
from trajkit.verify import Sandbox, SandboxUnavailable, verify

found = {"uid": os.getuid()}
try:
    Sandbox(workers=1).start().close()
except SandboxUnavailable as exc:
    found["refused"] = str(exc)
listener = socket.create_server(("127.0.0.1", 0))  # a service on the host's loopback
hostile = '''
import ctypes, json, os, socket, time
libc = ctypes.CDLL(None, use_errno=True)
found = {"tmp": sorted(os.listdir("/tmp")), "checkout": os.listdir(CHECKOUT)}
try:
    open("/tmp/MARKER", "w").write("x")  # in the private /tmp
except OSError as exc:
    found["write"] = exc.errno  # EROFS where the environment lives under /tmp (then its own /tmp is elsewhere)
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2)
    found["network"] = "connected"
except OSError as exc:
    found["network"] = exc.errno
found["caps"] = open("/proc/self/status").read().split("CapEff:")[1].split()[0]
found["remount"] = (libc.mount(None, b"/", None, 32 | 4096, None), ctypes.get_errno())  # read-only kept
found["userns"] = (libc.unshare(0x10000000), ctypes.get_errno())
found["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps(found))
if os.fork() == 0:  # a daemon, killed when the run ends
    os.setsid()
    time.sleep(60)
'''
with Sandbox(workers=1, allow_weaker=True) as sandbox:
    found["missing"] = sorted(sandbox.missing)
    tests = {"kind": "unit_tests", "spec": {"test": "assert double(4) == 8", "timeout_s": 5}}
    found["right"] = verify(tests, "def double(x):\\n    return 2 * x", sandbox=sandbox).verdict
    found["wrong"] = verify(tests, "def double(x):\\n    return x", sandbox=sandbox).verdict
    program = hostile.replace("MARKER", MARKER).replace("PORT", str(listener.getsockname()[1]))
    r = sandbox.run(program.replace("CHECKOUT", repr(CHECKOUT)))
    found["hostile"] = r.stdout if r.verdict == "pass" else r.stderr
    found["after"] = sandbox.run("import os\\nprint(len([p for p in os.listdir('/proc') if p.isdigit()]))").stdout
print(json.dumps(found))
"""


def test_a_non_root_run_keeps_namespaces_and_seccomp():
    marker = f"trajkit-nonroot-{uuid.uuid4().hex}"
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with nobody_folder() as folder:
        script = f"MARKER = {marker!r}\nCHECKOUT = {checkout!r}\n{NOBODY_RUN}"
        done = run_as_nobody(script, folder)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["uid"] == 65534
    # refused without the flag, in one line naming what only root can give (the cgroup where not delegated)
    refused = found["refused"]
    assert refused.startswith("sandbox: this machine cannot give ") and "--allow-weaker-sandbox" in refused
    assert "uid" in refused and "\n" not in refused
    assert "uid" in found["missing"] and set(found["missing"]) <= {"uid", "cgroup"}
    assert (found["right"], found["wrong"]) == ("pass", "fail")
    hostile = json.loads(found["hostile"])
    assert folder.name not in hostile["tmp"] and hostile.get("write", 30) == 30  # a private /tmp
    assert not os.path.exists(f"/tmp/{marker}")
    assert hostile["checkout"] in ([], [".venv"])  # hidden (the environment inside it bound back)
    assert hostile["network"] == 97  # EAFNOSUPPORT: only Unix sockets (and an empty network namespace)
    assert hostile["caps"] == "0000000000000000"  # the user namespace's capabilities are not the program's
    assert hostile["remount"] == hostile["userns"] == [-1, 1]  # EPERM both
    assert hostile["pids"][0] == 1 and len(hostile["pids"]) <= 3  # its own pid namespace
    assert found["after"] == "2\n"  # its daemon was killed with its run: the zygote and the next program


MASKED = """
from trajkit.verify import Sandbox, SandboxUnavailable
try:
    Sandbox(workers=1).start().close()
except SandboxUnavailable as exc:
    print(exc)
with Sandbox(workers=1, allow_weaker=True) as sandbox:
    print(sorted(sandbox.missing), sandbox.run("print('judged')").stdout.strip())
"""


def test_a_non_root_run_where_proc_is_masked_names_the_namespaces():
    """In a container that masks parts of /proc, a user namespace may not mount its own: the namespaces are
    named in the one line (not a traceback), and with the flag the pool runs on the fallback."""
    with nobody_folder() as folder:
        done = run_as_nobody(MASKED, folder, mask_proc=True)
    assert done.returncode == 0, done.stderr
    refused, (missing, judged) = done.stdout.splitlines()[0], done.stdout.splitlines()[1].rsplit(" ", 1)
    assert refused.startswith("sandbox: this machine cannot give ") and "\n" not in refused
    assert "mount_namespace, net_namespace, pid_namespace" in refused
    assert "may not mount its own /proc here" in refused and "--allow-weaker-sandbox" in refused
    assert "pid_namespace" in missing and judged == "judged"


FAMILY = """
import json
from tests.envs.servers import kernel
from tests.verify import test_reward_hacks as hacks
from tests.verify.test_hostile import SEARCH
from tests.verify.test_kernel import KERNEL, ORACLE, VALUE
from trajkit.verify import Sandbox, verify, verify_many

found = {}
unit = {**{f"right: {k}": v for k, v in hacks.RIGHT.items()}, **hacks.HACKS}
stdio = {**{f"right: {k}": v for k, v in hacks.STDIO_RIGHT.items()}, **hacks.STDIO_HACKS}
items = [(hacks.VERIFIER, c, None) for c in unit.values()] + [(hacks.STDIO, c, None) for c in stdio.values()]
with Sandbox(workers=2, allow_weaker=True) as sandbox:
    found["missing"] = sorted(sandbox.missing)
    results = dict(zip([*unit, *stdio], verify_many(items, sandbox=sandbox)))
    found["judged wrongly"] = [n for n, r in results.items() if (r.verdict == "pass") != n.startswith("right: ")]
    search = {"kind": "stdio", "spec": {"cases": [CASE], "timeout_s": 20}}
    found["search"] = verify(search, SEARCH, sandbox=sandbox).output_tail
with Sandbox(workers=1, allow_weaker=True) as one:
    found["leaks"] = {}
    for channel in kernel.PLANTS:
        one.run(KERNEL + f"\\nplant({VALUE}, ({channel!r},))")
        look = json.loads(one.run(KERNEL + "\\nimport json\\nprint(json.dumps(look()))").stdout)
        found["leaks"][channel] = [c for c, v in look.items() if v == VALUE]
    spec = {"test": "assert f(11) == 1\\nassert f(4) == 0\\nassert f(7) == 0\\nassert f(2) == 1", "timeout_s": 10}
    found["oracle"] = [verify({"kind": "unit_tests", "spec": spec}, KERNEL + ORACLE, sandbox=one).verdict for _ in range(16)]
print(json.dumps(found))
"""


def test_the_hostile_family_as_a_non_root_user():
    """Everything the hostile suites try, run by ``nobody`` (``--allow-weaker-sandbox``: no uid of its own): the
    reward hacks on both verifiers, the whole-filesystem search for expected outputs planted under /srv, every
    kernel channel from one run to the next, and the oracle attack over 16 runs (64 as root)."""
    import shutil

    key = uuid.uuid4().hex
    case = {"input": f"case-{key}", "output": f"expected-{key}"}
    planted = os.path.join("/srv", f"data-{key}")
    os.makedirs(planted)
    try:
        with open(os.path.join(planted, "tasks.jsonl"), "w") as f:
            f.write(json.dumps(case) + "\n")
        os.chmod(planted, 0o755)
        with nobody_folder() as folder:
            done = run_as_nobody(f"CASE = {case!r}\n{FAMILY}", folder, timeout_s=300)
    finally:
        shutil.rmtree(planted)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert set(found["missing"]) <= {"uid", "cgroup"}
    assert found["judged wrongly"] == []
    assert "nothing found" in found["search"]
    assert not any(found["leaks"].values()), found["leaks"]
    assert found["oracle"] == ["fail"] * 16  # (passes from the third run where a channel is open)
