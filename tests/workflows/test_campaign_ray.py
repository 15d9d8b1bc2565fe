"""Campaign chunks as Ray tasks on a real local Ray cluster (loopback): rows equal to the local
backend. The cluster is started here with `ray start --head --block` in its own session and
stopped (that session's processes) afterwards."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

from conftest import ahrs_entry, write_rig
from test_campaign import write_campaign
from fibril_mjx.workflows.campaign import execute

ray = pytest.importorskip('ray')
RAY = str(pathlib.Path(__file__).resolve().parents[2] / '.venv' / 'bin' / 'ray')


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


@pytest.fixture(scope='module')
def cluster():
  port = _free_port()
  tmp = tempfile.mkdtemp(prefix='fray', dir='/tmp')   # short: Ray's socket paths are limited
  proc = subprocess.Popen(
      [RAY, 'start', '--head', '--block', '--node-ip-address', '127.0.0.1', '--port', str(port),
       '--num-cpus', '1', '--include-dashboard', 'false', '--temp-dir', tmp,
       '--disable-usage-stats'],
      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
  address = f'127.0.0.1:{port}'
  try:
    deadline = time.monotonic() + 180
    while True:
      assert proc.poll() is None, 'ray start exited'
      with socket.socket() as s:
        if s.connect_ex(('127.0.0.1', port)) == 0:
          break
      assert time.monotonic() < deadline, 'the Ray head did not come up'
      time.sleep(0.5)
    time.sleep(2.0)
    yield address
  finally:
    try:
      os.killpg(proc.pid, signal.SIGTERM)
      proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
      try:
        os.killpg(proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def test_ray_backend_equals_local(cluster, tmp_path):
  write_rig(tmp_path, [ahrs_entry(period_s=0.004)])
  path = write_campaign(tmp_path, worlds=4, chunk_worlds=2, duration_s=0.04)
  execute.run(path, tmp_path / 'local', progress=False, report=False)
  execute.run(path, tmp_path / 'ray', backend='ray', ray_address=cluster, progress=False,
              report=False)
  a, b = execute.read_rows(tmp_path / 'local'), execute.read_rows(tmp_path / 'ray')
  assert set(a) == set(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
