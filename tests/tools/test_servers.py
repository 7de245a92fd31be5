"""The test fixtures' servers (tests/support/servers.py): a server that starts must be the one
listening on its port. CI once lost a run to a sentinel that was handed a replica's port: it
could not bind it, the replica answered its PING, and the sentinel set waited 30 s for a third
sentinel that had exited."""

from __future__ import annotations

import pytest
from support.servers import RedisServer, Sentinel, free_port


def test_free_port_never_hands_out_a_port_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_a_server_on_a_taken_fixed_port_fails_to_start() -> None:
    with RedisServer() as holder:
        intruder = RedisServer(port=holder.port)
        with pytest.raises(RuntimeError, match="exited at start"):
            intruder.start()
        assert intruder.dir is None  # cleaned up: no process, no working dir
        assert holder.cli("ping") == "PONG"


def test_a_sentinel_on_a_taken_port_fails_to_start() -> None:
    with RedisServer() as primary:
        sentinel = Sentinel("svc", primary.port, quorum=1, down_after_ms=1000)
        sentinel.port = primary.port
        sentinel.fixed_port = True
        with pytest.raises(RuntimeError, match=r"sentinel on port \d+ exited at start"):
            sentinel.start()
        assert primary.info("server")["process_id"] == str(primary.pid)


def test_a_server_given_a_taken_port_moves_to_a_free_one() -> None:
    with RedisServer() as holder:
        mover = RedisServer()
        mover.port = holder.port  # as if the kernel had handed out the holder's port again
        with mover:
            assert mover.port != holder.port
            assert mover.info("server")["process_id"] == str(mover.pid)
            assert holder.info("server")["process_id"] == str(holder.pid)
