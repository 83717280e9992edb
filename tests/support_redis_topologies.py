"""Real Redis Cluster and Sentinel topologies on free loopback ports, for the tests.

* :class:`ClusterTopology`: 3 masters + 3 replicas (``cluster-enabled yes``, created with
  ``redis-cli --cluster create --cluster-replicas 1``), ready when every node reports
  ``cluster_state:ok`` with all 16384 slots covered.
* :class:`SentinelTopology`: one master, one replica and ``sentinel_count`` sentinels
  monitoring them as ``SENTINEL_SERVICE``.

Both are session fixtures (``redis_cluster_session``, ``redis_sentinel_session``; starting a
cluster costs ~2.2 s, a Sentinel set ~0.2 s). The function fixtures
``redis_cluster`` and ``redis_sentinel`` hand a test the same topology once it is healthy again
(a previous test may have killed a master: it is restarted and rejoins as a replica) and with
every database flushed. Timeouts are short (``NODE_TIMEOUT_MS``, ``DOWN_AFTER_MS``) so a
failover completes in a few seconds. Readiness is always polled, never slept for.

Every process started here is stopped by the fixture's finaliser and, as a last resort, by
an ``atexit`` hook (a KeyboardInterrupt or an exception in setup never leaks a server).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import support_redis

#: Cluster failure detection: a master silent this long is marked failed (the replica's
#: election then takes ~0.5-1.5 s more). Short for fast failover tests; not shorter, because
#: on a loaded 2-core CI machine a node can be starved for a few hundred milliseconds and a
#: spurious failover would make unrelated tests slow.
NODE_TIMEOUT_MS = 1500
#: Sentinel: a master silent this long is subjectively down (one sentinel: objectively too).
#: 1 s let a full-suite run on 2 cores starve the sentinel or the new master past it just after
#: a test's failover: Sentinel failed over a second time, back to the restarted old master.
DOWN_AFTER_MS = 3000
FAILOVER_TIMEOUT_MS = 3000
SENTINEL_SERVICE = "dejacache-test"

_LIVE: set[subprocess.Popen[bytes]] = set()


def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        with contextlib.suppress(Exception):
            proc.wait(timeout=5)
    _LIVE.clear()


atexit.register(_kill_leftovers)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``cond`` every 20 ms until true; ``AssertionError`` naming ``what`` after
    ``timeout`` seconds. Exceptions from ``cond`` count as "not yet"."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if cond():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def _client(port: int, timeout: float = 1.0) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout,
                       socket_connect_timeout=timeout)


def _info(port: int, section: str) -> dict[str, Any]:
    c = _client(port)
    try:
        return dict(c.info(section))
    finally:
        c.close()


@dataclasses.dataclass
class Node:
    """One redis-server (or sentinel) process on ``port``, its files in ``workdir``."""

    port: int
    workdir: pathlib.Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / "server.log", "ab")  # noqa: SIM115 - the child owns it
        try:
            self.proc = subprocess.Popen([binary, *self.args], cwd=self.workdir,
                                         stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        _LIVE.add(self.proc)
        self.paused = False
        wait_until(self._pong, 10, f"redis-server on port {self.port} to answer PING")

    def _pong(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            tail = (self.workdir / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"redis-server on port {self.port} exited:\n{tail}")
        c = _client(self.port, 0.2)
        try:
            return bool(c.ping())
        finally:
            c.close()

    def kill(self) -> None:
        """SIGKILL: no chance to hand anything over (the failover case)."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.kill()
            self.proc.wait()
            _LIVE.discard(self.proc)
            self.proc = None
            self.paused = False

    def stop(self) -> None:
        if self.proc is None:
            return
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        _LIVE.discard(self.proc)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the port stays open but nothing answers."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def client(self, timeout: float = 1.0) -> Any:
        return _client(self.port, timeout)


