"""Graph neural networks on edge lists (`jax.ops.segment_sum`, a jraph-compatible `GraphsTuple`): a two-layer
GCN; GNNmim and the missing-feature protocols of Ferrini et al. (ICML 2026, from the official code); adaptive
node feature selection by permutation importance of Azizpour, Navarro, Segarra (ICML 2026, a reconstruction);
CSBM graphs with planted informative features."""

from icml26zoo.graphs.gcn import GCN
from icml26zoo.graphs.graph import (
    GraphsTuple,
    check_graph,
    gcn_edge_weights,
    graph_from_edges,
    normalised_adjacency,
    propagate,
)
from icml26zoo.graphs.metrics import accuracy, macro_f1
from icml26zoo.graphs.missing import (
    MECHANISMS,
    cdmnar,
    cdmnar_important_cells,
    fdmnar,
    fdmnar_signal_rows,
    gnnmim_inputs,
    ldmcar,
    make_missing,
    mean_impute,
    mutual_information,
    smcar,
    umcar,
)
from icml26zoo.graphs.selection import permutation_importance, prune_features
from icml26zoo.graphs.synthetic import CSBM, csbm

__all__ = ["CSBM", "GCN", "GraphsTuple", "MECHANISMS", "accuracy", "cdmnar", "cdmnar_important_cells",
           "check_graph", "csbm", "fdmnar", "fdmnar_signal_rows", "gcn_edge_weights", "gnnmim_inputs",
           "graph_from_edges", "ldmcar", "macro_f1", "make_missing", "mean_impute", "mutual_information",
           "normalised_adjacency", "permutation_importance", "propagate", "prune_features", "smcar", "umcar"]
