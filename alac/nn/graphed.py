"""Training steps replayed from CUDA graphs (alac.nn): a step of small tables and MLPs is hundreds of
kernels of a few microseconds each, and launching them one by one from Python is what bounds it.

alac's tables step inside backward without a host round trip and without shapes that depend on the
data (no coalesced sparse gradients, no torch.unique), so a whole step (forward, backward with the
tables' optimizer, the dense optimizer) can be captured once and replayed as one launch; a plain
PyTorch model with sparse embedding gradients cannot be captured (coalescing sizes its output from
the data).
"""

from __future__ import annotations

import torch

from alac.errors import OptionError


def whole_step(loss_of, optimizers, after_backward=None):
    """A step function for GraphedStep: loss_of(*tensors), the dense optimizers' gradients zeroed in
    place, its backward (the tables step inside it), after_backward() (e.g. the gradients averaged over
    ranks), every optimizer's step; returns the loss detached."""
    def step(*tensors):
        loss = loss_of(*tensors)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=False)
        loss.backward()
        if after_backward is not None:
            after_backward()
        for optimizer in optimizers:
            optimizer.step()
        return loss.detach()
    return step


class GraphedStep:
    """step(*tensors) runs fn(*tensors), one whole training step, and returns its outputs (tensors).

    fn (e.g. whole_step's) must only queue GPU work (no host round trip: trusted batches, check_batches
    off) and zero the dense optimizers' gradients in place (zero_grad(set_to_none=False)), so that every graph writes
    the same gradient tensors, and return detached outputs (a loss that kept its autograd graph
    alive would keep the previous step's gradient streams); optimizers that step on the GPU need
    capturable=True (Adam's step count is then a device tensor). Inputs may be None (not copied).

    The first `warmup` calls with a set of input shapes run fn eagerly on a side stream (as capture
    wants: its memory and the BLAS workspaces exist before it); the next call with those shapes
    captures fn into a graph and replays it (capturing runs nothing), and later calls copy their
    inputs into the graph's and replay it. Every call is exactly one step on its own inputs, so a
    run trains as the eager one does. At most `max_graphs` input shapes get a graph (each holds its
    own memory); other shapes (an epoch's last short batch, rows of varying length) run eagerly, as
    does everything on a CPU. A replayed step's outputs are the graph's tensors: read them before
    the next call.
    """

    def __init__(self, fn, warmup=2, max_graphs=2):
        self.fn, self.warmup, self.max_graphs = fn, warmup, max_graphs
        self._seen = {}          # input shapes -> eager calls so far
        self.graphs = {}         # input shapes -> (graph, static inputs, static outputs)
        self._side = None        # the warm-up steps' stream (one: autograd keeps a stream per parameter)

    @staticmethod
    def _key(tensors):
        return tuple(None if t is None else (tuple(t.shape), t.dtype, t.device) for t in tensors)

    def __call__(self, *tensors, constants=()):
        """constants: the host values fn reads besides the tensors (a graph holds them as they were at
        its capture: calls with other constants get graphs of their own)."""
        on_gpu = any(t is not None and t.is_cuda for t in tensors)
        if not on_gpu:
            return self.fn(*tensors)
        key = (self._key(tensors), constants)
        graphed = self.graphs.get(key)
        if graphed is not None:
            graph, inputs, outputs = graphed
            for static, tensor in zip(inputs, tensors):
                if static is not None:
                    static.copy_(tensor)
            graph.replay()
            return outputs
        seen = self._seen.get(key, 0)
        if seen < self.warmup or len(self.graphs) >= self.max_graphs:
            self._seen[key] = seen + 1
            return self._on_side_stream(tensors)
        return self._capture(key, tensors)

    def _on_side_stream(self, tensors):
        side = self._side = self._side or torch.cuda.Stream()
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            outputs = self.fn(*tensors)
        main.wait_stream(side)
        for output in outputs if isinstance(outputs, tuple) else (outputs,):
            if isinstance(output, torch.Tensor):
                output.record_stream(main)
        return outputs

    def _capture(self, key, tensors):
        inputs = [None if t is None else t.clone() for t in tensors]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                outputs = self.fn(*inputs)
        except RuntimeError as error:
            raise OptionError(f"a training step could not be captured as a CUDA graph ({error}); train without "
                              "them (cuda_graphs=False, alac train --no-cuda-graphs)") from error
        self.graphs[key] = (graph, inputs, outputs)
        graph.replay()
        return outputs
