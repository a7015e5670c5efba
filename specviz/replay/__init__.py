"""What a recorded greedy run would have done under another schedule, from its ranks and a
latency model, with no model loaded: the latency model (``latency``), the serial, PEARL and
SSD schedules (``schedules``), and the what-if replays of a run (``what_if``). Pure: no torch."""
