"""`jit_compile="auto"` and `mixed_precision="auto"`: the live trial of XLA
and precision candidates, and the no-XLA baseline window that measures
the verdict's speedup by the same mechanism.

- `policy`: candidates, statuses, the tunables, the schedule's length and
  which candidates get no more windows (pure);
- `trial`: one trial's measurements and decision (pure);
- `model_state`: the live model's XLA/precision state, put back or into a
  candidate's configuration;
- `runner`: the trial and the baseline on the live model;
- `memory`: decisions remembered across runs.
"""
