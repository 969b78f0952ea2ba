"""alac.nn: a DSL model's Aggregate as a torch module, for models with a deep part.

    wide = SparseAggregate(FM(k=16), n_features=1_000_000, optimizer="adagrad", lr=0.05)
    accums = wide(indices, offsets, values)          # {"wx": [B], "vx": [B, 16], "v2x2": [B, 16]}
    logit = accums["wx"] + 0.5 * (accums["vx"] ** 2 - accums["v2x2"]).sum(1) + deep(dense)
    loss = F.binary_cross_entropy_with_logits(logit, labels)
    loss.backward()                                  # the sparse rows are updated here
    dense_optimizer.step()                           # any torch.optim for the deep part

forward sums the model's per-edge contributions into its accums for a batch of sparse rows given as
CSR (int64 indices, offsets of B + 1 entries, optional float32 values); backward takes dLoss/dAccum
from autograd and applies the model's optimizer (its rule, state and L1/L2) to the rows the batch
touched, at the params of that moment: no dense gradient tensor, no separate optimizer step. The
tables and optimizer state are buffers (in state_dict, moved by .to()); the model's globals, loss
and predict are not used and may be left out (the deep part has its own biases and loss); with
fields, every field of a sample pools into its own bag. The sums and updates run as the
model's reference programs (vectorized torch gathers and index_add, alac.runtime.execution.reference), the
programs every generated kernel is tested against. GraphedStep replays a whole training step
(forward, the tables' update in backward, the dense optimizer) from a CUDA graph. HostCachedAggregate
keeps the rows in host memory and the hot ones on the GPU, for tables larger than its memory.
"""

from alac.nn.aggregate import TABLE_DTYPES, SparseAggregate
from alac.nn.graphed import GraphedStep, whole_step
from alac.nn.host_cached import HostCachedAggregate
from alac.nn.packed import KeyedBags, PackedEmbeddingBags, Table, pack_tables, table_accesses

__all__ = ["TABLE_DTYPES", "GraphedStep", "HostCachedAggregate", "KeyedBags", "PackedEmbeddingBags",
           "SparseAggregate", "Table", "pack_tables", "table_accesses", "whole_step"]
