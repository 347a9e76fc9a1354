"""A two-layer GCN (Kipf & Welling) as a Flax NNX module, on an edge list (`graph.propagate`).

Layer: H' = Â (H W) + b with Â = D^-1/2 (A + I) D^-1/2 (the bias after propagation, as PyG's GCNConv). Dropout
takes an explicit key (None: evaluation mode), so the module holds parameters only and a training loop can
`nnx.split` it into a pure function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.graphs.graph import propagate
from icml26zoo.validation import check_int, check_unit_interval

__all__ = ["GCN"]


class GCN(nnx.Module):
    """logits [N, C] = Â · dropout(relu(Â X W1 + b1)) W2 + b2 for node features X [N, F].

    Args:
      in_features: F.
      hidden: width of the hidden layer (GNNmim: 128).
      num_classes: C.
      dropout: rate after the hidden layer (0.5), applied only when a `dropout_key` is given.
      rngs: initialisation randomness.
    """

    def __init__(self, in_features: int, hidden: int, num_classes: int, *, dropout: float = 0.5,
                 rngs: nnx.Rngs) -> None:
        check_int("in_features", in_features)
        check_int("hidden", hidden)
        check_int("num_classes", num_classes, minimum=2)
        self.dropout = check_unit_interval("dropout", dropout)
        self.hidden_layer = nnx.Linear(in_features, hidden, use_bias=False, rngs=rngs)
        self.output_layer = nnx.Linear(hidden, num_classes, use_bias=False, rngs=rngs)
        self.hidden_bias = nnx.Param(jnp.zeros((hidden,)))
        self.output_bias = nnx.Param(jnp.zeros((num_classes,)))

    def __call__(self, x: jax.Array, senders: jax.Array, receivers: jax.Array, *,
                 dropout_key: jax.Array | None = None) -> jax.Array:
        """x [N, F], senders/receivers [E] (both directions of each undirected edge, no self-loops) -> [N, C]."""
        hidden = jax.nn.relu(propagate(self.hidden_layer(x), senders, receivers) + self.hidden_bias[...])
        if dropout_key is not None and self.dropout > 0:
            keep = jax.random.bernoulli(dropout_key, 1.0 - self.dropout, hidden.shape)
            hidden = jnp.where(keep, hidden / (1.0 - self.dropout), 0.0)
        return propagate(self.output_layer(hidden), senders, receivers) + self.output_bias[...]
