"""Flow-matching schedulers with the shift parameter, as pure functions of a state pytree.

* `EulerScheduler` — the schedule and update of diffusers' `FlowMatchEulerDiscreteScheduler`
  (shift, no dynamic shifting): x ← x + (σ_{i+1} − σ_i)·v.
* `UniPCScheduler` — diffusers' `UniPCMultistepScheduler` with `use_flow_sigmas=True`,
  `prediction_type="flow_prediction"`, `solver_type="bh2"`, `predict_x0=True`,
  `lower_order_final=True`, final sigma 0 — the configuration Wan 2.1 samples with — for
  solver orders 1 and 2 (UniP predictor + UniC corrector).

The schedules (sigmas, model timesteps) are computed once on the host in float64 like the
reference; the step functions take the step index from the state, so one jitted
`denoise_step` serves every step.
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
import numpy as np

F32 = jnp.float32


def _shift(s: np.ndarray, shift: float) -> np.ndarray:
    return shift * s / (1 + (shift - 1) * s)


@dataclasses.dataclass(frozen=True)
class EulerScheduler:
    num_steps: int
    shift: float = 5.0
    num_train_timesteps: int = 1000

    @functools.cached_property
    def sigmas(self) -> np.ndarray:
        n = self.num_train_timesteps
        train = _shift(np.linspace(1, n, n, dtype=np.float32)[::-1].copy() / n, self.shift).astype(np.float32)
        t = np.linspace(train[0] * n, train[-1] * n, self.num_steps)
        s = _shift((t / n).astype(np.float32), self.shift).astype(np.float32)
        return np.concatenate([s, np.zeros(1, np.float32)])

    @functools.cached_property
    def timesteps(self) -> np.ndarray:
        """The timestep passed to the transformer at each step (float32)."""
        return (self.sigmas[:-1] * self.num_train_timesteps).astype(np.float32)

    def init_state(self, sample: jnp.ndarray) -> dict:
        return {"step": jnp.zeros((), jnp.int32)}

    def timestep(self, state: dict) -> jnp.ndarray:
        return jnp.asarray(self.timesteps)[state["step"]]

    def step(self, state: dict, model_output: jnp.ndarray, sample: jnp.ndarray) -> tuple[jnp.ndarray, dict]:
        sig = jnp.asarray(self.sigmas)
        i = state["step"]
        prev = sample.astype(F32) + (sig[i + 1] - sig[i]) * model_output.astype(F32)
        return prev.astype(model_output.dtype), {"step": i + 1}


@dataclasses.dataclass(frozen=True)
class UniPCScheduler:
    num_steps: int
    shift: float = 5.0
    solver_order: int = 2
    num_train_timesteps: int = 1000

    def __post_init__(self) -> None:
        if self.solver_order not in (1, 2):
            raise ValueError(f"UniPC solver_order {self.solver_order} is not supported (1 or 2; Wan uses 2)")

    @functools.cached_property
    def _sched(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.num_train_timesteps
        s = np.linspace(1, 1 / n, self.num_steps + 1)[:-1]
        s = _shift(s, self.shift)
        if abs(s[0] - 1) < 1e-6:
            s[0] -= 1e-6
        timesteps = (s * n).copy().astype(np.int64)
        return np.concatenate([s, [0.0]]).astype(np.float32), timesteps

    @property
    def sigmas(self) -> np.ndarray:
        return self._sched[0]

    @property
    def timesteps(self) -> np.ndarray:
        """Integer model timesteps (as the reference passes them), as float32."""
        return self._sched[1].astype(np.float32)

    def init_state(self, sample: jnp.ndarray) -> dict:
        z = jnp.zeros(sample.shape, F32)
        return {
            "step": jnp.zeros((), jnp.int32),
            "m_prev": z,  # converted model output (x0) two calls ago
            "m_last": z,  # converted model output at the previous call
            "last_sample": z,
            "prev_order": jnp.zeros((), jnp.int32),
            "lower_order_nums": jnp.zeros((), jnp.int32),
        }

    def timestep(self, state: dict) -> jnp.ndarray:
        return jnp.asarray(self.timesteps)[state["step"]]

    def step(self, state: dict, model_output: jnp.ndarray, sample: jnp.ndarray) -> tuple[jnp.ndarray, dict]:
        """diffusers' `step`: the UniC corrector of the sample the previous predictor produced, then the
        UniP predictor of the next sample from it."""
        sig = jnp.asarray(self.sigmas, F32)
        i = state["step"]
        x = sample.astype(F32)
        v = model_output.astype(F32)
        x0 = x - sig[i] * v  # flow prediction → data prediction
        corrected = _unic_corrected(state, sig, i, x0)
        x = jnp.where(i > 0, corrected, x)

        # history shift
        m_prev, m_last = state["m_last"], x0
        n = self.num_steps
        order = jnp.minimum(self.solver_order, n - i)  # lower_order_final
        order = jnp.minimum(order, state["lower_order_nums"] + 1)
        prev = _unip_predicted(sig, i, x, x0, m_prev, order)

        new_state = {
            "step": i + 1,
            "m_prev": m_prev,
            "m_last": m_last,
            "last_sample": x,
            "prev_order": order.astype(jnp.int32),
            "lower_order_nums": jnp.minimum(state["lower_order_nums"] + 1, self.solver_order).astype(jnp.int32),
        }
        return prev.astype(sample.dtype), new_state


def _lam(s: jnp.ndarray) -> jnp.ndarray:
    """UniPC's λ of a flow sigma: log(α / σ) with α = 1 − σ."""
    return jnp.log(1 - s) - jnp.log(s)


