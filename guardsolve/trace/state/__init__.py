"""state: the program's state a trace reads (module attributes, globals, cells), recorded, and the check that it still holds."""

from guardsolve.trace.state.recorder import (Attrs, Leaf, Read, Recorder, StateCheck, is_state, leaf_matches, paused,
                                             reachable_generators, reachable_grad, reachable_tensors, recording,
                                             tensor_meta)

__all__ = ["Attrs", "Leaf", "Read", "Recorder", "StateCheck", "is_state", "leaf_matches", "paused", "reachable_generators",
           "reachable_grad", "reachable_tensors", "recording", "tensor_meta"]
