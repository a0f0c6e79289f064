"""The running batch of one latent shape as device tensors, and the DDIM schedules as device tables.

Between two denoising steps samples join and leave; within a step the batch is a handful of tensors, one row per
sample: latents ``(N, C, h, w)``, unconditional and conditional prompt embeddings, guidance scales and each row's
position in the schedule table. A step is then the stock pipeline's arithmetic on the whole batch: one UNet call over
``[unconditional rows of the CFG samples; conditional rows of all]`` (the stock row layout, ``torch.cat([latents] *
2)``), the guidance ``uncond + g * (cond - uncond)`` and, for samples on a shared DDIM schedule, one DDIM step whose
per-row coefficients come from a table gathered on the device: no Python per sample, no host sync per step.

The DDIM table holds, per timestep of each schedule, the scalars ``DDIMScheduler.step`` computes (``sqrt(1 - a_t)``,
``sqrt(a_t)``, ``sqrt(a_prev)``, ``sqrt(1 - a_prev - std**2)``), computed by the same float32 expressions, so each row
gets the same bits as the scheduler's own step. One difference is PyTorch's, not ours: CUDA divides by a CPU scalar as
a multiplication by its float32 reciprocal, so on CUDA the table holds ``1 / sqrt(a_t)`` and the step multiplies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

Sample = Any  #: a ``_denoise.Sample`` (by its identity only: the batch reads none of its fields; no import cycle)


def to_device(tensor: Any, device: torch.device) -> Any:
    """Return a CPU ``tensor`` on ``device`` without waiting for the device (pinned, non-blocking on CUDA)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


class Schedules:
    """The timesteps and DDIM step coefficients of every shared DDIM schedule, one device table each; a schedule of
    ``n`` steps is rows ``offset .. offset + n - 1``."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.reciprocal = device.type == "cuda"  #: the step multiplies by 1 / sqrt(a_t), as CUDA's division does
        self._timesteps: list[int] = []
        self._coefficients: list[list[Any]] = []
        self.timesteps = torch.zeros(0, dtype=torch.long, device=device)  #: (T,) each row's timestep
        self.coefficients = torch.zeros(0, 4, device=device)  #: (T, 4) each row's step coefficients

    def add(self, scheduler: Any) -> int:
        """Append ``scheduler``'s schedule (a ``DDIMScheduler`` after ``set_timesteps``, eta 0); return its offset."""
        offset = len(self._timesteps)
        for t in scheduler.timesteps.tolist():
            self._timesteps.append(int(t))
            self._coefficients.append(self._coefficients_at(scheduler, int(t)))
        self.timesteps = torch.tensor(self._timesteps, dtype=torch.long).to(self.device)
        self.coefficients = torch.stack([torch.stack(row) for row in self._coefficients]).to(self.device)
        return offset

    def _coefficients_at(self, scheduler: Any, timestep: int) -> list[Any]:
        """Return the float32 scalars ``DDIMScheduler.step`` uses at ``timestep`` with eta 0, by its expressions."""
        prev_timestep = timestep - scheduler.config.num_train_timesteps // scheduler.num_inference_steps
        alpha_prod_t = scheduler.alphas_cumprod[timestep]
        alpha_prod_t_prev = (scheduler.alphas_cumprod[prev_timestep] if prev_timestep >= 0
                             else scheduler.final_alpha_cumprod)  # fmt: skip
        beta_prod_t = 1 - alpha_prod_t
        beta_prod_t_prev = 1 - alpha_prod_t_prev  # DDIMScheduler's variance, by its expression (eta 0 zeroes it)
        variance = (beta_prod_t_prev / beta_prod_t) * (1 - alpha_prod_t / alpha_prod_t_prev)
        std_dev_t = 0.0 * variance ** (0.5)
        sqrt_alpha = alpha_prod_t ** (0.5)
        inverse = torch.div(torch.ones((), dtype=sqrt_alpha.dtype), sqrt_alpha)  # CUDA's own: 1.0f / b
        return [beta_prod_t ** (0.5), inverse if self.reciprocal else sqrt_alpha,
                alpha_prod_t_prev ** (0.5), (1 - alpha_prod_t_prev - std_dev_t**2) ** (0.5)]  # fmt: skip