def _replica_online(master_port: int, slots: list[tuple[int, int]] | None = None) -> bool:
    """The server on ``master_port`` is a master with exactly one replica, and that replica
    acknowledges a write (``slots``: the ranges a Cluster master serves, where the write
    must go).

    ``state=online`` is not enough: after a diskless full sync (the default) Redis 7.0 marks
    the replica online but holds the command stream back until the replica's next
    ``REPLCONF ACK``. The ACK the replica sends as soon as it has loaded the data reaches the
    master before the master has reaped the RDB child (its cron, 10 times a second), and is
    ignored; the next comes with the replica's once-a-second cron. Until then the replica
    receives nothing and a ``WAIT`` times out (seen: one run in three of a test whose first
    increment waits 400 ms for the replica, loaded machine or not)."""
    repl = _info(master_port, "replication")
    replica = repl.get("slave0")
    if not (repl.get("role") == "master" and int(repl.get("connected_slaves", 0)) == 1
            and isinstance(replica, dict) and replica.get("state") == "online"):
        return False
    key = _ready_key(slots)
    c = _client(master_port)
    try:
        # WAIT counts replicas that acknowledged this connection's last propagated write:
        # a key set and deleted again leaves nothing behind for the tests.
        pipe = c.pipeline(transaction=False)
        pipe.set(key, 1).delete(key).execute_command("WAIT", 1, 100)
        return int(pipe.execute()[-1]) == 1
    finally:
        c.close()


def _ready_key(slots: list[tuple[int, int]] | None) -> str:
    """A key of the readiness write: in one of ``slots`` when given (a Cluster node answers
    ``MOVED`` for another slot, and WAIT after it would count nothing)."""
    from redis.crc import key_slot

    keys = (f"dejacache-test:ready:{i}" for i in itertools.count())
    return next(k for k in keys
                if slots is None or any(a <= key_slot(k.encode()) <= b for a, b in slots))


def _server_args(port: int, *extra: str) -> list[str]:
    return ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--protected-mode", "yes", "--dir", ".",
            # A master told to stop waits up to 10 s for lagging replicas by default: the
            # tests want it gone at once (its data is throwaway).
            "--shutdown-on-sigterm", "nosave now",
            # A replica's full sync otherwise waits 5 s for more replicas to join it.
            "--repl-diskless-sync-delay", "0", *extra]


# -- Redis Cluster


@dataclasses.dataclass(frozen=True)
class Migration:
    """A slot moving from ``source`` to ``target`` (``ClusterTopology.begin_migration``)."""

    slot: int
    source: Node
    target: Node


