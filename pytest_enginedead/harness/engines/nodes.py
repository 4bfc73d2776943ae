"""The other nodes of an engine spread over several (vLLM's multi-node executor), on one machine.

The head (node 0) is the engine the harness always starts — ``vllm.LLM`` or the API
server — with ``--nnodes N --node-rank 0 --master-addr 127.0.0.1 --master-port P``.  Each
other node is vLLM's headless executor (``vllm_plugin.headless``) with ``--node-rank k
--headless``, started in a PID namespace of its own by util-linux's ``unshare --pid --fork
--mount-proc --kill-child``: its processes see only each other (its ``/proc`` is its own),
so nothing of a node can be judged from another's ``/proc``; the harness reads its ranks
from the progress they publish (``contract.progress``), in a directory of the run's that
every node reaches.  ``unshare`` the command, not ``os.unshare``: Python 3.11 has none,
and a PID namespace takes effect only for the children of a fork, which ``--fork`` makes,
while ``--mount-proc`` gives the node a ``/proc`` of its own.  The network stays shared
(loopback): vLLM's nodes reach each other at ``--master-addr`` and at ``VLLM_HOST_IP``,
both 127.0.0.1 here, as two machines would at their addresses.

Each node has its own scratch directory (what a machine's local disk would hold) and its
own cores: the cores the engine owns are split per node and per rank of it.  Stopping a
node is by pid: its namespace's first process (pid 1 inside it) is killed, and with it,
by the kernel, every process of the namespace; the root namespace still lists them all, so
the harness checks that none is left and removes the shared memory they had mapped.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping

import psutil

from ...compat import in_server, llm_config
from ...contract.control import Control, write_control
from ...contract.names import ENV_DIR, PROGRESS_DIR_ENV
from ...logic.planning.engines import DeadlineAndFaults, EngineSpec
from ...logic.planning.nodes import node_arguments, node_bindings
from ...logic.planning.ranks import BIND_ENV
from ...process import reading
from ...process.pinned import ProcRef
from ..judging.evidence import RunEvidence
from .cleanup import Survivor, mapped_shm, terminate, unlink_shm
from .environment import engine_arguments, owned_cores, process_environment
from .reaper import Reaper

#: every node reaches the others here on one machine
LOOPBACK = "127.0.0.1"

#: vLLM's variable for the address its other nodes reach this one at
HOST_IP_ENV = "VLLM_HOST_IP"

#: the module a headless node runs
HEADLESS_MODULE = "pytest_enginedead.vllm_plugin.headless"


def free_port() -> int:
    """A TCP port on the loopback nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def namespace_command(argv: list[str]) -> list[str]:
    """``argv`` in a PID namespace (and a mount namespace for its own ``/proc``) of its own.

    Root makes the namespaces itself; anyone else asks a user namespace for the right to.
    ``--kill-child``: if ``unshare`` dies, its child (the namespace's first process) is
    killed, and the namespace with it.
    """
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", "--mount-proc", "--kill-child", *argv]


def namespace_pid(pid: int) -> int | None:
    """The pid a process has inside its own PID namespace (the last of ``NSpid``), or None."""
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    return None


class Node:
    """One headless node: ``unshare`` and the process tree in its namespace."""

    def __init__(self, index: int, proc: subprocess.Popen[bytes], log_path: str, scratch: str) -> None:
        self.index = index
        self.proc = proc
        self.log_path = log_path
        self.scratch = scratch
        self.procs: list[ProcRef] = []

    def adopt(self) -> None:
        """Record ``unshare`` and every process below it (seen from the root namespace)."""
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            known = {r.pid for r in self.procs}
            for proc in [root, *root.children(recursive=True)]:
                if proc.pid not in known:
                    with contextlib.suppress(psutil.Error):
                        self.procs.append(ProcRef.of(proc))

    @property
    def init(self) -> ProcRef | None:
        """The namespace's first process (pid 1 inside it): ``unshare``'s child."""
        return next((r for r in self.procs[1:] if _parent(r) == self.proc.pid), None)

    def exited(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError), open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
        return "(no output)"


def _parent(ref: ProcRef) -> int | None:
    proc = ref.process(zombie=True)
    with contextlib.suppress(psutil.Error):
        return proc.ppid() if proc is not None else None
    return None


