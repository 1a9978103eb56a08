"""tests/unit/conftest.py's guard: test code that sleeps fails at once, in any thread; library
code called by a test keeps the real ``time.sleep`` (``Popen.wait`` polls with it)."""

import subprocess
import sys
import threading
import time

import pytest


def test_a_sleep_in_a_test_raises_and_says_what_to_do_instead():
    with pytest.raises(RuntimeError, match="unit tests do not sleep: drive a fake clock"):
        time.sleep(0)


def test_a_sleep_in_a_thread_the_test_started_raises_too():
    raised = []

    def nap():
        try:
            time.sleep(0)
        except RuntimeError as e:
            raised.append(e)

    thread = threading.Thread(target=nap)
    thread.start()
    thread.join(timeout=10)
    assert len(raised) == 1 and "move the test to tests/integration" in str(raised[0])


def test_library_code_still_sleeps():
    library = {}
    exec(compile("import time\ndef nap():\n    time.sleep(0)\n    return 'slept'\n",
                 "/site-packages/library.py", "exec"), library)
    assert library["nap"]() == "slept"
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    assert proc.wait(timeout=60) == 0  # polls with time.sleep until the child exits
