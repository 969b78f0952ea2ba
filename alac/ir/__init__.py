"""The IR: tracing (trace), ModelIR (model_ir), derivation passes (derive), the stage graph
(stage_graph), and the pipeline that runs them (pipeline.lower)."""
