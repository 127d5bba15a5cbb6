import json
import subprocess
import sys
from pathlib import Path

from pipeline.stack.process import ManagedProcess


def test_start_and_stop_own_process(tmp_path: Path) -> None:
    proc = ManagedProcess("sleeper", tmp_path)
    pid = proc.start([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    assert proc.pid() == pid
    assert proc.stop(timeout_s=5)
    assert proc.pid() is None
    assert not proc.pid_file.exists()
    assert "starting sleeper" in proc.log_tail()


def test_a_recycled_pid_is_never_ours(tmp_path: Path) -> None:
    """A PID file naming a live process with another command line is stale: not reported, not killed."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = ManagedProcess("kafka", tmp_path)
        proc.pid_file.write_text(json.dumps({"pid": stranger.pid, "cmd": ["java", "kafka.Kafka"]}))
        assert proc.pid() is None
        assert proc.stop() is False
        assert stranger.poll() is None  # still running
    finally:
        stranger.kill()
        stranger.wait()


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    proc = ManagedProcess("stubborn", tmp_path)
    proc.start([sys.executable, "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('x', flush=True); time.sleep(60)"])
    import time

    deadline = time.monotonic() + 5
    while "x" not in proc.log_tail() and time.monotonic() < deadline:  # the handler is installed
        time.sleep(0.05)
    assert proc.stop(timeout_s=0.5)
    assert proc.pid() is None
