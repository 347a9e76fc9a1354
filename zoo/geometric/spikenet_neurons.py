"""Spiking neurons of SpikeNet : the multi-step LIF neuron and its sigmoid surrogate gradient.

The neuron is SpikingJelly's `MultiStepLIFNode` as the Spiking Point Transformer (SPT, Wu et al., AAAI 2025)
uses it, written from the recurrence (not from their code). Per element and time step t = 1 .. T:

    H[t] = V[t-1] + (X[t] - (V[t-1] - V_reset)) / tau          charge
    S[t] = Heaviside(H[t] - V_th)                               fire (binary, S = 1 when H >= V_th)
    V[t] = H[t] (1 - S[t]) + V_reset S[t]                       hard reset

with V[0] = V_reset. `detach_reset` stops the gradient through S in the reset term, as SPT does. The Heaviside
step has no useful derivative, so training uses the surrogate dS/dH = alpha sigma'(alpha (H - V_th)) with the
logistic sigma (SpikingJelly's default surrogate, alpha = 4; its value at the threshold is alpha / 4), written as a
`jax.custom_vjp` with a named forward (`_spike_forward`) and backward (`_spike_backward`).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def spike(excess: jax.Array, alpha: float) -> jax.Array:
    """Heaviside step of the excess membrane potential H - V_th (any shape) -> spikes in {0, 1}, same dtype.

    The gradient is the sigmoid surrogate alpha sigma(alpha x) (1 - sigma(alpha x)) of the excess x.
    """
    return _heaviside(excess)


def _heaviside(excess: jax.Array) -> jax.Array:
    # SpikingJelly fires at equality (x >= 0), so a membrane exactly at threshold spikes.
    return (jnp.asarray(excess) >= 0).astype(jnp.result_type(excess))


def _spike_forward(excess: jax.Array, alpha: float) -> tuple[jax.Array, jax.Array]:
    """Forward of `spike`: the binary spikes, keeping the excess for the surrogate."""
    return _heaviside(excess), excess


def _spike_backward(alpha: float, excess: jax.Array, upstream: jax.Array) -> tuple[jax.Array]:
    """Backward of `spike`: upstream * alpha sigma'(alpha x) with sigma' = sigma (1 - sigma)."""
    sig = jax.nn.sigmoid(alpha * excess)
    return (upstream * alpha * sig * (1.0 - sig),)


spike.defvjp(_spike_forward, _spike_backward)


@dataclasses.dataclass(frozen=True)
class LIFParams:
    """Constants of the LIF neuron (SPT's neuron-factory defaults: tau 2, V_th 0.5, V_reset 0, alpha 4)."""

    tau: float = 2.0
    v_threshold: float = 0.5
    v_reset: float = 0.0
    alpha: float = 4.0
    detach_reset: bool = True


def lif_step(
    inputs: jax.Array, potential: jax.Array, params: LIFParams
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One time step: input X[t] and potential V[t-1] (same shape) -> (spikes S[t], charged H[t], new V[t])."""
    charged = potential + (inputs - (potential - params.v_reset)) / params.tau
    spikes = spike(charged - params.v_threshold, params.alpha)
    reset_gate = jax.lax.stop_gradient(spikes) if params.detach_reset else spikes
    new_potential = charged * (1.0 - reset_gate) + params.v_reset * reset_gate
    return spikes, charged, new_potential


def multistep_lif(inputs: jax.Array, params: LIFParams = LIFParams()) -> jax.Array:
    """Inputs X [T, ...] (time first) -> spikes S [T, ...] in {0, 1}, starting from V[0] = V_reset."""
    return lif_trace(inputs, params)[0]


def lif_trace(inputs: jax.Array, params: LIFParams = LIFParams()) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Inputs X [T, ...] -> (spikes S, charged potentials H, reset potentials V), each [T, ...]: the full trace.

    T is small in SpikeNet (1-4 steps), so the loop is unrolled rather than scanned.
    """
    potential = jnp.full(inputs.shape[1:], params.v_reset, inputs.dtype)
    trace = []
    for step in range(inputs.shape[0]):
        step_spikes, charged, potential = lif_step(inputs[step], potential, params)
        trace.append((step_spikes, charged, potential))
    spikes, charged, potentials = zip(*trace, strict=True)
    return jnp.stack(spikes), jnp.stack(charged), jnp.stack(potentials)


def masked_rate(spikes: jax.Array, mask: jax.Array) -> jax.Array:
    """Firing rate of spikes [T, *S, C] over the real entries of mask [*S] (bool): a float32 scalar in [0, 1]."""
    expanded = jnp.broadcast_to(mask[None, ..., None], spikes.shape)
    count = jnp.maximum(jnp.sum(expanded).astype(spikes.dtype), 1.0)
    return jnp.sum(jnp.where(expanded, spikes, 0.0)) / count
