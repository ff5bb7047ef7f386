"""Every built-in policy loss and advantage estimator on a CUDA device gives what it gives on the CPU (skips where
there is no CUDA: CI; run on a GPU machine). The trainer hands the losses CUDA tensors and python numbers for the
mini-batch normalisers; a tensor left on the wrong device, or a draw (clip_cov's ``torch.randperm``) that depends on
the device, fails here. Seconds on an H200.
"""

import pytest
import torch
from parity_cases import SPEC, make_inputs

from skyrl_core.choices import AdvantageEstimator, LossReduction, PolicyLoss, values
from skyrl_engine import algorithms as alg

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _config(reduction):
    from types import SimpleNamespace as NS

    return NS(**{**SPEC, "loss_reduction": reduction,
                 "cispo": NS(cispo_eps_clip_low=0.1, cispo_eps_clip_high=0.15, cispo_anchor="old"),
                 "clip_cov": NS(clip_ratio=0.2, clip_cov_lb=0.0, clip_cov_ub=5.0)})


def _run(name, reduction, device, t):
    on = {k: v.to(device) for k, v in t.items()}
    log_probs = on["log_probs"].clone().requires_grad_(True)
    torch.manual_seed(SPEC["clip_cov_seed"])
    mask = on["mask"]
    loss, metrics = alg.compute_policy_loss(name, log_probs, on["old_log_probs"], on["advantages"], mask,
                                            _config(reduction), rollout_logprobs=on["rollout_log_probs"],
                                            num_sequences=mask.shape[0], num_tokens=float(mask.sum()))
    loss.backward()
    assert loss.device.type == device and log_probs.grad.device.type == device
    return loss.item(), log_probs.grad.cpu(), metrics


@pytest.mark.parametrize("reduction", values(LossReduction))
@pytest.mark.parametrize("name", values(PolicyLoss))
def test_every_loss_on_cuda_matches_the_cpu(name, reduction):
    t = {k: torch.from_numpy(v) for k, v in make_inputs(0).items() if k != "index"}
    loss_cpu, grad_cpu, metrics_cpu = _run(name, reduction, "cpu", t)
    loss_gpu, grad_gpu, metrics_gpu = _run(name, reduction, "cuda", t)
    assert loss_gpu == pytest.approx(loss_cpu, rel=1e-5, abs=1e-6)
    torch.testing.assert_close(grad_gpu, grad_cpu, rtol=1e-4, atol=1e-6)
    assert metrics_gpu == pytest.approx(metrics_cpu, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", values(AdvantageEstimator))
def test_every_estimator_on_cuda_matches_the_cpu(name):
    inputs = make_inputs(0)
    t = {k: torch.from_numpy(v) for k, v in inputs.items() if k != "index"}
    got = {}
    for device in ("cpu", "cuda"):
        on = {k: v.to(device) for k, v in t.items()}
        adv, ret = alg.compute_advantages(name, on["rewards"], on["mask"], inputs["index"], _config("token_mean"),
                                          values=on["values"])
        assert adv.device.type == device
        got[device] = (adv.cpu(), ret.cpu())
    for cpu, gpu in zip(got["cpu"], got["cuda"], strict=True):
        torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-5)

