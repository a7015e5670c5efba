"""Timed experiments on a loaded pair: forward-pass costs and the verify-cost curve
(``forward_costs``), the branch passes a replay needs (``branch_costs``), the race against the
target alone (``race``), the γ sweep (``sweep``), and PEARL run for real in two threads
(``pearl_real``)."""
