"""torch.compile's own guards, minimal, proven and explained: `explain_compile`.

The modules: `compile` (`explain_compile`, the entry point), `frames` (one compiled frame
read into a `Frame`), `frame` (Dynamo's guards, pins and specializations of a frame),
`provenance` (where a guard came from), `naming` (a frame's inputs as the user named them),
`attribution` (guards Dynamo left without a user line), `dynamo_hooks` (how Dynamo is run),
`report` (`CompileReport`), `failure` (`CompileExplainError`).
"""
