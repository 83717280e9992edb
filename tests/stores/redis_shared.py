"""One redis-server per test module for tests that never stop it (starting one per test
costs ~0.15 s); each test still starts from an empty database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import support_redis
from support_redis import RedisServer


def module_server(factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    support_redis._require_redis()
    server = RedisServer(port=support_redis.free_port(), workdir=str(factory.mktemp("redis")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def flushed(server: RedisServer) -> RedisServer:
    client = redis.Redis.from_url(server.url, socket_timeout=5)
    try:
        client.flushall()
    finally:
        client.close()
    return server