@dataclasses.dataclass
class ClusterTopology:
    """3 masters + 3 replicas. ``url`` / ``startup_nodes`` reach it; ``master_for(key)`` and
    ``kill_master_for(key)`` drive a failover of the shard holding a key."""

    root: pathlib.Path
    nodes: list[Node] = dataclasses.field(default_factory=list)

    @property
    def ports(self) -> list[int]:
        return [n.port for n in self.nodes]

    @property
    def url(self) -> str:
        """``redis://`` URL of one live node (a cluster client discovers the rest)."""
        return f"redis://127.0.0.1:{self.live_nodes()[0].port}/0"

    @property
    def store_url(self) -> str:
        """``redis+cluster://host:port,...`` naming every node (the form the store parses)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.port) for n in self.live_nodes()]

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.alive and not n.paused]

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def start(self) -> None:
        for i in range(6):
            port, bus = support_redis.free_port(), support_redis.free_port()
            args = _server_args(
                port, "--cluster-enabled", "yes", "--cluster-port", str(bus),
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                # Any replica may take over, however long it was cut off: the tests kill
                # masters on purpose and want the failover, not a refusal.
                "--cluster-replica-validity-factor", "0",
                "--appendonly", "no",
            )
            node = Node(port=port, workdir=self.root / f"node{i}", args=args)
            self.nodes.append(node)
            node.start()
        cli = shutil.which("redis-cli")
        assert cli is not None
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
        )
        self.wait_healthy()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    # -- state

    def _cluster_info(self, port: int) -> dict[str, str]:
        c = _client(port)
        try:
            raw = c.execute_command("CLUSTER INFO")
        finally:
            c.close()
        if isinstance(raw, dict):  # redis-py parses CLUSTER INFO itself
            return {_s(k): _s(v) for k, v in raw.items()}
        text = _s(raw)
        return dict(line.split(":", 1) for line in text.split() if ":" in line)

    def masters(self) -> dict[int, list[tuple[int, int]]]:
        """Master port -> the slot ranges it serves, as one live node sees it."""
        c = self.live_nodes()[0].client()
        try:
            slots = c.execute_command("CLUSTER SLOTS")
        finally:
            c.close()
        out: dict[int, list[tuple[int, int]]] = {}
        for start, end, master, *_ in slots:
            out.setdefault(int(master[1]), []).append((int(start), int(end)))
        return out

    def master_for(self, key: str) -> Node:
        c = self.live_nodes()[0].client()
        try:
            slot = int(c.execute_command("CLUSTER KEYSLOT", key))
        finally:
            c.close()
        for port, ranges in self.masters().items():
            if any(a <= slot <= b for a, b in ranges):
                return self.node(port)
        raise AssertionError(f"no master serves slot {slot} (key {key!r})")

    def _healthy(self) -> bool:
        if not all(n.alive and not n.paused for n in self.nodes):
            return False
        for n in self.nodes:
            info = self._cluster_info(n.port)
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                return False
            if info.get("cluster_known_nodes") != "6":
                return False
        masters = self.masters()
        if len(masters) != 3:
            return False
        return all(_replica_online(port, slots) for port, slots in masters.items())

    def wait_healthy(self, timeout: float = 30) -> None:
        """Until every node is up, agrees the cluster is ok with all slots served, and each
        of the 3 masters has its replica connected."""
        wait_until(self._healthy, timeout, "the cluster to be healthy (3 masters, 3 replicas)")

    def wait_failover(self, dead_port: int, timeout: float = 20) -> None:
        """Until every live node reports ``cluster_state:ok`` with all slots served and no
        longer names ``dead_port`` as a master (a replica took its shard over)."""
        def ok() -> bool:
            for n in self.live_nodes():
                info = self._cluster_info(n.port)
                if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
                    return False
                c = n.client()
                try:
                    slots = c.execute_command("CLUSTER SLOTS")
                finally:
                    c.close()
                if any(int(master[1]) == dead_port for _, _, master, *_ in slots):
                    return False
            return True
        wait_until(ok, timeout, f"a replica to take over the shard of port {dead_port}")

    # -- resharding

    def node_id(self, port: int) -> str:
        c = _client(port)
        try:
            return _s(c.execute_command("CLUSTER MYID"))
        finally:
            c.close()

    def begin_migration(self, key: str) -> Migration:
        """Mark the slot of ``key`` as moving from its master to another master
        (``IMPORTING`` on the target, then ``MIGRATING`` on the source, as ``redis-cli
        --cluster reshard`` does) and move no key yet."""
        source = self.master_for(key)
        target = self.node(next(p for p in self.masters() if p != source.port))
        c = source.client()
        try:
            slot = int(c.execute_command("CLUSTER KEYSLOT", key))
        finally:
            c.close()
        for node, state, other in ((target, "IMPORTING", source), (source, "MIGRATING", target)):
            c = node.client()
            try:
                c.execute_command("CLUSTER SETSLOT", slot, state, self.node_id(other.port))
            finally:
                c.close()
        return Migration(slot, source, target)

    def move_keys(self, migration: Migration, keys: list[str]) -> None:
        """``MIGRATE`` these keys of the moving slot from the source to the target."""
        c = migration.source.client()
        try:
            c.execute_command("MIGRATE", "127.0.0.1", migration.target.port, "", 0, 5000,
                              "KEYS", *keys)
        finally:
            c.close()

    def finish_migration(self, migration: Migration) -> None:
        """Move the slot's remaining keys, then give the slot to the target everywhere."""
        c = migration.source.client()
        try:
            while keys := c.execute_command("CLUSTER GETKEYSINSLOT", migration.slot, 100):
                self.move_keys(migration, [_s(k) for k in keys])
        finally:
            c.close()
        target_id = self.node_id(migration.target.port)
        for port in [migration.target.port, migration.source.port,
                     *(p for p in self.masters() if p not in (migration.target.port,
                                                              migration.source.port))]:
            c = _client(port)
            try:
                c.execute_command("CLUSTER SETSLOT", migration.slot, "NODE", target_id)
            finally:
                c.close()

        def agreed() -> bool:
            return all(self.master_for_slot(migration.slot, n.port) == migration.target.port
                       for n in self.live_nodes())
        wait_until(agreed, 20, f"every node to give slot {migration.slot} to its new master")

    def master_for_slot(self, slot: int, port: int) -> int:
        """The master serving ``slot`` as the node on ``port`` sees it."""
        c = _client(port)
        try:
            slots = c.execute_command("CLUSTER SLOTS")
        finally:
            c.close()
        return next(int(master[1]) for start, end, master, *_ in slots
                    if int(start) <= slot <= int(end))

    # -- faults

    def kill_master_for(self, key: str) -> Node:
        """SIGKILL the master holding ``key``; returns its node (``restart`` it later)."""
        node = self.master_for(key)
        node.kill()
        return node

    def restore(self) -> None:
        """Restart killed nodes, resume paused ones, and wait until healthy. A restarted
        master finds its shard taken over (its nodes.conf is older) and rejoins as a replica."""
        for n in self.nodes:
            n.resume()
            if not n.alive:
                n.start()
        self.wait_healthy()

    def flushall(self) -> None:
        for port in self.masters():
            c = _client(port)
            try:
                c.flushall()
            finally:
                c.close()


