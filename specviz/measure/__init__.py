"""Timed experiments on a loaded pair: forward-pass costs and the verify-cost curve
(``forward_costs``), the branch passes a replay needs (``branch_costs``), the draft variant
that pays on this machine (``draft_choice``), the race against the target alone (``race``),
the γ sweep (``sweep``), and PEARL and SSD run for real in two threads (``pearl_real``,
``ssd_real`` on ``two_threads``) beside their simulations (``real_vs_sim``)."""