class NodeSet:
    """The headless nodes of one engine, and what they share with the head: the master's address,
    the progress directory, the control."""

    def __init__(self, spec: EngineSpec, run_dir: str, reaper: Reaper | None = None) -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.progress_dir = os.path.join(run_dir, "progress")
        os.makedirs(self.progress_dir, exist_ok=True)
        self.master_addr = LOOPBACK
        self.master_port = 0
        self.nodes: list[Node] = []
        self.shm: set[str] = set()
        self._reaper = reaper
        self._key = f"{run_dir}#nodes"

    # --- what the head is told -------------------------------------------------------

    def bindings(self, cores: list[int]) -> list[str]:
        return node_bindings(cores, self.spec.nodes, self.spec.ranks)

    def head_arguments(self) -> dict[str, object]:
        if not self.master_port:
            self.master_port = free_port()
        return node_arguments(0, self.spec.nodes, self.master_addr, self.master_port)

    def head_environment(self, cores: list[int] | None) -> dict[str, str]:
        env = {PROGRESS_DIR_ENV: self.progress_dir, HOST_IP_ENV: LOOPBACK}
        if cores is not None:
            env[BIND_ENV] = self.bindings(cores)[0]
        return env

    def instruct(self, control: Control) -> None:
        """The control every node's workers read (they reach the progress directory, not the run's)."""
        write_control(self.progress_dir, control)

    # --- the nodes ------------------------------------------------------------------

    def launch(self, head_env: Mapping[str, str], engine_args: Mapping[str, object],
               cores: list[int] | None) -> None:
        """Start every node but the head, each in its namespace, with the head's engine arguments."""
        self.head_arguments()
        bindings = self.bindings(cores) if cores is not None else None
        for k in range(1, self.spec.nodes):
            scratch = os.path.join(self.run_dir, f"node-{k}")
            os.makedirs(scratch, exist_ok=True)
            env = {**head_env, ENV_DIR: scratch, **llm_config.scratch_environment(scratch, os.environ)}
            if bindings is not None:
                env[BIND_ENV] = bindings[k]
            kwargs = llm_config.llm_kwargs(self.spec.model, self.spec.max_num_seqs, {
                **engine_args, **node_arguments(k, self.spec.nodes, self.master_addr, self.master_port)})
            flags = [word for key, value in kwargs.items() for word in in_server.server_tokens(key, value)]
            log_path = os.path.join(self.run_dir, f"node-{k}.log")
            with open(log_path, "wb") as log:
                try:
                    proc = subprocess.Popen(
                        namespace_command([sys.executable, "-m", HEADLESS_MODULE, *flags]), env=dict(env),
                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as exc:
                    raise RuntimeError(f"headless node {k} could not start in a PID namespace of its own "
                                       f"(util-linux's unshare): {exc}") from None
            self.nodes.append(Node(k, proc, log_path, scratch))
        self.adopt()

    def adopt(self) -> None:
        for node in self.nodes:
            node.adopt()
        self.shm |= mapped_shm(self.procs)
        if self._reaper is not None:
            self._reaper.track(self._key, self.procs, self.shm)

    @property
    def procs(self) -> list[ProcRef]:
        return [r for node in self.nodes for r in node.procs]

    def tree(self) -> set[int]:
        """Every pid of the nodes' process trees as they are now."""
        pids: set[int] = set()
        for node in self.nodes:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(node.proc.pid)
                pids |= {root.pid, *(p.pid for p in root.children(recursive=True))}
        return pids

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.procs]

    def failure(self) -> str | None:
        """A node that exited (during the start: the reason it failed), in words, or None."""
        for node in self.nodes:
            code = node.exited()
            if code is not None:
                return (f"headless node {node.index} exited with status {code}; it printed:\n"
                        f"{node.log_tail()}")
        return None

    def describe(self) -> str:
        """The nodes, as a ready message names them: ``node 1 pid 123 (pid 1 in its namespace)``."""
        parts = []
        for node in self.nodes:
            init = node.init
            if init is not None:
                inside = namespace_pid(init.pid)
                parts.append(f"node {node.index} pid {init.pid}"
                             + (f" ({inside} in its namespace)" if inside is not None else ""))
        return ", ".join(parts)

    def stop(self) -> list[Survivor]:
        """Kill each node by its namespace's first process (the kernel ends the rest of the
        namespace), after stopping the whole tree to read the memory it maps; return what
        survived (none)."""
        self.adopt()
        refs = [r for node in self.nodes for r in ([node.init] if node.init else []) + node.procs]
        leftover = terminate(list(dict.fromkeys(refs)), at_once=True, shm=self.shm)
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=5)  # reap unshare, our child
        unlink_shm(self.shm)
        for node in self.nodes:
            shutil.rmtree(node.scratch, ignore_errors=True)
        if self._reaper is not None and not leftover:
            self._reaper.forget(self._key)
        return leftover

    def alive(self) -> bool:
        """Every node still runs (its ``unshare`` and the namespace's first process)."""
        for node in self.nodes:
            init = node.init.process() if node.init is not None else None
            if node.exited() is not None or init is None or not reading.alive(init):
                return False
        return True