def _coeffs(s_t: jnp.ndarray, s_s0: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """(h, h·φ₁, B(h), b₁, b₂) of the bh2 solver for a step from σ_s0 to σ_t (data prediction)."""
    h = _lam(s_t) - _lam(s_s0)
    hh = -h
    h_phi_1 = jnp.expm1(hh)
    b_h = jnp.expm1(hh)
    h_phi_k = h_phi_1 / hh - 1
    b1 = h_phi_k / b_h
    b2 = (h_phi_k / hh - 0.5) * 2 / b_h
    return h, h_phi_1, b_h, b1, b2


def _unic_corrected(state: dict, sig: jnp.ndarray, i: jnp.ndarray, x0: jnp.ndarray) -> jnp.ndarray:
    """diffusers' `multistep_uni_c_bh_update`: the last sample corrected with the new data prediction
    (second order when the previous step was)."""
    m0, m1 = state["m_last"], state["m_prev"]
    s_t, s_s0 = sig[i], sig[jnp.maximum(i - 1, 0)]
    h, h_phi_1, b_h, b1, b2 = _coeffs(s_t, s_s0)
    alpha_t = 1 - s_t
    base = s_t / s_s0 * state["last_sample"] - alpha_t * h_phi_1 * m0
    d1_t = x0 - m0
    corr1 = base - alpha_t * b_h * (0.5 * d1_t)
    rk = (_lam(sig[jnp.maximum(i - 2, 0)]) - _lam(s_s0)) / h
    d1 = (m1 - m0) / rk
    rho0 = (b1 - b2) / (1 - rk)
    rho1 = b1 - rho0
    corr2 = base - alpha_t * b_h * (rho0 * d1 + rho1 * d1_t)
    return jnp.where(state["prev_order"] >= 2, corr2, corr1)


def _unip_predicted(sig: jnp.ndarray, i: jnp.ndarray, x: jnp.ndarray, x0: jnp.ndarray, m_prev: jnp.ndarray,
                    order: jnp.ndarray) -> jnp.ndarray:
    """diffusers' `multistep_uni_p_bh_update`: the next sample, of the given order."""
    s_t, s_s0 = sig[i + 1], sig[i]
    h, h_phi_1, b_h, _, _ = _coeffs(s_t, s_s0)
    alpha_t = 1 - s_t
    pred1 = s_t / s_s0 * x - alpha_t * h_phi_1 * x0
    rk = (_lam(sig[jnp.maximum(i - 1, 0)]) - _lam(s_s0)) / h
    d1 = (m_prev - x0) / rk
    pred2 = pred1 - alpha_t * b_h * (0.5 * d1)
    return jnp.where(order >= 2, pred2, pred1)


Scheduler = EulerScheduler | UniPCScheduler