# -- Sentinel


@dataclasses.dataclass
class SentinelTopology:
    """One master, one replica, ``sentinel_count`` sentinels watching ``service_name``."""

    root: pathlib.Path
    sentinel_count: int = 1
    service_name: str = SENTINEL_SERVICE
    servers: list[Node] = dataclasses.field(default_factory=list)
    sentinel_nodes: list[Node] = dataclasses.field(default_factory=list)

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """``(host, port)`` of each sentinel, as ``redis.sentinel.Sentinel`` takes them."""
        return [("127.0.0.1", n.port) for n in self.sentinel_nodes]

    @property
    def url(self) -> str:
        """``redis+sentinel://host:port[,host:port]/service/0`` (the form the store parses)."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.sentinel_nodes)
        return f"redis+sentinel://{hosts}/{self.service_name}/0"

    def start(self) -> None:
        master_port = support_redis.free_port()
        master = Node(master_port, self.root / "master", _server_args(master_port))
        self.servers.append(master)
        master.start()
        replica_port = support_redis.free_port()
        replica = Node(replica_port, self.root / "replica", _server_args(
            replica_port, "--replicaof", "127.0.0.1", str(master_port)))
        self.servers.append(replica)
        replica.start()
        quorum = self.sentinel_count // 2 + 1
        for i in range(self.sentinel_count):
            port = support_redis.free_port()
            workdir = self.root / f"sentinel{i}"
            workdir.mkdir(parents=True, exist_ok=True)
            conf = workdir / "sentinel.conf"  # sentinel rewrites it: one per sentinel
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
                f"sentinel monitor {self.service_name} 127.0.0.1 {master_port} {quorum}\n"
                f"sentinel down-after-milliseconds {self.service_name} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {self.service_name} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {self.service_name} 1\n"
            )
            node = Node(port, workdir, [str(conf), "--sentinel"])
            self.sentinel_nodes.append(node)
            node.start()
        self.wait_healthy()

    def stop(self) -> None:
        for n in [*self.sentinel_nodes, *self.servers]:
            n.stop()

    # -- state

    def master_port(self) -> int:
        """The master's port as the first live sentinel reports it."""
        for s in self.sentinel_nodes:
            if not s.alive:
                continue
            c = s.client()
            try:
                _host, port = c.execute_command(
                    "SENTINEL GET-MASTER-ADDR-BY-NAME", self.service_name)
            finally:
                c.close()
            return int(port)
        raise AssertionError("no sentinel is running")

    def _switched_master_port(self) -> int | None:
        """The master every live sentinel records with no failover in progress (None while
        one is running or the sentinels disagree)."""
        ports: set[int] = set()
        for s in self.sentinel_nodes:
            if not s.alive:
                continue
            c = s.client()
            try:
                state = c.sentinel_master(self.service_name)
            finally:
                c.close()
            flags = state["flags"]
            if isinstance(flags, str):
                flags = set(flags.split(","))
            if "failover_in_progress" in flags:
                return None
            ports.add(int(state["port"]))
        return ports.pop() if len(ports) == 1 else None

    def master(self) -> Node:
        port = self.master_port()
        return next(n for n in self.servers if n.port == port)

    def replica(self) -> Node:
        port = self.master_port()
        return next(n for n in self.servers if n.port != port)

    def _healthy(self) -> bool:
        if not all(n.alive and not n.paused for n in [*self.servers, *self.sentinel_nodes]):
            return False
        if not _replica_online(self.master().port):
            return False
        rrepl = _info(self.replica().port, "replication")
        if rrepl.get("role") != "slave" or rrepl.get("master_link_status") != "up":
            return False
        for s in self.sentinel_nodes:
            c = s.client()
            try:
                state = c.execute_command("SENTINEL MASTER", self.service_name)
            finally:
                c.close()
            fields = dict(zip(state[::2], state[1::2], strict=True)) if isinstance(
                state, list) else dict(state)
            fields = {_s(k): _s(v) for k, v in fields.items()}
            if fields.get("flags") != "master" or int(fields.get("num-slaves", 0)) < 1:
                return False
            if self.sentinel_count > 1 and int(
                    fields.get("num-other-sentinels", 0)) != self.sentinel_count - 1:
                return False
        return True

    def wait_healthy(self, timeout: float = 30) -> None:
        wait_until(self._healthy, timeout,
                   "the Sentinel set to be healthy (a master with a connected replica)")

    def wait_promoted(self, old_master_port: int, timeout: float = 20) -> Node:
        """Until a sentinel's failover is over (its master record switched to another server,
        no failover in progress) and the new master accepts writes; returns it.
        ``GET-MASTER-ADDR-BY-NAME`` names the promoted replica while the failover is still
        running: restarting the old master then let a slow failover end with the old master
        named again (seen once under load)."""
        def promoted() -> bool:
            port = self._switched_master_port()
            return (port is not None and port != old_master_port
                    and _info(port, "replication")["role"] == "master")
        wait_until(promoted, timeout, "Sentinel to promote the replica")
        return self.master()

    # -- faults

    def kill_master(self) -> Node:
        node = self.master()
        node.kill()
        return node

    def restore(self) -> None:
        """Restart killed servers (Sentinel turns an old master into a replica), resume
        paused ones, wait until healthy."""
        for n in [*self.servers, *self.sentinel_nodes]:
            n.resume()
            if not n.alive:
                n.start()
        master = self.master_port()
        for n in self.servers:
            if n.port != master and _info(n.port, "replication").get("role") == "master":
                # Sentinel would demote a restarted old master too, but only after it has
                # reported itself master for 8 s: do at once what Sentinel will do anyway.
                c = n.client()
                try:
                    c.replicaof("127.0.0.1", master)
                finally:
                    c.close()
        self.wait_healthy()

    def flushall(self) -> None:
        c = self.master().client()
        try:
            c.flushall()
        finally:
            c.close()


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# -- fixtures


