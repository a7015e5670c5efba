"""The decode loop (``decode``): chain drafters (``drafters``) or token trees (``tree``)
propose, the acceptance rules (``acceptance``) verify; tokens become text off the clock
(``detokenize``). Never imports a measurement, a figure or a front end; sessions take turns
at one pair in the app's engine worker (``specviz.worker``)."""
