"""A jraph-compatible graph container and GCN propagation on an edge list with `jax.ops.segment_sum`.

`GraphsTuple` carries jraph's field names (nodes, edges, senders, receivers, n_node, n_edge, globals), so a jraph
graph converts with `GraphsTuple(*jraph_graph)` (same field order) without the zoo depending on jraph. Several
graphs may be batched the jraph way (node indices global, `n_node`/`n_edge` one entry per graph).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from icml26zoo.validation import check_int_array

__all__ = ["GraphsTuple", "check_graph", "gcn_edge_weights", "graph_from_edges", "normalised_adjacency",
           "propagate"]


class GraphsTuple(NamedTuple):
    """jraph's layout: nodes [N, D] (node features), edges [E, ...] or None, senders [E] and receivers [E]
    (int node indices; a message flows sender -> receiver), n_node [G] and n_edge [G] (per-graph counts, G
    graphs), globals [G, ...] or None."""

    nodes: Any
    edges: Any
    senders: Any
    receivers: Any
    n_node: Any
    n_edge: Any
    globals: Any


def _concrete(array: Any) -> np.ndarray | None:
    """The values of `array`, or None inside a trace (where index checks cannot run)."""
    try:
        return np.asarray(array)
    except jax.errors.TracerArrayConversionError:
        return None


def _check_edge_indices(senders: Any, receivers: Any, num_nodes: int) -> int:
    """Shapes, dtypes and (when concrete) ranges of the edge list; returns E."""
    (num_edges,) = check_int_array("senders", senders, (None,), "[E]")
    check_int_array("receivers", receivers, (num_edges,), "[E] (as many as senders)")
    for field, index in (("senders", senders), ("receivers", receivers)):
        values = _concrete(index)
        if values is not None and values.size and (values.min() < 0 or values.max() >= num_nodes):
            raise ValueError(f"{field} must hold node indices in [0, {num_nodes}), got values in "
                             f"[{values.min()}, {values.max()}]")
    s, r = _concrete(senders), _concrete(receivers)
    if s is not None and r is not None and np.any(s == r):
        raise ValueError(f"senders/receivers must hold no self-loops (GCN propagation adds them), got "
                         f"{int(np.sum(s == r))} edges with sender == receiver")
    return num_edges


def check_graph(graph: GraphsTuple) -> GraphsTuple:
    """Checks a GraphsTuple (ValueError naming the field): nodes [N, D], senders/receivers [E] ints in [0, N)
    without self-loops, n_node [G] summing to N and n_edge [G] summing to E, edges with E rows if given."""
    if not isinstance(graph, GraphsTuple):
        raise ValueError(f"graph must be a GraphsTuple, got {type(graph).__name__}")
    shape = getattr(graph.nodes, "shape", None)
    if shape is None or len(shape) != 2:
        raise ValueError(f"graph.nodes must be an array of shape [N, D], got {shape}")
    num_edges = _check_edge_indices(graph.senders, graph.receivers, shape[0])
    if graph.edges is not None and np.shape(graph.edges)[:1] != (num_edges,):
        raise ValueError(f"graph.edges must have {num_edges} rows (one per edge), got shape {np.shape(graph.edges)}")
    check_int_array("graph.n_node", graph.n_node, (None,), "[G]")
    check_int_array("graph.n_edge", graph.n_edge, np.shape(graph.n_node), "[G] (as many as n_node)")
    for field, counts, total in (("graph.n_node", graph.n_node, shape[0]), ("graph.n_edge", graph.n_edge, num_edges)):
        values = _concrete(counts)
        if values is not None and int(values.sum()) != total:
            raise ValueError(f"{field} must sum to {total}, got {values.tolist()}")
    return graph


def graph_from_edges(nodes: Any, senders: Any, receivers: Any) -> GraphsTuple:
    """One graph from node features [N, D] and an edge list (senders, receivers [E]); checked."""
    senders, receivers = jnp.asarray(senders), jnp.asarray(receivers)
    graph = GraphsTuple(nodes=jnp.asarray(nodes), edges=None, senders=senders, receivers=receivers,
                        n_node=jnp.asarray([np.shape(nodes)[0]]), n_edge=jnp.asarray([senders.shape[0]]),
                        globals=None)
    return check_graph(graph)


def gcn_edge_weights(senders: jax.Array, receivers: jax.Array, num_nodes: int) -> tuple[jax.Array, jax.Array,
                                                                                        jax.Array]:
    """The edge list with one self-loop per node appended, (senders [E + N], receivers [E + N], weights [E + N]):
    w_ij = 1 / sqrt(deg_i deg_j), deg = in-degree + 1 (Kipf & Welling's D^-1/2 (A + I) D^-1/2 for a symmetric
    edge list, i.e. one that holds both directions of every undirected edge)."""
    loops = jnp.arange(num_nodes, dtype=senders.dtype)
    senders, receivers = jnp.concatenate([senders, loops]), jnp.concatenate([receivers, loops])
    degree = jax.ops.segment_sum(jnp.ones(receivers.shape, jnp.float32), receivers, num_segments=num_nodes)
    inv_sqrt = jax.lax.rsqrt(degree)  # degree >= 1 thanks to the self-loops
    return senders, receivers, inv_sqrt[senders] * inv_sqrt[receivers]


def propagate(x: jax.Array, senders: jax.Array, receivers: jax.Array) -> jax.Array:
    """out_i = Σ_{j -> i, and j = i} w_ij x_j, one GCN propagation of features x [N, F] (returns [N, F]); the
    edge list is checked when its values are concrete (outside `jit`)."""
    num_nodes = x.shape[0]
    _check_edge_indices(senders, receivers, num_nodes)
    senders, receivers, weights = gcn_edge_weights(senders, receivers, num_nodes)
    messages = x[senders] * weights[:, None].astype(x.dtype)
    return jax.ops.segment_sum(messages, receivers, num_segments=num_nodes)


def normalised_adjacency(senders: Any, receivers: Any, num_nodes: int) -> np.ndarray:
    """The dense D^-1/2 (A + I) D^-1/2 [N, N] of an edge list (A_ij = 1 for an edge j -> i), for checks on small
    graphs."""
    adjacency = np.eye(num_nodes)
    adjacency[np.asarray(receivers), np.asarray(senders)] += 1.0
    inv_sqrt = 1.0 / np.sqrt(adjacency.sum(axis=1))
    return inv_sqrt[:, None] * adjacency * inv_sqrt[None, :]
