"""TEMPORARY: a minimal Redis Cluster (3 masters + 3 replicas) and a Sentinel-managed master
on loopback, until the shared topology fixtures land (the redis-inval branch builds them);
then this module is deleted and the tests use those.

Every wait polls for readiness (no fixed sleeps) and every process is stopped on teardown,
also when starting failed half way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import support_redis


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        port = random.randint(20000, 55000)
        if _free(port) and _free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


def _wait(what: str, ready: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError, OSError):
            if ready():
                return
        time.sleep(delay)  # polling, not waiting for a guess: a slow CI box just polls longer
        delay = min(delay * 2, 0.2)
    raise RuntimeError(f"{what} not ready after {timeout}s")


@dataclasses.dataclass
class Procs:
    procs: list[subprocess.Popen[bytes]] = dataclasses.field(default_factory=list)

    def spawn(self, *args: str) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        self.procs.append(subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()


def _ping(port: int) -> bool:
    c = redis.Redis(port=port, socket_timeout=1)
    try:
        return bool(c.ping())
    finally:
        c.close()


def _server_args(port: int, d: Path) -> list[str]:
    return ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(d)]


@dataclasses.dataclass
class Cluster:
    ports: list[int]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:3])

    def client(self) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.ports[0],
                                          socket_timeout=5)

    def flush(self) -> None:
        c = self.client()
        try:
            c.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        finally:
            c.close()


def _cluster_ok(ports: list[int]) -> bool:
    for p in ports:
        c = redis.Redis(port=p, socket_timeout=1)
        try:
            info = c.cluster("info")
            if info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) != 6:
                return False
            nodes = c.cluster("nodes")
            if sum(1 for n in nodes.values() if "slave" in n["flags"]) != 3:
                return False
        finally:
            c.close()
    return True


@contextlib.contextmanager
def running_cluster(d: Path) -> Iterator[Cluster]:
    support_redis._require_redis()
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not installed (needed to create the cluster)")
    procs = Procs()
    try:
        ports = [cluster_port() for _ in range(6)]
        for p in ports:
            procs.spawn(*_server_args(p, d), "--cluster-enabled", "yes",
                        "--cluster-config-file", f"nodes-{p}.conf",
                        "--cluster-node-timeout", "5000")
        for p in ports:
            _wait(f"cluster node {p}", lambda p=p: _ping(p))
        subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
        _wait("cluster", lambda: _cluster_ok(ports), timeout=60)
        yield Cluster(ports)
    finally:
        procs.stop()


@dataclasses.dataclass
class SentinelSetup:
    master: int
    replica: int
    sentinel: int
    service: str = "mymaster"

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel}/{self.service}"

    def flush(self) -> None:
        c = redis.Redis(port=self.master, socket_timeout=5)
        try:
            c.flushall()
        finally:
            c.close()


def _sentinel_ready(s: SentinelSetup) -> bool:
    c = redis.Redis(port=s.sentinel, socket_timeout=1, decode_responses=True)
    try:
        addr = c.execute_command("SENTINEL", "get-master-addr-by-name", s.service)
    finally:
        c.close()
    return bool(addr) and int(addr[1]) == s.master


@contextlib.contextmanager
def running_sentinel(d: Path) -> Iterator[SentinelSetup]:
    support_redis._require_redis()
    procs = Procs()
    try:
        setup = SentinelSetup(support_redis.free_port(), support_redis.free_port(),
                              support_redis.free_port())
        procs.spawn(*_server_args(setup.master, d / "m" if _mk(d / "m") else d))
        procs.spawn(*_server_args(setup.replica, d / "r" if _mk(d / "r") else d),
                    "--replicaof", "127.0.0.1", str(setup.master))
        conf = d / "sentinel.conf"
        conf.write_text(
            f"port {setup.sentinel}\nbind 127.0.0.1\ndir {d}\n"
            f"sentinel monitor {setup.service} 127.0.0.1 {setup.master} 1\n"
            f"sentinel down-after-milliseconds {setup.service} 2000\n"
            f"sentinel failover-timeout {setup.service} 5000\n")
        procs.spawn(str(conf), "--sentinel")
        _wait("sentinel", lambda: _sentinel_ready(setup), timeout=60)
        yield setup
    finally:
        procs.stop()


def _mk(p: Path) -> bool:
    p.mkdir(exist_ok=True)
    return True
