"""The decode loop (``decode``): chain drafters (``drafters``) or token trees (``tree``)
propose, the acceptance rules (``acceptance``) verify; tokens become text off the clock
(``detokenize``); sessions take turns at one pair (``turns``). Never imports a measurement,
a figure or a front end."""
