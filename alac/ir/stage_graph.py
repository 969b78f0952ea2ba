"""The stage graph: Aggregate, Loss, Apply, Update and Predict as a networkx DAG with data edges.

Each stage runs per edge or per sample of a chunk; each data edge says what flows and whether it is
chunk-local (per-sample values of the chunk's own rows: accums, deltas) or global (parameter
gradients, which every chunk adds into). Fusion contracts chunk-local edges, so the fused flow kernel
is Aggregate -> Loss -> Apply in one program with accums and deltas in registers, and Update stays a
kernel of its own (it must see every chunk's gradient: the mini-batch barrier). The stage-based
plan contracts nothing: every stage is a kernel and chunk-local data goes through global memory.
"""

from __future__ import annotations

import networkx as nx

STAGES = ("aggregate", "loss", "apply", "update", "predict")


def build_stage_graph(ir):
    graph = nx.DiGraph(model=ir.name)
    graph.add_node("aggregate", granularity="edge", role="train")
    graph.add_node("loss", granularity="sample", role="train")
    graph.add_node("apply", granularity="edge", role="train")
    graph.add_node("update", granularity="feature", role="train")
    graph.add_node("predict", granularity="sample", role="predict")
    accums = tuple(a.name for a in ir.accums)
    graph.add_edge("aggregate", "loss", data=accums, local=True)
    graph.add_edge("loss", "apply", data=tuple(d.name for d in ir.accum_deltas), local=True)
    graph.add_edge("apply", "update", data=tuple(d.name for d in ir.param_grads), local=False)
    graph.add_edge("loss", "update", data=tuple(d.name for d in ir.global_grads), local=False)
    graph.add_edge("aggregate", "predict", data=accums, local=True)
    return graph


def kernel_groups(graph, kernels="fused", role="train"):
    """The kernels of a plan: lists of stages, in launch order.

    kernels="fused" merges stages joined by chunk-local data; "stage" keeps every stage apart.
    Prediction re-runs aggregate, so it is grouped separately from training.
    """
    if kernels not in ("fused", "stage"):
        raise ValueError(f"kernels must be 'fused' or 'stage', got {kernels!r}")
    nodes = [n for n in nx.topological_sort(graph) if graph.nodes[n]["role"] == role]
    if role == "predict":
        nodes = ["aggregate"] + nodes
    sub = nx.DiGraph()
    sub.add_nodes_from(nodes)
    sub.add_edges_from((u, v, d) for u, v, d in graph.edges(data=True) if u in nodes and v in nodes)
    if kernels == "stage":
        return [[n] for n in nodes]
    merged = nx.Graph()
    merged.add_nodes_from(nodes)
    merged.add_edges_from((u, v) for u, v, d in sub.edges(data=True) if d["local"])
    order = {n: i for i, n in enumerate(nodes)}
    groups = [sorted(c, key=order.get) for c in nx.connected_components(merged)]
    return sorted(groups, key=lambda g: order[g[0]])
