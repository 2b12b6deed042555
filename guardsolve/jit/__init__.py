"""The JIT: `guarded(fn)` caches traces keyed by their minimal guards and runs each through a
backend, today's op-by-op replay (`backend="replay"`) or Inductor's compiled kernels
(`backend="inductor"`, `inductor/`), whose entries can be kept across processes (`store.py`).
"""
