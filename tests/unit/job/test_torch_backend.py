"""Ray Train's controller unpickles the run's backend config: Feedline's must not import torch
there (``pipeline.job.torch_backend``), and it must configure what Ray's ``TorchConfig`` does."""

import pickle
import subprocess
import sys

from ray.train.torch.config import TorchConfig, TorchConfigContextManager

from pipeline.job.torch_backend import TorchBackendConfig, _TorchContext


def test_the_config_unpickles_in_a_process_without_torch():
    config = pickle.dumps(TorchBackendConfig(backend="gloo", timeout_s=120))
    code = ("import pickle, sys; c = pickle.loads(sys.stdin.buffer.read()); "
            "c.backend_cls(); c.train_func_context; c.framework; "
            "assert 'torch' not in sys.modules, 'torch imported'; print(c.to_dict())")
    done = subprocess.run([sys.executable, "-c", code], input=config, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().strip() == str(
        {"backend": "gloo", "init_method": "env", "timeout_s": 120})


def test_it_says_what_rays_torch_config_says():
    ours, rays = TorchBackendConfig(backend="nccl", timeout_s=60), TorchConfig(
        backend="nccl", timeout_s=60)
    assert ours.to_dict() == rays.to_dict()
    assert ours.framework == rays.framework
    assert ours.backend_cls.share_cuda_visible_devices == (
        rays.backend_cls.share_cuda_visible_devices)
    assert ours.train_func_context is _TorchContext
    context = _TorchContext()
    with context:  # Ray's own context manager, built on entry (no CUDA here: a no-op)
        assert isinstance(context._inner, TorchConfigContextManager)
