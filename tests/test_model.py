"""The Med-DDPM network and diffusion: size, structure, a learning step, the sampler."""

from pathlib import Path

import pytest
import torch

from config_settings import configured, paper_unet, unet
from medddpm.diffusion import GaussianDiffusion, cosine_beta_schedule
from medddpm.placement import Placement
from medddpm.training import Trainer, TrainSettings
from medddpm.unet import AttentionBlock, UNet3D, parameter_count
from medddpm.variants import Variant

SMALL = unet()  # config.yaml's: the whole-head network at base width 32


def test_whole_head_configuration_has_upstream_parameter_count():
    assert parameter_count(UNet3D(paper_unet())) == 40_226_433


def test_brats_configuration_has_upstream_parameter_count():
    """config/brats.yaml's network, as the workflow builds it from the merged config: upstream's BraTS U-Net."""
    import yaml

    from medddpm.build import unet_config

    repo = Path(__file__).resolve().parents[1]
    model = yaml.safe_load((repo / "config.yaml").read_text())["model"]
    model |= yaml.safe_load((repo / "config/brats.yaml").read_text())["model"]
    unet = UNet3D(unet_config(model))
    assert parameter_count(unet) == 57_562_564
    assert (unet.config.in_channels, unet.config.out_channels, unet.config.num_res_blocks) == (8, 4, 2)
    # 192 // 16 = 12 matches no downsample rate: the middle block holds the only attention.
    attention = [name for name, m in unet.named_modules() if isinstance(m, AttentionBlock)]
    assert attention == ["middle_block.1"]
    out = unet(torch.randn(1, 8, 16, 16, 16), torch.tensor([3]))
    assert out.shape == (1, 4, 16, 16, 16)


def test_small_network_keeps_the_structure():
    big, small = UNet3D(paper_unet()), UNet3D(SMALL)
    kinds = lambda m: [type(x).__name__ for x in m.modules()]  # noqa: E731
    assert kinds(big) == kinds(small)
    # Attention: one encoder block at rate 8, two decoder blocks, one in the middle.
    assert sum(isinstance(m, AttentionBlock) for m in small.modules()) == 4


def test_output_layers_start_at_zero_and_output_shape():
    model = UNet3D(SMALL)
    x = torch.randn(1, 3, 32, 32, 32)
    out = model(x, torch.tensor([3]))
    assert out.shape == (1, 1, 32, 32, 32)
    assert torch.count_nonzero(out) == 0  # zero-initialised output convolution, as upstream


def test_cosine_schedule_matches_upstream_quirks():
    betas = cosine_beta_schedule(250)
    assert betas.shape == (250,)
    assert betas.max() == pytest.approx(0.999)
    assert (betas > 0).all()


def _fixed_batches(n_voxels=16):
    torch.manual_seed(1)
    image = torch.rand(1, 1, n_voxels, n_voxels, n_voxels) * 2 - 1
    mask = (torch.rand(1, 2, n_voxels, n_voxels, n_voxels) > 0.5).float() * 2 - 1
    while True:
        yield {"input": mask, "target": image}


def test_training_steps_decrease_the_loss_on_a_fixed_batch():
    torch.manual_seed(0)
    diffusion = GaussianDiffusion(UNet3D(SMALL), timesteps=20)
    variant = Variant("baseline", False, False, False)
    settings = configured(TrainSettings, "train", lr=1e-3, gradient_accumulation=1)
    # A fixed step and noise make the objective deterministic, so a few Adam steps must reduce it.
    generator = torch.Generator()

    def loss_at_fixed_noise():
        generator.manual_seed(5)
        with torch.no_grad():
            batch = next(_fixed_batches())
            return diffusion.loss(batch["target"], batch["input"], generator).item()

    trainer = Trainer(diffusion, _fixed_batches(), Placement(variant, torch.device("cpu")), settings, generator)
    before = loss_at_fixed_noise()
    for _ in range(4):
        generator.manual_seed(5)
        trainer.step()
    assert loss_at_fixed_noise() < before


def test_ema_is_reset_to_the_model_before_the_start_step():
    torch.manual_seed(0)
    diffusion = GaussianDiffusion(UNet3D(SMALL), timesteps=10)
    settings = configured(TrainSettings, "train", lr=1e-3, gradient_accumulation=2, ema_update_every=10)
    trainer = Trainer(diffusion, _fixed_batches(), Placement(Variant("b", False, False, False), torch.device("cpu")),
                      settings, torch.Generator())
    losses = trainer.step()
    assert len(losses) == 2  # two micro-batches per optimizer step
    for ema_p, p in zip(trainer.ema_model.parameters(), diffusion.parameters()):
        assert torch.equal(ema_p, p)
    trainer.step()  # step 1: no EMA update (every 10 steps)
    assert not all(torch.equal(a, b) for a, b in zip(trainer.ema_model.parameters(), diffusion.parameters()))


def test_sampler_shapes_clamping_and_final_step_without_noise():
    torch.manual_seed(0)
    diffusion = GaussianDiffusion(UNet3D(SMALL), timesteps=6)
    # Make the network predict large noise so that x0 must be clamped to [-1, 1].
    torch.nn.init.constant_(diffusion.denoiser.out[-1].bias, 50.0)
    condition = torch.ones(1, 2, 16, 16, 16)
    steps = list(diffusion.sample_steps(condition, torch.Generator().manual_seed(0)))
    assert [t for t, _ in steps] == [5, 4, 3, 2, 1, 0]
    final = steps[-1][1]
    assert final.shape == (1, 1, 16, 16, 16)
    # At t = 0 the mean is returned without noise; coefficient 1 of the clamped x0 dominates: in [-1, 1].
    assert final.abs().max() <= 1.0 + 1e-5
    x = torch.randn(1, 1, 16, 16, 16) * 10
    t0 = diffusion.p_sample(x, condition, 0)
    assert torch.equal(t0, diffusion.p_sample(x, condition, 0))  # deterministic at t = 0
    assert t0.abs().max() <= 1.0 + diffusion.posterior_mean_coef2[0] * x.abs().max()
    assert len(list(diffusion.sample_steps(condition, max_steps=2))) == 2
