"""``cli.listen``, the port check of ``serve``, ``view`` and ``openenv``: a port whose last server closed its
connections first (they sit in TIME_WAIT, as after a crash) is bound at once; one another server listens on is
refused with one line."""

from __future__ import annotations

import socket

import pytest
import typer

from sotopia_env.cli.listen import bind_or_fail


def test_a_port_in_time_wait_is_bound_and_a_listened_one_refused() -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        with pytest.raises(typer.Exit):  # listened on: refused
            bind_or_fail("127.0.0.1", port)
        accepted.close()  # the server closes first: its end goes to TIME_WAIT once the client closes too
        client.recv(1)
        client.close()
    with socket.socket() as bare, pytest.raises(OSError):  # what a bare bind (the old check) says now
        bare.bind(("127.0.0.1", port))
    sock = bind_or_fail("127.0.0.1", port)
    try:
        sock.listen()
        assert sock.getsockname()[1] == port
    finally:
        sock.close()
