"""The record: what a run is, as plain data every layer shares. The trace (``run_trace``) and its
JSON schema (``schema``), the limits of a run (``limits``), the draft-length policies
(``policies``), where a run stops (``stopping``), validation of settings (``validate``),
errors, busy-machine marks (``contention``) and the translator (``i18n``). Loads with the standard library and pydantic
only: no torch, so a recorded run opens with no model."""
