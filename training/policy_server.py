"""The policy served by an inference server (vLLM) while a stage plays it: ``policy_server:`` in the pipeline config.

On a GPU, self-play through transformers' ``generate`` is many times slower than a vLLM server (SOTOPIA-pi
served its policy the same way). With ``policy_server`` set, every stage in which the policy plays episodes
(the SR rounds and the evaluations):

1. starts the server for the current policy: ``command`` for a policy with a LoRA adapter, ``full_command`` for
   one without (the base model, a full fine-tune), each a template of ``{base_model}`` (the base model's path
   or hub id), ``{adapter}`` (the adapter's directory), ``{model}`` (the policy's path or hub id) and ``{port}``;
2. waits until ``health_url`` answers 200, at most ``start_timeout`` seconds;
3. plays its episodes through the lean OpenAI client (``api_base http://127.0.0.1:{port}/v1``, model ``policy``);
4. stops it (SIGTERM to its process group, SIGKILL after ``stop_timeout``), then the stage trains.

A server that exits, before it is healthy or mid-stage, ends the stage with one line (``PolicyServerError``)
naming its exit code, the last line it printed and its log file; the episodes already stored are kept, and a
rerun resumes the stage. The server's output goes to ``OUTPUT_DIR/policy_server/STAGE.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import ConfigDict

from sotopia_env.errors import UserError
from sotopia_env.model_ref import read_model_ref

SERVED_MODEL = "policy"  # the name the server serves the policy under
DEFAULT_COMMAND = "vllm serve {base_model} --enable-lora --lora-modules policy={adapter} --port {port}"
DEFAULT_FULL_COMMAND = "vllm serve {model} --served-model-name policy --port {port}"
PLACEHOLDERS = ("base_model", "adapter", "model", "port")
T = TypeVar("T")


class PolicyServerError(UserError, RuntimeError):
    """The policy server could not be started, or died; one line naming the command, its exit and its log."""


@dataclass
class PolicyServerConfig:
    """How to serve the policy while a stage plays it (see the module docstring)."""

    __pydantic_config__ = ConfigDict(extra="forbid")
    section = "policy_server"  # where it is set, for the error lines (not a field)

    command: str = DEFAULT_COMMAND  # a policy with a LoRA adapter
    full_command: str = DEFAULT_FULL_COMMAND  # a policy without one: the base model, a full fine-tune
    health_url: str = "http://127.0.0.1:{port}/health"
    start_timeout: float = 600.0  # seconds to become healthy (vLLM loads weights and compiles first)
    stop_timeout: float = 30.0  # seconds between SIGTERM and SIGKILL
    port: int = 0  # 0: a free port


def template_problem(config: PolicyServerConfig) -> tuple[str, str] | None:
    """``(field, why)`` for a template that cannot be filled in, else None."""
    values = dict.fromkeys(PLACEHOLDERS, "x")
    for name in ("command", "full_command", "health_url"):
        template = getattr(config, name)
        try:
            filled = template.format(**values)
        except (KeyError, IndexError, ValueError) as exc:
            return name, f"bad template {template!r} ({type(exc).__name__}: {exc}); placeholders: {PLACEHOLDERS}"
        if name != "health_url" and not shlex.split(filled):
            return name, "must not be empty"
    if config.start_timeout <= 0 or config.stop_timeout <= 0:
        return "start_timeout", "start_timeout and stop_timeout must be positive"
    if not 0 <= config.port < 65536:
        return "port", f"must be 0 (a free port) or a port number, not {config.port}"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_argv(config: PolicyServerConfig, policy: str, port: int) -> list[str]:
    """The command that serves ``policy`` (a model spec) on ``port``, split into arguments."""
    from sotopia_env.embedded_models import resolve_model_path

    base, adapter = read_model_ref(policy)
    template = config.command if adapter else config.full_command
    values = {
        "base_model": resolve_model_path(base, progress=False),
        "adapter": adapter or "",
        "model": resolve_model_path(base if adapter else policy, progress=False),
        "port": port,
    }
    return shlex.split(template.format(**values))


class PolicyServer:
    """One running server for one policy; a context manager that starts it healthy and stops it."""

    def __init__(
        self, config: PolicyServerConfig, policy: str, log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.config = config
        self.env = {**os.environ, **env} if env else None  # added to the server's environment
        self.port = config.port or free_port()
        self.argv = server_argv(config, policy, self.port)
        self.health_url = config.health_url.format(port=self.port)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> PolicyServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            try:
                self.process = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=self.env,
                )
            except OSError as exc:
                raise PolicyServerError(
                    f"policy server: cannot run {self.argv[0]!r} ({exc.strerror or exc}); "
                    f"install it (vLLM: pip install vllm) or set {self.config.section}.command"
                ) from None
        try:
            self._wait_healthy()
        except BaseException:  # a timeout, or Ctrl-C while it loads: leave nothing running
            self.stop()
            raise

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.start_timeout
        while not self._healthy():
            if self.exited():
                raise self._exit_error("before it was healthy")
            if time.monotonic() > deadline:
                raise PolicyServerError(
                    f"policy server {self._name()}: not healthy at {self.health_url} after "
                    f"{self.config.start_timeout:g} s ({self.config.section}.start_timeout); log: {self.log_path}"
                )
            time.sleep(0.1)

    def exited(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=self.config.stop_timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    async def guard(self, work: Awaitable[T], poll_s: float = 0.1) -> T:
        """``work``'s result; if the server exits first, ``work`` is cancelled and ``PolicyServerError`` raised
        (episodes in flight are not stored: a rerun plays them)."""
        task = asyncio.ensure_future(work)
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                return task.result()
            if self.exited():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                raise self._exit_error("mid-stage")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.health_url, timeout=2) as response:
                return response.status == 200
        except (OSError, ValueError):
            return False

    def _name(self) -> str:
        return repr(shlex.join(self.argv[:2]))

    def _exit_error(self, when: str) -> PolicyServerError:
        code = self.process.poll() if self.process is not None else None
        last = _last_line(self.log_path)
        said = f"; its last line: {last}" if last else ""
        return PolicyServerError(
            f"policy server {self._name()} exited with code {code} {when}{said}; log: {self.log_path}"
        )


def _last_line(path: Path, limit: int = 200) -> str:
    with contextlib.suppress(OSError):
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return lines[-1][:limit]
    return ""


@contextlib.contextmanager
def serving(config: PolicyServerConfig | None, policy: str | None, log_path: Path) -> Iterator[PolicyServer | None]:
    """The server for ``policy`` while the block runs (nothing when there is no config or no policy)."""
    if config is None or policy is None:
        yield None
        return
    with PolicyServer(config, policy, log_path) as server:
        yield server