@contextlib.contextmanager
def _running(topology: ClusterTopology | SentinelTopology) -> Iterator[None]:
    try:
        topology.start()
        yield
    finally:
        topology.stop()


@pytest.fixture(scope="session")
def redis_cluster_session() -> Iterator[ClusterTopology]:
    support_redis._require_redis()
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli not installed (needed to create a Redis Cluster)")
    with tempfile.TemporaryDirectory(prefix="dejacache-cluster-") as d:
        topology = ClusterTopology(root=pathlib.Path(d))
        with _running(topology):
            yield topology


@pytest.fixture(scope="session")
def redis_sentinel_session() -> Iterator[SentinelTopology]:
    support_redis._require_redis()
    with tempfile.TemporaryDirectory(prefix="dejacache-sentinel-") as d:
        topology = SentinelTopology(root=pathlib.Path(d))
        with _running(topology):
            yield topology


@pytest.fixture
def redis_cluster(redis_cluster_session: ClusterTopology) -> ClusterTopology:
    """The session's cluster, healthy (killed masters restarted as replicas) and flushed."""
    redis_cluster_session.restore()
    redis_cluster_session.flushall()
    return redis_cluster_session


@pytest.fixture
def redis_sentinel(redis_sentinel_session: SentinelTopology) -> SentinelTopology:
    """The session's Sentinel set, healthy (a killed master back as a replica) and flushed."""
    redis_sentinel_session.restore()
    redis_sentinel_session.flushall()
    return redis_sentinel_session