class OnNodes:
    """What an engine spread over several nodes adds to one (``base.EngineBase``): its headless
    nodes, started before it and stopped after it, by pid."""

    spec: EngineSpec
    run_dir: str
    evidence: RunEvidence
    _reaper: Reaper | None

    def environment(self, first: DeadlineAndFaults) -> dict[str, str]:
        raise NotImplementedError

    @functools.cached_property
    def nodes(self) -> NodeSet | None:
        """The headless nodes of this engine's spec (None on one node); their ranks' progress is
        the engine's evidence of them."""
        if self.spec.nodes < 2:
            return None
        nodes = NodeSet(self.spec, self.run_dir, self._reaper)
        self.evidence.watch_remote(nodes.progress_dir)
        return nodes

    def head_environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` and, on several nodes, the head's share of the cores and the progress directory."""
        if self.nodes is not None:
            env.update(self.nodes.head_environment(self.node_cores()))
        return env

    def write_control(self, control: Control) -> None:
        """The control in the run directory, and where the other nodes' ranks read it."""
        write_control(self.run_dir, control)
        if self.nodes is not None:
            self.nodes.instruct(control)

    def stop_nodes(self) -> list[Survivor]:
        """Stop every headless node by pid; what survived (none)."""
        return self.nodes.stop() if self.nodes is not None else []

    def nodes_message(self) -> str:
        """The nodes as the ready message names them; recorded now, their workers all started (the
        head is ready only once every node's ranks joined it)."""
        if self.nodes is None:
            return ""
        self.nodes.adopt()
        return f"; {self.nodes.describe()}"

    def node_tree(self) -> set[int]:
        """The pids of every headless node's process tree now (``unshare`` and all below it): never
        the head's own, though the harness started them too."""
        return self.nodes.tree() if self.nodes is not None else set()

    def node_cores(self) -> list[int] | None:
        """The cores the nodes share out, or None where the user binds the ranks themselves."""
        return None if BIND_ENV in os.environ else owned_cores(self.spec)

    def multi_node_arguments(self) -> dict[str, object]:
        """vLLM's arguments that make this engine the head of several nodes (none on one)."""
        return self.nodes.head_arguments() if self.nodes is not None else {}

    def launch_nodes(self, first: DeadlineAndFaults) -> None:
        """Start the headless nodes (before the head, which waits for them at the master's port)."""
        if self.nodes is not None:
            env = process_environment(self.environment(first), self.spec, os.environ)
            self.nodes.launch(env, engine_arguments(self.spec), self.node_cores())

    def node_failure(self) -> str | None:
        return self.nodes.failure() if self.nodes is not None else None

    @property
    def nodes_alive(self) -> bool:
        """Every headless node still runs (True on one node)."""
        return self.nodes is None or self.nodes.alive()

    @property
    def node_procs(self) -> list[ProcRef]:
        """The headless nodes' processes (none on one node): stopped with the engine, never judged
        from here (their ranks publish their progress)."""
        return self.nodes.procs if self.nodes is not None else []

    @property
    def node_shm(self) -> set[str]:
        return set(self.nodes.shm) if self.nodes is not None else set()
