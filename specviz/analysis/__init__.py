"""What a run means, read off its trace: closed-form theory (``theory``), the metrics table
(``metrics``), a round's tokens as marked spans (``marks``), the story of one round
(``round_story``), and autoregressive against speculative (``compare``). Pure: no torch."""
