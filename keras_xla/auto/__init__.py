"""`jit_compile="auto"` and `mixed_precision="auto"`: the live trial of XLA
and precision candidates, and the no-XLA baseline window that measures
the verdict's speedup by the same mechanism (ARCHITECTURE.md lists the
modules).
"""