class RunningBatch:
    """The samples of one latent shape being denoised together, as device tensors (see the module's docstring)."""

    def __init__(self, device: torch.device, schedules: Schedules) -> None:
        self.device, self.schedules = device, schedules
        self.samples: list[Sample] = []
        self.rows: dict[Sample, int] = {}  #: each sample's row
        self.latents: Any = None  #: (N, C, h, w)
        self.uncond: Any = None  #: (N, L, D) unconditional embeddings (a sample without CFG: its conditional row)
        self.cond: Any = None  #: (N, L, D)
        self.guidance: Any = None  #: (N, 1, 1, 1) float32
        self.cfg: list[int] = []  #: rows of the samples under CFG
        self.shared = False  #: every sample on a shared DDIM schedule: one vectorized step
        self.unet_pos: Any = None  #: (K + N,) each UNet row's schedule-table position (shared schedules)
        self.embeds: Any = None  #: (K + N, L, D) the UNet call's prompt embeddings
        self._cfg_index: Any = None  #: the CFG rows as a device index (some rows under CFG, not all)

    def align(self, samples: Sequence[Sample]) -> None:
        """Make the batch's rows exactly ``samples``: those gone leave (each keeps its latents), those new join."""
        if len(samples) == len(self.samples) and all(s in self.rows for s in samples):
            return
        given = set(samples)
        staying = [s for s in self.samples if s in given]
        for sample in self.samples:
            if sample not in given:  # it leaves with its latents (a view of its row), as it was before it joined
                row = self.rows[sample]
                sample.latents, sample.batch = self.latents[row:row + 1], None
        joining = [s for s in samples if s not in self.rows]
        if len(staying) < len(self.samples):
            keep = to_device(torch.tensor([self.rows[s] for s in staying], dtype=torch.long), self.device)
            self.latents, self.uncond, self.cond, self.guidance, pos = (
                t.index_select(0, keep) for t in (self.latents, self.uncond, self.cond, self.guidance, self._pos()))
        else:
            pos = self._pos()
        if joining:
            new_pos = [-1 if s.offset is None else s.offset + s.index for s in joining]
            scales = torch.tensor([s.request.guidance_scale for s in joining], dtype=torch.float32)
            parts = [torch.cat([s.latents for s in joining]), torch.cat([s.embeds[:1] for s in joining]),
                     torch.cat([s.embeds[-1:] for s in joining]), to_device(scales.view(-1, 1, 1, 1), self.device),
                     to_device(torch.tensor(new_pos, dtype=torch.long), self.device)]  # fmt: skip
            olds = [self.latents, self.uncond, self.cond, self.guidance, pos] if staying else [None] * 5
            self.latents, self.uncond, self.cond, self.guidance, pos = (
                new if old is None else torch.cat([old, new]) for old, new in zip(olds, parts, strict=True))
            for sample in joining:
                sample.latents, sample.batch = None, self
        self.samples = staying + joining
        self.rows = {s: i for i, s in enumerate(self.samples)}
        self._layout(pos)

    def _pos(self) -> Any:
        """Return each sample's schedule-table position (the tail of the UNet rows' positions)."""
        if self.unet_pos is None:
            return torch.zeros(0, dtype=torch.long, device=self.device)
        return self.unet_pos[len(self.cfg):]

    def _layout(self, pos: Any) -> None:
        """Lay out the UNet call's rows: the CFG samples' unconditional rows, then every sample's conditional row."""
        self.cfg = [i for i, s in enumerate(self.samples) if s.cfg]
        self.shared = all(s.offset is not None for s in self.samples)
        if not self.samples:
            self.unet_pos = self.embeds = self._cfg_index = None
            return
        if len(self.cfg) == len(self.samples):
            self._cfg_index = None
            self.unet_pos, self.embeds = torch.cat([pos, pos]), torch.cat([self.uncond, self.cond])
        elif not self.cfg:
            self._cfg_index = None
            self.unet_pos, self.embeds = pos.clone(), self.cond
        else:
            self._cfg_index = to_device(torch.tensor(self.cfg, dtype=torch.long), self.device)
            self.unet_pos = torch.cat([pos.index_select(0, self._cfg_index), pos])
            self.embeds = torch.cat([self.uncond.index_select(0, self._cfg_index), self.cond])

    def unet_inputs(self) -> tuple[Any, Any]:
        """Return the UNet call's latents and timesteps, one row per UNet row (shared schedules)."""
        return self._rows_of(self.latents), self.schedules.timesteps[self.unet_pos]

    def unet_inputs_each(self) -> tuple[Any, Any]:
        """Return the UNet call's latents and timesteps with each sample's own scheduler (``scale_model_input``)."""
        scaled, steps = [], []
        for i, sample in enumerate(self.samples):
            t = sample.scheduler.timesteps[sample.index]
            scaled.append(sample.scheduler.scale_model_input(self.latents[i:i + 1], t))
            steps.append(t.reshape(1))
        return self._rows_of(torch.cat(scaled)), self._rows_of(torch.cat(steps).to(self.device))

    def _rows_of(self, per_sample: Any) -> Any:
        if len(self.cfg) == len(self.samples):
            return torch.cat([per_sample, per_sample])
        if not self.cfg:
            return per_sample
        return torch.cat([per_sample.index_select(0, self._cfg_index), per_sample])

    def guide(self, noise: Any) -> Any:
        """Return each sample's noise prediction from the UNet's rows: ``uncond + g * (cond - uncond)`` under CFG
        (the stock pipeline's arithmetic, row by row), the conditional row alone without."""
        k = len(self.cfg)
        if k == 0:
            return noise
        uncond, cond = noise[:k], noise[k:]
        if k == len(self.samples):
            return uncond + self.guidance * (cond - uncond)
        pred = cond.clone()
        guided = cond.index_select(0, self._cfg_index)
        scales = self.guidance.index_select(0, self._cfg_index)
        pred.index_copy_(0, self._cfg_index, uncond + scales * (guided - uncond))
        return pred

    def step_shared(self, pred: Any) -> None:
        """Take one DDIM step (eta 0, epsilon prediction) of every row, as ``DDIMScheduler.step`` does per sample."""
        coefficients = self.schedules.coefficients[self._pos()]
        sqrt_beta, alpha_term, sqrt_alpha_prev, direction = (coefficients[:, j, None, None, None] for j in range(4))
        original = self.latents - sqrt_beta * pred
        original = original * alpha_term if self.schedules.reciprocal else original / alpha_term
        self.latents = sqrt_alpha_prev * original + direction * pred
        self.unet_pos.add_(1)  # every row's next timestep

    def step_each(self, pred: Any) -> None:
        """Step each sample with its own scheduler (schedulers that keep state, or other arithmetic)."""
        stepped = []
        for i, sample in enumerate(self.samples):
            t = sample.scheduler.timesteps[sample.index]
            stepped.append(sample.scheduler.step(pred[i:i + 1], t, self.latents[i:i + 1], **sample.extra,
                                                 return_dict=False)[0])  # fmt: skip
        self.latents = torch.cat(stepped)
        self.unet_pos.add_(1)  # a sample on a shared schedule among them keeps its place in the table

    def latents_of(self, samples: Sequence[Sample]) -> Any:
        """Return the latents of ``samples`` (rows of this batch), in that order."""
        rows = [self.rows[s] for s in samples]
        if rows == list(range(len(self.samples))):
            return self.latents
        return self.latents.index_select(0, to_device(torch.tensor(rows, dtype=torch.long), self.device))
